"""The XLA:CPU settings the engine runs with, added to ``XLA_FLAGS`` when the package is
imported (JAX reads them when it starts its backend, so a process that has already
computed something keeps the flags it started with).

``xla_cpu_experimental_ynn_fusion_type`` empty: no YNNPACK fusions. By default XLA:CPU
(jax 0.10) compiles dots with their elementwise neighbours into YNNPACK fusions; the
recurrent learners' small per-step GEMMs and the SMAX env step ran slower in them than
in XLA's own loops with Eigen's GEMMs, even on one thread (MAPPO-RNN on SMAX 3m, 2-core
CPU: 2,680 -> 3,167 env steps/s on one thread). Float results change in the last bits, as
with any GEMM library.

``xla_cpu_multi_thread_eigen=false`` where ``XLA_FLAGS`` splits the CPU into several host
devices (``xla_force_host_platform_device_count``): the devices are then the parallelism,
and a thread pool shared by all of them only oversubscribes the cores (MAPPO-RNN on two
host devices of a 2-core CPU: 4,169 env steps/s with one thread per device, 3,430 with
the shared pool; QMIX-RNN within run-to-run noise).

A flag the user's own ``XLA_FLAGS`` sets is left as they set it; ``JAXMARL_LLM_XLA_DEFAULTS=0``
adds none of these.
"""

from __future__ import annotations

import os
import re
from collections.abc import MutableMapping

OPT_OUT = "JAXMARL_LLM_XLA_DEFAULTS"
CPU_FLAGS = {"xla_cpu_experimental_ynn_fusion_type": ""}
HOST_DEVICES = "xla_force_host_platform_device_count"
HOST_DEVICE_FLAGS = {"xla_cpu_multi_thread_eigen": "false"}  # where HOST_DEVICES > 1


def host_devices(flags: str) -> int:
    """The host device count ``flags`` asks for (1 where it asks for none)."""
    match = re.search(rf"--{HOST_DEVICES}=(\d+)", flags)
    return int(match.group(1)) if match else 1


def with_defaults(flags: str) -> str:
    """``flags`` (an ``XLA_FLAGS`` value) with every default it does not set itself."""
    defaults = dict(CPU_FLAGS)
    if host_devices(flags) > 1:
        defaults.update(HOST_DEVICE_FLAGS)
    for name, value in defaults.items():
        if f"--{name}=" not in flags:
            flags = f"{flags} --{name}={value}".strip()
    return flags


def apply(environ: MutableMapping[str, str] = os.environ) -> None:
    """Add the defaults to ``environ["XLA_FLAGS"]`` unless ``JAXMARL_LLM_XLA_DEFAULTS=0``."""
    if environ.get(OPT_OUT, "1").strip() == "0":
        return
    environ["XLA_FLAGS"] = with_defaults(environ.get("XLA_FLAGS", ""))

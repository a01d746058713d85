"""Runs over several processes (hosts): joining them into one JAX system from the
launcher's environment, and the one process that writes the run folder.

Every process trains its own devices' part of the run's mesh (``runner.mesh``) and
saves its shards of each orbax checkpoint; the run folder's other files (config.yaml,
mesh.json, metrics.csv, eval.csv, summary.json, plots) are written by process 0 alone.
The run folder must be on a filesystem every process sees, as orbax checkpoints need.

(Not in ``runner``: importing that package starts JAX's backend, the envs' imports do,
and ``jax.distributed.initialize`` must come first.)
"""

from __future__ import annotations

import os
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from pathlib import Path

import jax
from jax.experimental import multihost_utils

from jaxmarl_llm.errors import ConfigError

COORDINATOR = "JAX_COORDINATOR_ADDRESS"
NUM_PROCESSES = "JAX_NUM_PROCESSES"
PROCESS_ID = "JAX_PROCESS_ID"


def _count(environ: Mapping[str, str], name: str, minimum: int) -> int:
    value = environ.get(name)
    if value is None:
        raise ConfigError(
            f"{COORDINATOR} is set, so this process joins a multi-process run, but {name} is "
            f"not: set {NUM_PROCESSES} (how many processes) and {PROCESS_ID} (this one's, "
            f"from 0) too"
        )
    try:
        n = int(value)
    except ValueError:
        n = minimum - 1
    if n < minimum:
        raise ConfigError(f"environment variable {name}={value!r}: not an integer >= {minimum}")
    return n


def _cluster_detected(environ: Mapping[str, str]) -> bool:
    """Whether this process is one task of several that ``jax.distributed.initialize()``
    finds on its own: a SLURM job step (``srun``) of several tasks, an Open MPI
    ``mpirun`` of several ranks, or a TPU slice of several hosts."""

    def more_than_one(name: str) -> bool:
        return environ.get(name, "").strip().isdigit() and int(environ[name]) > 1

    # in the batch script itself (no job step) SLURM_NTASKS is the allocation's, not a
    # count of processes that were started
    slurm = "SLURM_JOB_ID" in environ and "SLURM_STEP_NODELIST" in environ
    if slurm and more_than_one("SLURM_NTASKS"):
        return True
    if "OMPI_MCA_orte_hnp_uri" in environ and more_than_one("OMPI_COMM_WORLD_SIZE"):
        return True
    hosts = environ.get("TPU_PROCESS_ADDRESSES") or environ.get("TPU_WORKER_HOSTNAMES") or ""
    return "," in hosts


def initialize_from_environment(environ: Mapping[str, str] | None = None) -> bool:
    """Join the processes of a multi-process run, before anything touches JAX's devices;
    whether this process is one of several.

    With ``JAX_COORDINATOR_ADDRESS`` (host:port of process 0), ``JAX_NUM_PROCESSES`` and
    ``JAX_PROCESS_ID`` set, those; else on a cluster JAX recognises (see
    ``_cluster_detected``), what it reads there; else nothing (one process).
    """
    environ = os.environ if environ is None else environ
    address = environ.get(COORDINATOR)
    if address:
        num_processes = _count(environ, NUM_PROCESSES, 1)
        process_id = _count(environ, PROCESS_ID, 0)
        if process_id >= num_processes:
            raise ConfigError(
                f"environment variable {PROCESS_ID}={process_id}: process ids run from 0 to "
                f"{NUM_PROCESSES}-1 = {num_processes - 1}"
            )
        jax.distributed.initialize(address, num_processes=num_processes, process_id=process_id)
        return True
    if _cluster_detected(environ):
        jax.distributed.initialize()
        return True
    return False


def is_primary() -> bool:
    """Whether this process writes the run folder (process 0, or the only one)."""
    return jax.process_index() == 0


def sync(name: str) -> None:
    """Wait until every process gets here (nothing to wait for with one process)."""
    if jax.process_count() > 1:
        multihost_utils.sync_global_devices(name)


@contextmanager
def primary_first(name: str) -> Iterator[None]:
    """The block on process 0, then on the others: what it writes (a shaper's caches) is
    there for them to reuse rather than written by all at once. Process 0 releases the
    others even when its block fails, so they fail on their own rather than wait."""
    if jax.process_count() == 1:
        yield
        return
    if not is_primary():
        sync(name)
        yield
        return
    try:
        yield
    finally:
        sync(name)


def write_text(path: Path, text: str) -> None:
    """``path``'s new contents, written by process 0 only; replaced whole, so that the
    other processes reading it never see it half written."""
    if not is_primary():
        return
    tmp = path.with_name(f".{path.name}.tmp")
    tmp.write_text(text)
    os.replace(tmp, path)

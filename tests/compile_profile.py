"""Where the suite's time goes: per test, the seconds jax spent tracing, lowering to MLIR
and compiling with XLA, and how many programs it compiled (an eager op is a program of
its own). ``pytest --compile-profile=DIR`` (``tests/conftest.py``) writes one JSON file
per xdist worker into DIR; ``python tests/compile_profile.py DIR`` sums them up.
"""

from __future__ import annotations

import collections
import json
import os
import sys
import time
from pathlib import Path

import pytest

# jax's event -> the name it is recorded under
EVENTS = {
    "/jax/core/compile/jaxpr_trace_duration": "trace",
    "/jax/core/compile/jaxpr_to_mlir_module_duration": "lower",
    "/jax/core/compile/backend_compile_duration": "compile",
}
SMALL_COMPILE_S = 0.1  # an XLA compile under this is counted as a small (mostly eager) one


class CompileProfile:
    """The pytest plugin: jax's duration events summed per test."""

    def __init__(self, folder: Path):
        self.folder = folder
        self.seconds = collections.Counter()
        self.counts = collections.Counter()
        self.tests: dict[str, dict] = {}

    def listen(self, event: str, duration: float, **_) -> None:
        name = EVENTS.get(event)
        if name is None:
            return
        self.seconds[name] += duration
        self.counts[name] += 1
        if name == "compile" and duration < SMALL_COMPILE_S:
            self.seconds["small_compile"] += duration
            self.counts["small_compile"] += 1

    def pytest_configure(self, config):
        import jax.monitoring

        jax.monitoring.register_event_duration_secs_listener(self.listen)

    @pytest.hookimpl(hookwrapper=True)
    def pytest_runtest_protocol(self, item, nextitem):
        seconds, counts, start = self.seconds.copy(), self.counts.copy(), time.perf_counter()
        yield
        row = {"wall": time.perf_counter() - start}
        row.update({k: v - seconds[k] for k, v in self.seconds.items()})
        row.update({f"n_{k}": v - counts[k] for k, v in self.counts.items()})
        self.tests[item.nodeid] = row

    def pytest_unconfigure(self, config):
        self.folder.mkdir(parents=True, exist_ok=True)
        worker = os.environ.get("PYTEST_XDIST_WORKER", "main")
        (self.folder / f"{worker}.json").write_text(json.dumps(self.tests))


def summarize(folder: Path, top: int = 25) -> str:
    tests: dict[str, dict] = {}
    for f in sorted(folder.glob("*.json")):
        tests.update(json.loads(f.read_text()))
    total = collections.Counter()
    for row in tests.values():
        total.update(row)
    rest = total["wall"] - total["trace"] - total["lower"] - total["compile"]
    lines = [
        f"{len(tests)} tests, {total['wall']:.0f} s in tests (all workers): trace "
        f"{total['trace']:.0f} s, lower {total['lower']:.0f} s, XLA compile "
        f"{total['compile']:.0f} s over {total['n_compile']:.0f} programs "
        f"({total['n_small_compile']:.0f} under {SMALL_COMPILE_S} s: "
        f"{total['small_compile']:.0f} s); the rest {rest:.0f} s",
        f"{'wall':>6} {'trace':>6} {'lower':>6} {'xla':>6} {'progs':>5}  test",
    ]
    rows = sorted(tests.items(), key=lambda kv: -kv[1]["wall"])[:top]
    for name, r in rows:
        lines.append(
            f"{r['wall']:6.1f} {r.get('trace', 0):6.1f} {r.get('lower', 0):6.1f} "
            f"{r.get('compile', 0):6.1f} {r.get('n_compile', 0):5.0f}  {name}"
        )
    return "\n".join(lines)


if __name__ == "__main__":
    print(summarize(Path(sys.argv[1]), int(sys.argv[2]) if len(sys.argv) > 2 else 25))

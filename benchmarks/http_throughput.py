"""Labels per second through the OpenAI-compatible HTTP path, with a trivial backend.

    python benchmarks/http_throughput.py --requests 500 --concurrency 1 8 32 [--json]

Starts the local server with the test ``echo`` backend and no faults (``python -m
jaxmarl_llm.testing.fault_server --backend echo`` in its own process, or in this process
with ``--in-process``) and sends ``--requests`` short chat
requests through ``OpenAICompatibleBackend.generate`` for each ``max_concurrency``. The
backend answers at once (plus ``--latency-ms`` per answer, to model a model), so the
numbers measure the client + HTTP + server overhead. Reports the best of ``--repeats``.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from jaxmarl_llm.lm.backend import Request, SamplingParams  # noqa: E402
from jaxmarl_llm.lm.http import OpenAICompatibleBackend  # noqa: E402
from jaxmarl_llm.lm.server import LLMServer  # noqa: E402
from jaxmarl_llm.testing.fault_server import EchoBackend  # noqa: E402


@contextlib.contextmanager
def server_url(in_process: bool, latency_ms: float):
    if in_process:
        with LLMServer(EchoBackend(), latency_s=latency_ms / 1000.0) as server:
            yield server.url
        return
    env = {
        **os.environ,
        "PYTHONPATH": os.pathsep.join([str(ROOT), os.environ.get("PYTHONPATH", "")]),
    }
    command = [sys.executable, "-m", "jaxmarl_llm.testing.fault_server", "--port", "0",
               "--backend", "echo", "--latency-ms", str(latency_ms)]  # fmt: skip
    proc = subprocess.Popen(command, cwd=ROOT, env=env, stdout=subprocess.PIPE, text=True)
    try:
        line = proc.stdout.readline()
        if " at " not in line:
            raise RuntimeError(f"server did not start: {line!r}")
        yield line.split(" at ")[1].strip()
    finally:
        proc.terminate()
        proc.wait(timeout=10)


def measure(url: str, n: int, concurrency: int, repeats: int) -> dict:
    params = SamplingParams(max_tokens=16)
    requests = [
        Request(f"label state {i}: which agent helped most?", params=params) for i in range(n)
    ]
    with OpenAICompatibleBackend(
        url, model="echo", api_key_env=None, max_concurrency=concurrency, timeout_s=30
    ) as backend:
        backend.generate(requests[: 2 * concurrency])  # open the pooled connections
        best = float("inf")
        for _ in range(repeats):
            start = time.perf_counter()
            out = backend.generate(requests)
            best = min(best, time.perf_counter() - start)
        assert len(out) == n and out[0].text.startswith("label state 0")
        usage = backend.usage.as_dict()
    return {
        "max_concurrency": concurrency,
        "requests": n,
        "seconds": best,
        "requests_per_s": n / best,
        "retries": usage["retries"],
    }


def main(argv: list[str] | None = None) -> dict:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--requests", type=int, default=500)
    parser.add_argument("--concurrency", type=int, nargs="+", default=[1, 8, 32])
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--latency-ms", type=float, default=0.0, help="server wait per answer")
    parser.add_argument("--in-process", action="store_true", help="server in this process")
    parser.add_argument("--json", action="store_true", help="print one JSON line")
    args = parser.parse_args(argv)
    results = []
    with server_url(args.in_process, args.latency_ms) as url:
        for concurrency in args.concurrency:
            row = measure(url, args.requests, concurrency, args.repeats)
            results.append(row)
            if not args.json:
                print(
                    f"max_concurrency={concurrency:3d}: {row['requests']} requests in "
                    f"{row['seconds']:.3f} s = {row['requests_per_s']:.0f} requests/s",
                    flush=True,
                )
    out = {
        "server": "in-process" if args.in_process else "subprocess",
        "latency_ms": args.latency_ms,
        "cpu_count": os.cpu_count(),
        "results": results,
    }
    if args.json:
        print(json.dumps(out), flush=True)
    return out


if __name__ == "__main__":
    main()

"""Weak scaling of training over devices: env steps/s with a fixed number of envs per device.

    python benchmarks/scaling.py --algo ippo --env mpe:simple_spread_3 \
        --devices 1 2 4 8 --envs-per-device 8192 --json

Each device count runs in its own process (a process cannot change its device count):
on a CPU with ``XLA_FLAGS=--xla_force_host_platform_device_count=N`` (N host devices
sharing the machine's cores), on a GPU/TPU host on its first N devices; counts above
what the host has are refused before anything runs. Each process trains through the
runner's path: the learner of one data shard under ``ShardedLearner`` on a mesh of N
devices along the data axis (``mesh.devices=N``, one seed), ``num_envs = N *
--envs-per-device``. After compiling and one untimed chunk, ``--repeats`` chunks of
``--updates`` updates are timed to ``block_until_ready``; the best counts.

``efficiency`` is steps/s at N / (N x steps/s at the smallest count measured, normally 1).
Replay learners (qmix, ...) keep ``algo.batch_size`` and ``algo.buffer_size`` per device
(multiplied by N: each device samples the same batch from a buffer of the same size) and
train from the first update (``learning_starts=0``).

On one device the runner's path is the plain ``jax.jit(jax.vmap(run_chunk))`` (no
``shard_map``, see ``runner.mesh``), so the 1-device row is the unsharded learner's speed.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import re
import subprocess
import sys
import time

FORCE_FLAG = "--xla_force_host_platform_device_count"


def child_env(devices: int) -> dict:
    """This process's environment with ``devices`` forced host devices (the flag only
    acts on the CPU platform, so it is harmless where the default backend is a GPU)."""
    env = dict(os.environ)
    flags = re.sub(rf"{FORCE_FLAG}=\S*", "", env.get("XLA_FLAGS", "")).split()
    env["XLA_FLAGS"] = " ".join([*flags, f"{FORCE_FLAG}={devices}"])
    return env


def check_counts(backend: str, available: int, wanted: list[int]) -> None:
    """Refuse device counts the host does not have (a CPU makes as many as asked)."""
    too_many = [n for n in wanted if n > available]
    if too_many:
        raise SystemExit(
            f"--devices {' '.join(map(str, too_many))}: this host has {available} {backend} "
            f"device(s); ask for at most {available} (or run on CPU: JAX_PLATFORMS=cpu)"
        )


def probe(devices: int) -> tuple[str, int]:
    """The default backend and its device count, seen by a process started with
    ``devices`` forced host devices."""
    code = "import jax, json; print(json.dumps([jax.default_backend(), jax.device_count()]))"
    out = subprocess.run(
        [sys.executable, "-c", code],
        env=child_env(devices),
        capture_output=True,
        text=True,
        check=True,
    )
    backend, count = json.loads(out.stdout.strip().splitlines()[-1])
    return backend, int(count)


def cpu_name() -> str:
    try:
        with open("/proc/cpuinfo") as f:
            for line in f:
                if line.startswith("model name"):
                    return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or platform.machine()


# ----- one device count, in its own process ---------------------------------------------


def _timed(fn, state, repeats: int, warmup: int):
    """``fn`` chained on ``state`` (donated) ``warmup`` times, then timed ``repeats``
    times: (state, metrics, seconds of each timed call)."""
    import jax

    metrics = None
    for _ in range(warmup):
        state, metrics = jax.block_until_ready(fn(state))
    times = []
    for _ in range(repeats):
        t0 = time.perf_counter()
        state, metrics = jax.block_until_ready(fn(state))
        times.append(time.perf_counter() - t0)
    return state, metrics, times


def _final_return(metrics) -> float | None:
    import numpy as np

    ret = np.asarray(metrics["episode_return"], np.float64)
    return None if np.all(np.isnan(ret)) else float(np.nanmean(ret))


def worker(args) -> dict:
    """Train on ``args.worker`` devices: the JSON row of that count."""
    import jax

    import envs
    from jaxmarl_llm.config import build_config
    from jaxmarl_llm.learners import algo_spec, make_learner
    from jaxmarl_llm.runner.mesh import ShardedLearner, make_run_mesh
    from jaxmarl_llm.shaping.registry import build_shaper

    n = args.worker
    over = [f"env.name={args.env}", *args.overrides, "num_seeds=1"]
    over.append("algo.total_timesteps=1e15")  # at least one update; set below
    if args.num_steps:
        over.append(f"algo.num_steps={args.num_steps}")
    raw = {"algo": {"name": args.algo}}
    replay = algo_spec(args.algo).replay
    if replay:  # per device: the config of one device's envs
        one = build_config(raw, [*over, f"algo.num_envs={args.envs_per_device}"]).algo
        buffer = int(one.buffer_size) * n
        over += [f"algo.buffer_size={buffer}", "algo.learning_starts=0"]
        over.append(f"algo.batch_size={min(int(one.batch_size) * n, buffer)}")
    over += [f"algo.num_envs={n * args.envs_per_device}", f"mesh.devices={n}", "mesh.seeds=1"]
    cfg = build_config(raw, over)
    steps = cfg.algo.num_steps * cfg.algo.num_envs
    chunks = args.repeats + args.warmup
    cfg.algo.total_timesteps = steps * args.updates * chunks

    env = envs.make_array_env(cfg.env.name, **cfg.env.kwargs)
    shaper = build_shaper(cfg.shaping, env)
    whole = make_learner(cfg.algo, env, shaper)
    mesh = make_run_mesh(cfg.mesh, 1)
    part = whole if mesh.data == 1 else make_learner(cfg.algo, env, shaper, mesh.shards)
    sharded = ShardedLearner(whole, part, mesh)
    keys = jax.random.split(jax.random.PRNGKey(0), 1)

    t0 = time.perf_counter()
    state = sharded.init()(sharded.place_keys(keys))
    chunk = sharded.chunk(args.updates).lower(state).compile()
    compile_s = time.perf_counter() - t0
    env_steps = args.updates * whole.env_steps_per_update
    row = {
        "devices": n,
        "mesh": mesh.describe(),
        "num_envs": int(cfg.algo.num_envs),
        "num_steps": int(cfg.algo.num_steps),
        "env_steps_per_chunk": env_steps,
        "compile_s": compile_s,
    }
    if replay:
        row.update(buffer_size=int(cfg.algo.buffer_size), batch_size=int(cfg.algo.batch_size))
    state, metrics, times = _timed(chunk, state, args.repeats, args.warmup)
    row["run_s"] = min(times)
    row["run_s_all"] = times
    row["env_steps_per_s"] = env_steps / min(times)
    row["final_return"] = _final_return(metrics)
    return row


# ----- the table ----------------------------------------------------------------------------


def run_count(n: int, args) -> dict:
    """The row of ``n`` devices, from a process started with ``n`` forced host devices."""
    argv = [
        sys.executable, os.path.abspath(__file__), "--worker", str(n),
        "--algo", args.algo, "--env", args.env, "--envs-per-device", str(args.envs_per_device),
        "--updates", str(args.updates), "--repeats", str(args.repeats),
        "--warmup", str(args.warmup),
    ]  # fmt: skip
    if args.num_steps:
        argv += ["--num-steps", str(args.num_steps)]
    proc = subprocess.run(argv + list(args.overrides), env=child_env(n), stdout=subprocess.PIPE)
    if proc.returncode != 0:
        raise SystemExit(f"the run on {n} device(s) failed (exit {proc.returncode}); see above")
    return json.loads(proc.stdout.decode().strip().splitlines()[-1])


def main(argv=None) -> dict:
    from jaxmarl_llm.learners.registry import algo_names

    p = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    p.add_argument("--algo", default="ippo", choices=algo_names())
    p.add_argument("--env", default="mpe:simple_spread_3")
    p.add_argument("--devices", type=int, nargs="+", default=[1, 2, 4, 8])
    p.add_argument("--envs-per-device", type=int, default=8192)
    p.add_argument("--num-steps", type=int, default=None, help="steps per env per update")
    p.add_argument("--updates", type=int, default=3, help="updates per timed chunk")
    p.add_argument("--repeats", type=int, default=2, help="timed chunks; the best counts")
    p.add_argument("--warmup", type=int, default=1, help="untimed chunks after compiling")
    p.add_argument("--json", action="store_true", help="print one JSON line")
    p.add_argument("--out", default=None, help="also write the JSON to this file")
    p.add_argument("--worker", type=int, default=None, help=argparse.SUPPRESS)
    p.add_argument("overrides", nargs="*", help="extra config overrides, key=value")
    args = p.parse_args(argv)
    if args.worker is not None:
        row = worker(args)
        print(json.dumps(row))
        return row

    counts = sorted(set(args.devices))
    if counts[0] < 1:
        raise SystemExit("--devices: counts are at least 1")
    backend, available = probe(max(counts))
    check_counts(backend, available, counts)
    rows = []
    for n in counts:
        try:
            rows.append(run_count(n, args))
        except SystemExit:
            if args.out:  # what finished
                with open(args.out, "w") as f:
                    f.write(json.dumps({"rows": rows, "failed_devices": n}) + "\n")
            raise
        if not args.json:
            print(f"{n} device(s): {rows[-1]['env_steps_per_s']:,.0f} env steps/s", flush=True)
    base = rows[0]["env_steps_per_s"] / rows[0]["devices"]
    for row in rows:
        row["efficiency"] = row["env_steps_per_s"] / (row["devices"] * base)
    import jax

    out = {
        "algo": args.algo,
        "env": args.env,
        "envs_per_device": args.envs_per_device,
        "num_steps": rows[0]["num_steps"],
        "updates": args.updates,
        "repeats": args.repeats,
        "overrides": list(args.overrides),
        "efficiency_base_devices": rows[0]["devices"],
        "rows": rows,
        "backend": backend,
        "device_kind": rows[0]["mesh"].get("device_kind"),
        "host_cpu": cpu_name(),
        "host_cores": os.cpu_count(),
        "jax": jax.__version__,
    }
    text = json.dumps(out)
    if args.out:
        with open(args.out, "w") as f:
            f.write(text + "\n")
    if args.json:
        print(text)
    else:
        print(f"{'devices':>8} {'num_envs':>9} {'env steps/s':>12} {'efficiency':>10}")
        for r in rows:
            print(
                f"{r['devices']:>8} {r['num_envs']:>9} {r['env_steps_per_s']:>12,.0f} "
                f"{r['efficiency']:>10.2f}"
            )
    return out


if __name__ == "__main__":
    main()

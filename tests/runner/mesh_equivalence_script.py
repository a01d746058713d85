"""Learners on 4 forced CPU devices against 4 virtual data shards and against one device,
and ``experiments/run.py`` on a 4-device mesh, resumed on 2; one process for all of it
(``test_mesh_devices.py`` runs it). Prints one JSON object on its last stdout line.

Run with ``XLA_FLAGS=--xla_force_host_platform_device_count=4``; ``argv[1]`` is a scratch
folder, ``argv[2]`` (optional) a persistent compilation cache: the run.py runs on 4
devices compile what the comparisons compiled (the same config and chunk length).
``JAXMARL_MESH_QUICK=1``: only IPPO's 4 devices against one device, over fewer updates,
and run.py's 4-device IPPO run (the quick check, `test_mesh_devices.py`).
"""

from __future__ import annotations

import contextlib
import io
import json
import os
import sys
import time
from pathlib import Path

import jax
import numpy as np
from omegaconf import OmegaConf

ROOT = Path(__file__).resolve().parents[2]
QUICK = os.environ.get("JAXMARL_MESH_QUICK") == "1"
SEEDS = 8
UPDATES = 3 if QUICK else 6

# Tiny versions of the experiment configs; ``log_every=1``: the comparisons step one
# update per call, and run.py's runs then compile the same chunk.
CONFIGS = {
    "ippo": (
        "ippo_mpe_spread",
        [
            "algo.num_envs=16",
            "algo.num_steps=16",
            "algo.total_timesteps=4096",
            "algo.anneal_lr=false",  # a run whose budget is extended keeps its lr
        ],
    ),
    "mappo": (
        "mappo_mpe_spread",
        ["algo.num_envs=16", "algo.num_steps=16", "algo.total_timesteps=4096"],
    ),
    "qmix": (
        "qmix_spread_3",
        [
            "algo.total_timesteps=1664",  # 8 updates of 8 envs x 26 steps
            "algo.learning_starts=0",
            "algo.buffer_size=64",
            "algo.batch_size=8",
            "eval.every=0",
        ],
    ),
}
COMMON = [f"num_seeds={SEEDS}", "log_every=1", "checkpoint_every=4", "progress=false", "plot=false"]


def leaves(tree) -> list[np.ndarray]:
    return [np.asarray(x, np.float64) for x in jax.tree.leaves(tree)]


def rel_diff(a, b) -> float:
    """The largest difference over leaves, relative to the leaf's largest value."""
    out = 0.0
    for x, y in zip(leaves(a), leaves(b), strict=True):
        if x.size:
            out = max(out, float(np.max(np.abs(x - y)) / (np.max(np.abs(y)) + 1e-12)))
    return out


def train(sharded, keys) -> tuple[list, dict]:
    """``UPDATES`` single-update chunks: the params after each, metrics ``[seeds, updates]``."""
    state = sharded.init()(sharded.place_keys(keys))
    step = sharded.chunk(1)
    params, metrics = [], []
    for _ in range(UPDATES):
        state, m = step(state)
        params.append(jax.device_get(state.params))
        metrics.append(jax.device_get(m))
    return params, {k: np.concatenate([m[k] for m in metrics], 1) for k in metrics[0]}


def compare(algo: str) -> dict:
    from jaxmarl_llm.config import load_config
    from jaxmarl_llm.learners import make_learner
    from jaxmarl_llm.runner.build import make_env, make_shaper_and_learner, seed_keys
    from jaxmarl_llm.runner.mesh import RunMesh, ShardedLearner, make_run_mesh

    name, overrides = CONFIGS[algo]
    cfg = load_config(name, [*overrides, *COMMON])
    env = make_env(cfg)
    shaper, whole = make_shaper_and_learner(cfg, env, Path("unused"))
    four = make_run_mesh(OmegaConf.create({"devices": 4, "seeds": 1}), SEEDS)
    part = make_learner(cfg.algo, env, shaper, four.shards)
    one = make_run_mesh(OmegaConf.create({"devices": 1, "seeds": 1}), SEEDS)
    keys = seed_keys(cfg)
    (p4, m4), (p1, m1) = (
        train(ShardedLearner(whole, part, four), keys),
        train(ShardedLearner(whole, whole, one), keys),
    )
    out = {
        "data_axis": four.data,
        "params_differ_from_one_device": rel_diff(p4[0], p1[0]),
        "metrics": {"devices": m4, "one": m1},
    }
    if not QUICK:
        pv, mv = train(ShardedLearner(whole, part, RunMesh(1, 4)), keys)
        out["params_rel_diff"] = [rel_diff(a, b) for a, b in zip(p4, pv, strict=True)]
        out["metrics"]["virtual"] = mv
    out["metrics"] = {
        mode: {k: np.asarray(v, np.float64).tolist() for k, v in m.items()}
        for mode, m in out["metrics"].items()
    }
    return out


def run_py(*argv: str) -> dict:
    """``experiments/run.py argv`` in this process: its exit code and stderr."""
    sys.path.insert(0, str(ROOT / "experiments"))
    import run

    err = io.StringIO()
    with contextlib.redirect_stderr(err), contextlib.redirect_stdout(io.StringIO()):
        code = run.main(list(argv))
    return {"code": code, "stderr": err.getvalue()[-2000:]}


def run_folder(path: Path) -> dict:
    summary = path / "summary.json"
    rows = (path / "metrics.csv").read_text().splitlines()[1:]
    return {
        "summary": json.loads(summary.read_text()) if summary.exists() else None,
        "mesh_json": json.loads((path / "mesh.json").read_text()),
        "metric_rows": len(rows),
    }


def runs(scratch: Path) -> dict:
    out = {}
    name, overrides = CONFIGS["ippo"]
    ippo = scratch / "ippo"
    base = [name, *overrides, *COMMON, f"out_dir={ippo}"]
    out["ippo_4"] = run_py(*base, "mesh.devices=4") | run_folder(ippo)
    if QUICK:
        return out
    bigger = [b if not b.startswith("algo.total") else "algo.total_timesteps=6144" for b in base]
    out["ippo_resumed_on_2"] = run_py(*bigger, "mesh.devices=2", f"resume={ippo}")
    out["ippo_resumed_on_2"] |= run_folder(ippo)

    name, overrides = CONFIGS["qmix"]
    qmix = scratch / "qmix"
    base = [name, *overrides, *COMMON, f"out_dir={qmix}"]
    out["qmix_4"] = run_py(*base, "mesh.devices=4") | run_folder(qmix)
    out["qmix_resumed_on_2"] = run_py(*base, "mesh.devices=2", f"resume={qmix}")
    out["qmix_checkpoints"] = sorted(int(p.name) for p in (qmix / "checkpoints").iterdir())
    return out


def main() -> None:
    scratch = Path(sys.argv[1])
    if len(sys.argv) > 2:
        jax.config.update("jax_compilation_cache_dir", sys.argv[2])
        jax.config.update("jax_persistent_cache_min_compile_time_secs", 0)
        jax.config.update("jax_persistent_cache_min_entry_size_bytes", 0)
    result = {"devices": jax.device_count(), "compare": {}, "seconds": {}}
    for algo in ("ippo",) if QUICK else CONFIGS:
        t = time.perf_counter()
        result["compare"][algo] = compare(algo)
        result["seconds"][algo] = time.perf_counter() - t
    t = time.perf_counter()
    result["runs"] = runs(scratch)
    result["seconds"]["runs"] = time.perf_counter() - t
    print(json.dumps(result))


if __name__ == "__main__":
    main()

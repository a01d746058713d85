"""Short runs of every learner and method, compared number for number with a reference.

A change meant to leave learning as it is (a refactor, a speed-up that keeps the
computation) must give the same numbers: every logged metric of every update and the
final train state of twelve tiny runs (IPPO, MAPPO FF and GRU, QMIX, VDN, QPLEX, MADDPG,
DPM under QMIX and MAPPO, LCA, YOLO-MARL under MAPPO and QMIX), to 1e-5 relative::

    python benchmarks/golden_runs.py check                  # against the stored reference
    python benchmarks/golden_runs.py check dpm_qmix lca_two_switch
    python benchmarks/golden_runs.py write --out ref.json   # a reference of this code

The stored reference was written on a CPU with jax 0.10.2; another backend or jax version
orders floating-point sums differently, so write a reference with the code before the
change on the same machine and check the changed code against it. The final state is
compared as, per leaf shape, the sorted list of leaf sums: a field added, renamed or moved
within the state does not count as a difference, a changed value does.
"""

from __future__ import annotations

import argparse
import csv
import json
import math
import sys
import tempfile
from collections import defaultdict
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
REFERENCE = ROOT / "benchmarks" / "results" / "golden_runs_cpu_jax0.10.2.json"

COMMON = ["num_seeds=2", "log_every=2", "progress=false", "plot=false"]
PPO = [
    "algo.num_envs=8",
    "algo.num_steps=8",
    "algo.total_timesteps=384",
    "algo.num_minibatches=2",
    "algo.hidden_sizes=[16,16]",
]
Q = [
    "algo.num_envs=4",
    "algo.num_steps=8",
    "algo.total_timesteps=256",
    "algo.learning_starts=32",
    "algo.batch_size=4",
    "algo.buffer_size=64",
    "algo.hidden_dim=16",
    "algo.updates_per_rollout=2",
]
MADDPG = [
    "algo.num_envs=4",
    "algo.num_steps=8",
    "algo.total_timesteps=256",
    "algo.learning_starts=32",
    "algo.batch_size=16",
    "algo.buffer_size=256",
    "algo.hidden_sizes=[16,16]",
]
EVAL = ["eval.every=2", "eval.episodes=4", "eval.max_steps=30"]
DPM = {
    "name": "dpm",
    "kwargs": {
        "rounds": 2,
        "every": 2,
        "labels_per_round": 10,
        "segment_length": 4,
        "collect_steps": 16,
        "fit_steps": 20,
        "batch_size": 8,
    },
}
SPREAD = {"name": "mpe:simple_spread_3"}
SMAX = {"name": "smax:3m", "kwargs": {"reward": "strong_sparse", "max_steps": 40}}
YOLO_LBF = {"name": "yolo", "kwargs": {"reward": 0.005, "penalty": 0.005}}

# name -> (config, overrides)
RUNS: dict[str, tuple[dict, list[str]]] = {
    "ippo_spread": ({"env": SPREAD, "algo": {"name": "ippo"}}, PPO + EVAL),
    "mappo_std_spread": (
        {"env": SPREAD, "algo": {"name": "mappo"}},
        PPO + ["algo.standardize_rewards=true", "algo.param_sharing=per_agent"],
    ),
    "mappo_rnn_smax": (
        {"env": SMAX, "algo": {"name": "mappo"}},
        PPO + ["algo.recurrent=true", "algo.gru_hidden_dim=16"],
    ),
    "qmix_spread": ({"env": SPREAD, "algo": {"name": "qmix"}}, Q + ["algo.td_lambda=0.6", *EVAL]),
    "vdn_smax": ({"env": SMAX, "algo": {"name": "vdn"}}, Q + ["algo.stored_hidden=true"]),
    "qplex_smax": ({"env": SMAX, "algo": {"name": "qplex"}}, Q),
    "maddpg_spread": ({"env": SPREAD, "algo": {"name": "maddpg"}}, MADDPG),
    "dpm_qmix": ({"env": SMAX, "algo": {"name": "qmix"}, "shaping": DPM}, Q),
    "dpm_mappo": ({"env": SMAX, "algo": {"name": "mappo"}, "shaping": DPM}, PPO),
    "lca_two_switch": (
        {
            "env": {"name": "two_switch"},
            "algo": {"name": "ippo"},
            "shaping": {"name": "lca", "kwargs": {"num_pairs": 200}},
        },
        PPO,
    ),
    "yolo_lbf_mappo": (
        {"env": {"name": "lbf:8x8-2p-2f-coop"}, "algo": {"name": "mappo"}, "shaping": YOLO_LBF},
        PPO,
    ),
    "yolo_spread_qmix": ({"env": SPREAD, "algo": {"name": "qmix"}, "shaping": {"name": "yolo"}}, Q),
}
TIMING_COLUMNS = {"wall_s", "steps_per_s"}
RTOL = 1e-5


def _rows(path: Path) -> list[dict]:
    with path.open() as f:
        return list(csv.DictReader(f))


def run(name: str) -> dict:
    """The numbers of one run: metrics by column, eval metrics, final-state leaf sums."""
    import jax
    import numpy as np

    from jaxmarl_llm.config import build_config
    from jaxmarl_llm.runner import run_experiment

    raw, overrides = RUNS[name]
    with tempfile.TemporaryDirectory() as tmp:
        out = Path(tmp) / "run"
        result = run_experiment(
            build_config({"name": name, **raw}, [*overrides, *COMMON, f"out_dir={out}"])
        )
        rows = _rows(out / "metrics.csv")
        metrics = {k: [float(r[k]) for r in rows] for k in rows[0] if k not in TIMING_COLUMNS}
        if (out / "eval.csv").exists():
            evals = _rows(out / "eval.csv")
            metrics.update({f"eval:{k}": [float(r[k]) for r in evals] for k in evals[0]})
    leaves = sorted(
        (str(tuple(x.shape)), float(np.asarray(x, np.float64).sum()))
        for x in jax.tree.leaves(result.state)
        if np.issubdtype(np.asarray(x).dtype, np.number)
    )
    return {"metrics": metrics, "leaves": leaves}


def _close(a: float, b: float) -> bool:
    if math.isnan(a) or math.isnan(b):
        return math.isnan(a) and math.isnan(b)
    return abs(a - b) <= RTOL * max(1.0, abs(a), abs(b))


def differences(reference: dict, got: dict) -> list[str]:
    """What differs between two results of ``run`` (empty: the same numbers)."""
    out = []
    for key, values in reference["metrics"].items():
        mine = got["metrics"].get(key)
        if mine is None:
            out.append(f"metric {key} is missing")
        elif len(mine) != len(values) or not all(map(_close, values, mine)):
            out.append(f"metric {key}: last {values[-3:]} in the reference, {mine[-3:]} now")
    by_shape = [defaultdict(list), defaultdict(list)]
    for sums, result in zip(by_shape, (reference, got), strict=True):
        for shape, total in result["leaves"]:
            sums[shape].append(total)
    if {k: len(v) for k, v in by_shape[0].items()} != {k: len(v) for k, v in by_shape[1].items()}:
        out.append("the final state's leaves have other shapes")
    else:
        for shape, totals in by_shape[0].items():
            if not all(map(_close, sorted(totals), sorted(by_shape[1][shape]))):
                out.append(f"final-state leaves of shape {shape} differ")
    return out


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("mode", choices=["check", "write"])
    parser.add_argument("runs", nargs="*", help=f"a subset of: {', '.join(RUNS)}")
    parser.add_argument("--reference", type=Path, default=REFERENCE, help="for check")
    parser.add_argument("--out", type=Path, default=REFERENCE, help="for write")
    args = parser.parse_args(argv)
    unknown = sorted(set(args.runs) - set(RUNS))
    if unknown:
        parser.error(f"unknown runs {unknown}; choose from {', '.join(RUNS)}")
    names = args.runs or list(RUNS)
    if args.mode == "write":
        written = json.loads(args.out.read_text()) if args.out.exists() else {}
        for name in names:
            written[name] = run(name)
            args.out.write_text(json.dumps(written))  # each run kept as it finishes
            print(f"wrote {name}", flush=True)
        return 0
    reference = json.loads(args.reference.read_text())
    failed = 0
    for name in names:
        if name not in reference:
            print(f"MISSING {name}: not in {args.reference}")
            failed += 1
            continue
        diff = differences(reference[name], run(name))
        print(
            f"OK      {name}" if not diff else f"DIFF    {name}: {'; '.join(diff[:6])}", flush=True
        )
        failed += bool(diff)
    return 1 if failed else 0


if __name__ == "__main__":
    sys.path.insert(0, str(ROOT))
    sys.exit(main())

"""Greedy evaluation of a trained run: ``python experiments/evaluate.py RUN_DIR [RUN_DIR ...]``.

Restores each run's latest checkpoint and plays its greedy policy (most likely legal
action; epsilon 0 for QMIX) on ``--episodes`` fresh episodes per seed, as papers report
test returns and win rates. Prints one JSON object per run and writes it to
``RUN_DIR/evaluation.json``. Runs made with ``eval.every`` > 0 also have ``eval.csv``.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path


def evaluate_run(run_dir: Path, episodes: int, max_steps: int, seed: int) -> dict:
    import jax
    import numpy as np

    from jaxmarl_llm.learners.evaluation import make_evaluate
    from jaxmarl_llm.runner import load_trained

    run = load_trained(run_dir)
    evaluate = jax.jit(jax.vmap(make_evaluate(run.env, run.learner.policy, episodes, max_steps)))
    keys = jax.random.split(jax.random.PRNGKey(seed), run.cfg.num_seeds)
    metrics = jax.device_get(evaluate(run.state, keys))
    metrics = {k: np.asarray(v, float) for k, v in metrics.items()}
    out = {
        "run": str(run_dir),
        "name": run.cfg.name,
        "algo": run.cfg.algo.name,
        "env": run.cfg.env.name,
        "env_steps": run.updates * run.learner.env_steps_per_update,
        "episodes_per_seed": episodes,
    }
    for k, v in metrics.items():
        out[f"{k}_mean"] = float(np.nanmean(v)) if not np.all(np.isnan(v)) else None
        out[f"{k}_per_seed"] = [None if np.isnan(x) else float(x) for x in v]
    return out


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("runs", nargs="+", type=Path, help="run folders")
    parser.add_argument("--episodes", type=int, default=128, help="episodes per seed")
    parser.add_argument("--max-steps", type=int, default=1000, help="step cap per evaluation")
    parser.add_argument("--seed", type=int, default=0, help="seed of the evaluation episodes")
    args = parser.parse_args(argv)

    from jaxmarl_llm.config import ConfigError

    status = 0
    for run_dir in args.runs:
        try:
            result = evaluate_run(run_dir, args.episodes, args.max_steps, args.seed)
        except (ConfigError, ValueError) as e:
            print(f"{run_dir}: {e}", file=sys.stderr)
            status = 2
            continue
        (run_dir / "evaluation.json").write_text(json.dumps(result, indent=2))
        print(json.dumps(result))
    return status


if __name__ == "__main__":
    sys.exit(main())

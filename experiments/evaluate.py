"""Greedy evaluation of a trained run: ``python experiments/evaluate.py RUN_DIR [RUN_DIR ...]``.

Restores each run's latest checkpoint and plays its greedy policy (most likely legal
action; epsilon 0 for QMIX) on ``--episodes`` fresh episodes per seed, as papers report
test returns and win rates. Prints one JSON object per run and writes it to
``RUN_DIR/evaluation.json``. Runs made with ``eval.every`` > 0 also have ``eval.csv``.

On envs that report wins (SMAX) the episodes that were not won are split into those
lost before the env's time limit (``lost_rate``: on SMAX, the team was wiped out) and
those that ran into it (``timeout_rate``: a policy that avoids the fight), with the mean
length of won and lost episodes, per seed.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path


def evaluate_run(run_dir: Path, episodes: int, max_steps: int, seed: int) -> dict:
    import jax
    import numpy as np

    from jaxmarl_llm.learners.evaluation import make_play_episodes, summarize_episodes
    from jaxmarl_llm.runner import load_trained

    run = load_trained(run_dir)
    play = jax.jit(jax.vmap(make_play_episodes(run.env, run.learner.policy, episodes, max_steps)))
    keys = jax.random.split(jax.random.PRNGKey(seed), run.cfg.num_seeds)
    ends = play(run.state, keys)
    metrics = jax.device_get(jax.vmap(lambda e: summarize_episodes(run.env, e))(ends))
    metrics = {k: np.asarray(v, float) for k, v in metrics.items()}
    if run.env.has_won:
        metrics.update(_outcomes(jax.device_get(ends), getattr(run.env.env, "max_steps", None)))
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


def _outcomes(ends, time_limit: int | None) -> dict:
    """Per seed: how the finished episodes that were not won ended (see the docstring)."""
    import numpy as np

    finished, won, length = (np.asarray(x) for x in (ends.finished, ends.won, ends.length))
    timed_out = finished & ~won & (length >= time_limit if time_limit else False)
    lost = finished & ~won & ~timed_out
    n = np.maximum(finished.sum(1), 1)

    def mean_length(mask):
        count = mask.sum(1)
        return np.where(count > 0, (length * mask).sum(1) / np.maximum(count, 1), np.nan)

    return {
        "lost_rate": lost.sum(1) / n,
        "timeout_rate": timed_out.sum(1) / n,
        "won_length": mean_length(finished & won),
        "lost_length": mean_length(lost),
    }


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

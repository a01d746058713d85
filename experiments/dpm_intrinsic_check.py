"""What DPM's intrinsic reward pays a trained policy, per seed.

    python experiments/dpm_intrinsic_check.py RUN_DIR [--steps 256]

Restores the run's latest checkpoint, plays each seed's epsilon-greedy policy from its own
env states for ``--steps`` steps and prints, per seed, the intrinsic reward per agent-step
(mean, std), the episodes' length and the intrinsic reward summed over an episode next to
the env reward per episode (a win is worth 1 on SMAX's sparse settings). An intrinsic
reward whose episode sum dwarfs the win, with episodes growing longer, is a policy paid
for lasting rather than winning. Loads the replay buffer too: mind memory (about 10 GB
for 2s3z) next to other runs.
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path


def check(run_dir: Path, steps: int, seed: int) -> list[dict]:
    import jax
    import numpy as np

    from jaxmarl_llm.runner import load_trained
    from jaxmarl_llm.shaping.registry import ShaperContext, build_shaper

    run = load_trained(run_dir)
    context = ShaperContext(run_dir=run_dir, seed=int(run.cfg.seed))
    shaper = build_shaper(run.cfg.shaping, run.env, context)
    keys = jax.random.split(jax.random.PRNGKey(seed), run.cfg.num_seeds)
    batch = jax.jit(jax.vmap(lambda s, k: run.learner.collect(s, k, steps)))(run.state, keys)
    intrinsic = jax.jit(jax.vmap(shaper.apply))(run.state.shaper_params, batch)
    r, done, env_r = (np.asarray(x) for x in (intrinsic, batch.done, batch.reward))
    rows = []
    for s in range(r.shape[0]):
        ended = done[s].reshape(*done[s].shape[:2], -1)[..., 0]
        episodes = max(int(ended.sum()), 1)
        rows.append(
            {
                "seed": s,
                "updates": run.updates,
                "intrinsic_per_agent_step_mean": float(r[s].mean()),
                "intrinsic_per_agent_step_std": float(r[s].std()),
                "episodes_ended": int(ended.sum()),
                "mean_episode_length": ended.size / episodes,
                "intrinsic_per_episode": float(r[s].sum(-1).sum() / episodes),
                "env_reward_per_episode": float(env_r[s].mean(-1).sum() / episodes),
            }
        )
    return rows


def main(argv=None) -> int:
    p = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    p.add_argument("run_dir", type=Path)
    p.add_argument("--steps", type=int, default=256, help="policy steps per env")
    p.add_argument("--seed", type=int, default=7)
    args = p.parse_args(argv)
    for row in check(args.run_dir, args.steps, args.seed):
        print(json.dumps(row))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

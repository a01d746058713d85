"""What DPM's intrinsic reward pays a trained policy, per seed.

    python experiments/dpm_intrinsic_check.py RUN_DIR [--steps 256] [--weight 1 ...]
        [--policy OTHER_RUN_DIR]

Restores the run's latest checkpoint, plays each seed's epsilon-greedy policy from its own
env states for ``--steps`` steps and prints, per seed, the intrinsic reward per agent-step
(mean, std), the episodes' length and the intrinsic reward summed over an episode next to
the env reward per episode (a win is worth 1 on SMAX's sparse settings), and that sum
apart for the won and the lost episodes that started in the window. An intrinsic reward
whose episode sum dwarfs the win, with episodes growing longer, is a policy paid for
lasting rather than winning. ``--policy`` plays another run's policy (same env and seed
count) and scores it with RUN_DIR's reward: whether a seed's reward model pays a winning
team's play more than its own team's. Loads the replay buffers too: mind memory (about
10 GB for 2s3z) next to other runs.
"""

from __future__ import annotations

import argparse
import gc
import json
from pathlib import Path

from omegaconf import OmegaConf


def episode_sums(intrinsic, env_reward, ended):
    """Per env ``[T, E]`` arrays: the intrinsic and env reward summed over each episode that
    starts and ends in the window (an env's first episode began before it)."""
    import numpy as np

    sums = []
    for e in range(ended.shape[1]):
        ends = np.flatnonzero(ended[:, e])
        for start, stop in zip(ends[:-1] + 1, ends[1:] + 1, strict=True):
            sums.append((intrinsic[start:stop, e].sum(), env_reward[start:stop, e].sum()))
    return np.asarray(sums, dtype=np.float64).reshape(-1, 2)


def check(run_dir: Path, steps: int, seed: int, weights=(None,), policy_dir=None) -> list[dict]:
    """Rows per weight (``None``: the run's own, faded as trained), then per seed; the
    policy's play (``policy_dir``'s, else the run's own) is collected once and scored with
    each weight."""
    import jax
    import jax.numpy as jnp
    import numpy as np

    from jaxmarl_llm.config import ConfigError
    from jaxmarl_llm.runner import load_run_config, load_trained
    from jaxmarl_llm.shaping.registry import ShaperContext, build_shaper

    if policy_dir is not None:
        cfgs = [load_run_config(d) for d in (run_dir, policy_dir)]
        for key in ("env.name", "num_seeds"):
            mine, theirs = (OmegaConf.select(c, key) for c in cfgs)
            if mine != theirs:
                raise ConfigError(f"--policy {policy_dir} has {key}={theirs}, {run_dir} {mine}")
    # one run in memory at a time: each holds its replay buffer
    run = load_trained(run_dir if policy_dir is None else policy_dir)
    batch = _play(run, steps, seed)
    if policy_dir is not None:
        del run
        gc.collect()
        run = load_trained(run_dir)
    context = ShaperContext(run_dir=run_dir, seed=int(run.cfg.seed))
    shaper = build_shaper(run.cfg.shaping, run.env, context)
    score = jax.jit(jax.vmap(shaper.apply))
    spread_of = jax.jit(jax.vmap(lambda p, b: _member_std(run, p, b)))
    done, env_r = np.asarray(batch.done), np.asarray(batch.reward)
    rows = []
    for weight in weights:
        params = run.state.shaper_params
        if weight is not None:
            params = params.replace(weight=jnp.full_like(params.weight, weight))
        r = np.asarray(score(params, batch))
        spread = np.asarray(spread_of(params, batch)) if run.cfg.shaping.name == "dpm" else None
        for s in range(r.shape[0]):
            ended = done[s].reshape(*done[s].shape[:2], -1)[..., 0]
            episodes = max(int(ended.sum()), 1)
            team = r[s].reshape(*ended.shape, -1).sum(-1)
            sums = episode_sums(team, env_r[s].reshape(*ended.shape, -1).mean(-1), ended)
            # SMAX pays a win at least 1 on every reward setting and a lost episode less (on
            # the dense reward a draw, both teams dead in one step, pays 1 and counts as won)
            won = sums[:, 1] >= 1 - 1e-6
            rows.append(
                {
                    "seed": s,
                    "weight": weight,
                    "policy": None if policy_dir is None else str(policy_dir),
                    "updates": run.updates,
                    "intrinsic_per_agent_step_mean": float(r[s].mean()),
                    "intrinsic_per_agent_step_std": float(r[s].std()),
                    "episodes_ended": int(ended.sum()),
                    "mean_episode_length": ended.size / episodes,
                    "intrinsic_per_episode": float(r[s].sum(-1).sum() / episodes),
                    "env_reward_per_episode": float(env_r[s].mean(-1).sum() / episodes),
                    "won_episodes": int(won.sum()),
                    "lost_episodes": int((~won).sum()),
                    "intrinsic_per_won_episode": _mean_or_none(sums[won, 0]),
                    "intrinsic_per_lost_episode": _mean_or_none(sums[~won, 0]),
                }
            )
            if spread is not None:
                rows[-1]["member_std_per_agent_step"] = float(spread[s].mean())
    return rows


def _play(run, steps: int, seed: int):
    """The run's epsilon-greedy play from its own env states, as host arrays."""
    import jax

    keys = jax.random.split(jax.random.PRNGKey(seed), run.cfg.num_seeds)
    collect = jax.jit(jax.vmap(lambda s, k: run.learner.collect(s, k, steps)))
    return jax.device_get(collect(run.state, keys))


def _mean_or_none(x) -> float | None:
    return float(x.mean()) if len(x) else None


def _member_std(run, params, batch):
    """The DPM members' std per agent-step ``[T, E, N]``, scaled as the reward is."""
    import jax.numpy as jnp

    from jaxmarl_llm.methods.dpm import dpm_config, reward_model
    from jaxmarl_llm.methods.dpm.reward import batch_features

    model = reward_model(run.env, dpm_config(run.cfg.shaping.kwargs))
    feats = batch_features(run.env, batch)
    members = model.apply_members(params.model, feats, jnp.arange(run.env.num_agents))
    return members.std(0) * params.scale * params.weight


def main(argv=None) -> int:
    p = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    p.add_argument("run_dir", type=Path)
    p.add_argument("--steps", type=int, default=256, help="policy steps per env")
    p.add_argument("--seed", type=int, default=7)
    p.add_argument("--weight", type=float, nargs="+", default=[None],
                   help="intrinsic weights to score with (default: the run's own)")  # fmt: skip
    p.add_argument("--policy", type=Path, default=None,
                   help="another run whose policy plays (default: the run's own)")  # fmt: skip
    args = p.parse_args(argv)
    for row in check(args.run_dir, args.steps, args.seed, args.weight, args.policy):
        print(json.dumps(row))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

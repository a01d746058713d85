"""LCA paper, Appendix A: the learned individual rewards over one Victim-Rubble episode,
plotted against the sparse team reward.

    python experiments/lca_reward_rollout.py [--run RUN_DIR] [--epsilon 0.2] [--seed 0]

``RUN_DIR`` is an LCA run folder (its ``lca/`` holds the fitted state-scoring models; by
default the Fig. 3 heuristic run, trained first if missing). The episode is played by
the env's scripted BFS policy (``greedy_actions``), with probability ``epsilon`` a
random action, so the plot shows rewards for good and bad moves. Writes
``experiments/results/lca/appendix_rollout.png`` and ``.json``.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

# the Fig. 3 heuristic run (``lca_figures.py fig3``'s folder for "LCA (heuristic)")
DEFAULT_RUN = ROOT / "runs" / "lca" / "fig3" / "victim_rubble" / "lca__heuristic"


def scripted_actions(env, state, key, epsilon: float):
    """The env's scripted BFS policy (``greedy_actions``), a random action with prob. epsilon."""
    import jax
    import jax.numpy as jnp

    n, a = len(env.agents), env.action_space(env.agents[0]).n
    k_eps, k_rand = jax.random.split(key)
    random = jax.random.randint(k_rand, (n,), 0, a)
    explore = jax.random.uniform(k_eps, (n,)) < epsilon
    return jnp.where(explore, random, env.greedy_actions(state)).astype(jnp.int32)


def main(argv=None) -> int:
    p = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    p.add_argument("--run", type=Path, default=DEFAULT_RUN)
    p.add_argument("--epsilon", type=float, default=0.2)
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--out", type=Path, default=ROOT / "experiments" / "results" / "lca")
    args = p.parse_args(argv)

    import jax
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    from jaxmarl_llm.config import load_config
    from jaxmarl_llm.methods.lca import load_run, potential_rewards

    if args.run == DEFAULT_RUN and not (args.run / "config.yaml").exists():
        from jaxmarl_llm.runner import run_experiment

        run_experiment(load_config("lca_victim_rubble", [f"out_dir={args.run}", "compare_with=[]"]))
    try:
        aenv, cfg, result = load_run(args.run)
    except ValueError as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
    env = aenv.env

    act = jax.jit(lambda s, k: scripted_actions(env, s, k, args.epsilon))
    step = jax.jit(lambda k, s, a: env.step_env(k, s, {x: a[i] for i, x in enumerate(env.agents)}))
    reward_fn = jax.jit(
        lambda s, a, s2: potential_rewards(env, result.model, result.params, s, a, s2)
    )
    key = jax.random.PRNGKey(args.seed)
    _, state = env.reset(key)
    team, individual, actions_taken = [], [], []
    for _ in range(env.max_steps):
        key, k_act, k_step = jax.random.split(key, 3)
        a = act(state, k_act)
        _, nxt, rew, dones, _ = step(k_step, state, a)
        team.append(float(rew[env.agents[0]]))
        individual.append([float(x) for x in reward_fn(state, a, nxt)])
        actions_taken.append([int(x) for x in a])
        state = nxt
        if bool(dones["__all__"]):
            break

    args.out.mkdir(parents=True, exist_ok=True)
    fig, axes = plt.subplots(len(env.agents), 1, figsize=(7, 2.6 * len(env.agents)), sharex=True)
    t = list(range(len(team)))
    for i, ax in enumerate(axes):
        ax.plot(
            t, [r[i] for r in individual], "o-", color="tab:blue", label="LCA individual reward"
        )
        ax.plot(t, team, "s-", color="grey", alpha=0.7, label="team reward")
        ax.axhline(0, color="k", lw=0.5)
        ax.set_ylabel(f"{env.roles[i]} agent")
        ax.legend(loc="upper left", fontsize="small")
    axes[-1].set_xlabel("time step")
    fig.suptitle(f"{cfg.env.name}: learned individual rewards over one episode")
    fig.tight_layout()
    fig.savefig(args.out / "appendix_rollout.png", dpi=120)
    run = args.run.resolve()
    record = {
        "run": str(run.relative_to(ROOT) if run.is_relative_to(ROOT) else run),
        "epsilon": args.epsilon,
        "seed": args.seed,
        "team_reward": team,
        "individual_reward": individual,
        "actions": actions_taken,
        "episode_return": sum(team),
    }
    (args.out / "appendix_rollout.json").write_text(json.dumps(record, indent=1))
    print(
        f"episode of {len(team)} steps, team return {sum(team):.2f}; "
        f"wrote {args.out / 'appendix_rollout.png'}"
    )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

"""Does the planning bonus make LBF's agents stop loading? P(LOAD) along early training.

A food is collected only when both agents choose ``LOAD`` next to it on the same step,
and the bonus pays ``LOAD`` only where the plan says so (next to the target food, or both
agents next to it), so under random play most ``LOAD`` choices are penalised. This trains
each arm for a short budget and, every ``--chunk`` updates, plays 20 fresh episodes per
seed with the sampled policy, recording: P(LOAD) over all steps and where both agents
stand next to the same remaining food, the share of steps whose action matches the plan,
and the return. Arms: EPyMARL's MAPPO settings with and without the bonus (Table 2's r'
and the paper's released code's 0.001, each agent trained on the team's summed reward as
EPyMARL does) and the tuned MAPPO's pair::

    python experiments/yolo_load_probe.py              # every arm, 62.5k env steps, 2 seeds
    python experiments/yolo_load_probe.py --arms epymarl_yolo --steps 250000

Results: ``experiments/results/yolo/load_probe.json`` (arms merged into it) and
``load_probe.png``.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
RESULTS = ROOT / "experiments" / "results" / "yolo"
EPISODES = 20  # probe episodes per seed and point

ARMS = {
    "epymarl_mappo": ("mappo_lbf_epymarl", []),
    "epymarl_yolo": ("yolo_lbf_mappo_epymarl", []),
    "epymarl_yolo_r0.001": (
        "yolo_lbf_mappo_epymarl",
        ["shaping.kwargs.reward=0.001", "shaping.kwargs.penalty=0.001"],
    ),
    "epymarl_yolo_per_agent": ("yolo_lbf_mappo_epymarl", ["algo.team_reward=none"]),
    "tuned_mappo": ("mappo_lbf", []),
    "tuned_yolo": ("yolo_lbf_mappo", []),
}


def probe_arm(config: str, overrides: list[str], steps: int, seeds: int, chunk: int) -> dict:
    import jax
    import jax.numpy as jnp
    import numpy as np

    from envs.lbf import LOAD
    from jaxmarl_llm.config import load_config
    from jaxmarl_llm.methods.yolo.shaper import YOLOConfig, obtain_plan
    from jaxmarl_llm.runner.build import make_env, make_shaper_and_learner, seed_keys

    cfg = load_config(config, [f"num_seeds={seeds}", f"algo.total_timesteps={steps}", *overrides])
    env = make_env(cfg)
    _, learner = make_shaper_and_learner(cfg, env, None)
    ppo = learner.policy.act.__self__
    tasks, plan, _ = obtain_plan(env, YOLOConfig(), None)
    horizon = env.env.max_steps

    def probe(s, key):
        k_reset, k_run = jax.random.split(key)
        obs, st = jax.vmap(env.reset)(jax.random.split(k_reset, EPISODES))
        carry = ppo.greedy_carry(s, EPISODES)

        def step(c, k):
            obs, st, carry, first, alive = c
            k_act, k_env = jax.random.split(k)
            carry, logits = ppo.eval_logits(s, carry, obs, jax.vmap(env.avail_actions)(st), first)
            act = jax.random.categorical(k_act, logits, -1).astype(jnp.int32)
            p_load = jax.nn.softmax(logits, -1)[..., LOAD]  # [E, N]
            es = st.env_state
            match = jax.vmap(tasks.matches)(es, jax.vmap(plan.tasks)(es), act)
            dist = jnp.abs(es.agent_pos[:, :, None] - es.food_pos[:, None]).sum(-1)  # [E, N, F]
            both = ((dist == 1).all(1) & es.food_alive).any(-1)  # [E]
            res = jax.vmap(env.step)(jax.random.split(k_env, EPISODES), st, act)
            rec = dict(p_load=p_load, both=both, match=match, alive=alive, ret=res.reward.sum(-1))
            carry_out = (res.obs, res.state, carry, jnp.zeros_like(first), alive & ~res.done)
            return carry_out, rec

        init = (obs, st, carry, jnp.ones((EPISODES,), bool), jnp.ones((EPISODES,), bool))
        _, r = jax.lax.scan(step, init, jax.random.split(k_run, horizon))
        w = r["alive"].astype(jnp.float32)[..., None] * jnp.ones_like(r["p_load"])
        wb = w * r["both"][..., None]
        mean = lambda x, m: (x * m).sum() / jnp.maximum(m.sum(), 1.0)
        return {
            "p_load": mean(r["p_load"], w),
            # NaN for a seed whose episodes never had both agents next to a food
            "p_load_both_adjacent": jnp.where(wb.sum() > 0, mean(r["p_load"], wb), jnp.nan),
            "match": mean(r["match"].astype(jnp.float32), w),
            "return": (r["ret"] * r["alive"]).sum() / EPISODES,
        }

    def train_chunk(s):
        s, m = jax.lax.scan(lambda s, _: learner.update(s), s, None, chunk)
        return s, m["entropy"].mean()

    train_j, probe_j = jax.jit(jax.vmap(train_chunk)), jax.jit(jax.vmap(probe))
    state = jax.vmap(learner.init)(seed_keys(cfg))
    points, t0 = [], time.perf_counter()
    for c in range(learner.num_updates // chunk + 1):
        entropy = None
        if c:
            state, ent = train_j(state)
            entropy = np.asarray(ent).tolist()
        keys = jax.random.split(jax.random.PRNGKey(1000 + c), seeds)
        got = jax.device_get(probe_j(state, keys))
        point = {"env_steps": c * chunk * learner.env_steps_per_update, "entropy": entropy}
        point.update({k: np.asarray(v).tolist() for k, v in got.items()})
        points.append(point)
        print(
            f"  {point['env_steps']:>7} steps: P(LOAD) {np.mean(point['p_load']):.4f}, "
            f"both adjacent {np.nanmean(point['p_load_both_adjacent']):.4f}, "
            f"match {np.mean(point['match']):.3f}, return {np.mean(point['return']):.3f}",
            flush=True,
        )
    command = " ".join(["python experiments/run.py", config, *overrides])
    return {"config": config, "overrides": overrides, "run_command": command, "seeds": seeds,
            "wall_s": time.perf_counter() - t0, "points": points}  # fmt: skip


def plot(results: dict, path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    import numpy as np

    fig, axes = plt.subplots(1, 2, figsize=(10, 3.6))
    for name, arm in results.items():
        x = [p["env_steps"] for p in arm["points"]]
        for ax, key in zip(axes, ("p_load", "return"), strict=True):
            ax.plot(x, [np.mean(p[key]) for p in arm["points"]], marker=".", label=name)
    axes[0].set(yscale="log", ylabel="P(LOAD), sampled policy", xlabel="env steps")
    axes[1].set(ylabel="return (20 sampled episodes a seed)", xlabel="env steps")
    axes[1].legend(fontsize=7)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--arms", nargs="+", default=list(ARMS), choices=list(ARMS))
    ap.add_argument("--steps", type=int, default=62_500, help="env steps per seed")
    ap.add_argument("--seeds", type=int, default=2)
    ap.add_argument("--chunk", type=int, default=25, help="updates between probes")
    args = ap.parse_args(argv)
    from jaxmarl_llm.runner.provenance import code_commit

    out = RESULTS / "load_probe.json"
    results = json.loads(out.read_text()) if out.exists() else {}
    for name in args.arms:
        config, overrides = ARMS[name]
        print(f"{name}: {config} {' '.join(overrides)}", flush=True)
        results[name] = {
            **probe_arm(config, overrides, args.steps, args.seeds, args.chunk),
            "commit": code_commit(),
        }
        RESULTS.mkdir(parents=True, exist_ok=True)
        out.write_text(json.dumps(results, indent=1))
        plot(results, RESULTS / "load_probe.png")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

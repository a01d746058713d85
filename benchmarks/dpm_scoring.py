"""DPM's intrinsic reward on one sampled batch: scored from state vectors vs env states.

    python benchmarks/dpm_scoring.py --map 3m --json

The QMIX learner stores the state vectors DPM reads (``world_state``,
``next_world_state``) and scores a sampled batch of ``--items`` x ``--steps`` from them;
before, it stored both env states and rebuilt the vectors at every sample. Reports the
median time of the jitted shaper on one batch each way (the same rewards) and the bytes
per stored step of either layout. Random play on SMAX fills the batch.

``--fusions`` also counts the fused kernels XLA compiles for one QMIX update (8 envs)
with identity shaping and with DPM: what DPM adds to the update, kernel for kernel, is
what a GPU pays in launches where few envs leave it waiting on small kernels.
"""

from __future__ import annotations

import argparse
import json
import time

import jax
import jax.numpy as jnp
import numpy as np


def main(argv=None) -> dict:
    p = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    p.add_argument("--map", default="3m", help="SMAX map")
    p.add_argument("--items", type=int, default=32, help="sampled items (QMIX batch_size)")
    p.add_argument("--steps", type=int, default=128, help="steps per item (num_steps)")
    p.add_argument("--repeats", type=int, default=30)
    p.add_argument("--fusions", action="store_true", help="count a QMIX update's fusions")
    p.add_argument("--json", action="store_true")
    args = p.parse_args(argv)

    import envs
    from jaxmarl_llm.learners.acting import random_play
    from jaxmarl_llm.methods.dpm import dpm_shaper
    from jaxmarl_llm.methods.dpm.config import DPMConfig
    from jaxmarl_llm.methods.dpm.reward import initial_params, reward_model

    env = envs.make_array_env(f"smax:{args.map}")
    model = reward_model(env, DPMConfig())
    params = initial_params(model, env, jax.random.PRNGKey(0)).replace(scale=jnp.float32(1))
    shaper = dpm_shaper(env, model, params)
    n = args.items

    play = jax.jit(lambda key: random_play(env, key, n, args.steps))
    batch = jax.tree.map(lambda x: jnp.swapaxes(x, 0, 1), play(jax.random.PRNGKey(1)))
    layouts = {
        "vectors": batch.replace(state=None, next_state=None, next_obs=None),
        "env_states": batch.replace(world_state=None, next_world_state=None),
    }
    score = jax.jit(shaper.apply)
    ms, rewards = {}, {}
    for name, b in layouts.items():
        rewards[name] = np.asarray(jax.block_until_ready(score(params, b)))
        times = []
        for _ in range(args.repeats):
            t0 = time.perf_counter()
            jax.block_until_ready(score(params, b))
            times.append(time.perf_counter() - t0)
        ms[name] = float(np.median(times) * 1e3)
    per_step = lambda tree: sum(x.nbytes for x in jax.tree.leaves(tree)) // (n * args.steps)
    out = {
        "map": args.map,
        "items": n,
        "steps": args.steps,
        "ms_from_vectors": ms["vectors"],
        "ms_from_env_states": ms["env_states"],
        "max_reward_difference": float(np.abs(rewards["vectors"] - rewards["env_states"]).max()),
        "stored_bytes_per_step_vectors": per_step(batch.next_world_state),
        "stored_bytes_per_step_env_states": per_step((batch.state, batch.next_state)),
        "device": str(jax.devices()[0]),
    }
    if args.fusions:
        out.update({f"update_fusions_{k}": v for k, v in update_fusions(args.map).items()})
    print(json.dumps(out) if args.json else "\n".join(f"{k:>34}: {v}" for k, v in out.items()))
    return out


def update_fusions(smax_map: str) -> dict:
    """Fusions in the compiled QMIX update (8 envs) with identity shaping and with DPM."""
    import envs
    from jaxmarl_llm.config import build_config
    from jaxmarl_llm.learners import make_learner
    from jaxmarl_llm.shaping.registry import build_shaper

    out = {}
    for shaping in ("identity", "dpm"):
        over = [
            f"env.name=smax:{smax_map}", "env.kwargs.reward=strong_sparse", "algo.num_envs=8",
            "algo.buffer_size=64", "algo.learning_starts=0", f"shaping.name={shaping}",
        ]  # fmt: skip
        cfg = build_config({"algo": {"name": "qmix"}}, over)
        env = envs.make_array_env(cfg.env.name, **cfg.env.kwargs)
        learner = make_learner(cfg.algo, env, build_shaper(cfg.shaping, env))
        state = learner.init(jax.random.PRNGKey(0))
        hlo = jax.jit(learner.update).lower(state).compile().as_text()
        out[shaping] = hlo.count(" fusion(")
    return out


if __name__ == "__main__":
    main()

"""Time of one DPM ensemble refit at a SMAX map's feature sizes, both encodings of the state.

    python benchmarks/dpm_refit.py --map 8m --json

The refit of the last feedback round: 3 members x ``fit_steps`` Adam steps on full
datasets (``rounds x`` 75 segment pairs and 75 agent rankings per seed), vmapped over
``--seeds``, with the reward net DPM uses (``reward_model``: state and next state encoded
once per step) and with every agent encoding its own copy of them (``agent_shared_blocks=0``).
Features are random; the state blocks are broadcast over
agents as ``batch_features`` builds them. Reports compile and best-of-``--repeats`` times.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import time

import jax
import jax.numpy as jnp


def main(argv=None) -> dict:
    p = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    p.add_argument("--map", default="8m", help="SMAX map (smax:MAP)")
    p.add_argument("--seeds", type=int, default=2)
    p.add_argument("--repeats", type=int, default=2, help="timed runs; the best is reported")
    p.add_argument("--fit-steps", type=int, default=None, help="default: DPMConfig's")
    p.add_argument("--rounds", type=int, default=None, help="labelled rounds; default: DPMConfig's")
    p.add_argument(
        "--segment-length",
        type=int,
        default=None,
        help="steps per trajectory segment (default: DPMConfig's window; 101: a whole SMAX "
        "episode, padded; a whole-episode refit cuts them to the longest labelled one)",
    )
    p.add_argument("--json", action="store_true", help="print one JSON line")
    args = p.parse_args(argv)

    from envs.registry import make_array_env
    from jaxmarl_llm.methods.dpm.config import DPMConfig
    from jaxmarl_llm.methods.dpm.reward import reward_model
    from jaxmarl_llm.preferences import FitConfig, fit
    from jaxmarl_llm.preferences.datasets import AgentRankingDataset, SegmentPairDataset

    env = make_array_env(f"smax:{args.map}", reward="strong_sparse")
    given = {
        "fit_steps": args.fit_steps,
        "rounds": args.rounds,
        "segment_length": args.segment_length,
    }
    cfg = DPMConfig(**{k: v for k, v in given.items() if v is not None})
    n, s = env.num_agents, env.world_state_dim
    dim = 2 * s + env.obs_dim + env.num_actions
    cap = {"trajectory": cfg.trajectory_labels * cfg.rounds, "agent": cfg.agent_labels * cfg.rounds}
    seeds, t = args.seeds, cfg.segment_length

    def features(key, lead):
        x = jax.random.normal(key, (*lead, n, dim))
        state = jnp.broadcast_to(x[..., :1, : 2 * s], (*lead, n, 2 * s))
        return jnp.concatenate([state, x[..., 2 * s :]], -1)

    keys = jax.random.split(jax.random.PRNGKey(0), 4)
    c_t, c_a = cap["trajectory"], cap["agent"]
    ones = lambda *shape: jnp.ones(shape, bool)
    segments = SegmentPairDataset(
        features(keys[0], (seeds, c_t, t)),
        features(keys[1], (seeds, c_t, t)),
        ones(seeds, c_t, t, n),
        ones(seeds, c_t, t, n),
        jax.random.bernoulli(keys[2], 0.5, (seeds, c_t)).astype(jnp.float32),
        jnp.ones((seeds, c_t)),
        ones(seeds, c_t),
    )
    pair_valid = jnp.broadcast_to(~jnp.eye(n, dtype=bool), (seeds, c_a, n, n))
    rankings = AgentRankingDataset(
        features(keys[3], (seeds, c_a)),
        jax.random.bernoulli(keys[2], 0.5, (seeds, c_a, n, n)).astype(jnp.float32),
        pair_valid,
        jnp.ones((seeds, c_a)),
        ones(seeds, c_a),
    )
    fit_cfg = FitConfig(num_steps=cfg.fit_steps, batch_size=cfg.batch_size, learning_rate=cfg.lr)
    shared = reward_model(env, cfg)
    result = {
        "map": args.map,
        "agents": n,
        "feature_dim": dim,
        "state_dim": s,
        "labels_per_seed": cap,
        "fit_steps": cfg.fit_steps,
        "segment_length": t,
        "seeds": seeds,
        "device": str(jax.devices()[0]),
    }
    for name, model in (
        ("state_once_per_step", shared),
        ("state_per_agent", dataclasses.replace(shared, agent_shared_blocks=0)),
    ):
        params = jax.vmap(lambda k, m=model: m.init(k, dim))(jax.random.split(keys[0], seeds))
        run = jax.jit(jax.vmap(lambda p, d, k, m=model: fit(m, p, d, k, fit_cfg)))
        fit_keys = jax.random.split(keys[1], seeds)
        t0 = time.perf_counter()
        _, losses = jax.block_until_ready(run(params, (segments, rankings), fit_keys))
        first = time.perf_counter() - t0
        best = float("inf")
        for _ in range(args.repeats):
            t0 = time.perf_counter()
            jax.block_until_ready(run(params, (segments, rankings), fit_keys))
            best = min(best, time.perf_counter() - t0)
        result[name] = {
            "compile_and_first_s": round(first, 2),
            "refit_s": round(best, 4),
            "final_loss": float(losses[:, -1].mean()),  # the two encodings must agree
        }
    result["speedup"] = round(
        result["state_per_agent"]["refit_s"] / result["state_once_per_step"]["refit_s"], 2
    )
    if args.json:
        print(json.dumps(result))
    else:
        for k, v in result.items():
            print(f"{k}: {v}")
    return result


if __name__ == "__main__":
    main()

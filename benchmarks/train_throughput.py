"""Post-compile training throughput: env steps per second of a whole jitted train loop.

    python benchmarks/train_throughput.py --algo ippo --env mpe:simple_spread_3 \
        --num-envs 1024 --updates 10 --json

IPPO/MAPPO defaults are the common PPO setting (lr 2.5e-4, 128 steps per env per
update, 4 epochs, 4 minibatches, 64-unit tanh MLPs, gamma 0.99, GAE lambda 0.95,
clip 0.2, ent 0.01, vf 0.5, max grad norm 0.5): the schema defaults in
``jaxmarl_llm/learners/onpolicy.py``. Extra ``key=value`` overrides go to the config.
"""

from __future__ import annotations

import argparse
import json
import os
import time

import jax
import numpy as np


def main(argv=None) -> dict:
    from jaxmarl_llm.learners.registry import algo_names

    p = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    p.add_argument("--algo", default="ippo", choices=algo_names())
    p.add_argument("--env", default="mpe:simple_spread_3")
    p.add_argument("--num-envs", type=int, default=1024)
    p.add_argument("--num-steps", type=int, default=None, help="steps per env per update")
    p.add_argument("--updates", type=int, default=10)
    p.add_argument("--seeds", type=int, default=1, help="vmapped seeds (steps/s counts all)")
    p.add_argument("--repeats", type=int, default=1, help="timed runs; the best is reported")
    p.add_argument(
        "--minus-updates",
        type=int,
        default=None,
        help="also time a run of this many updates and report the difference (diff_s): "
        "the time of the last updates - minus_updates updates, without the start-up ones",
    )
    p.add_argument(
        "--mesh-devices",
        type=int,
        default=1,
        help="split the envs over this many devices (data shards, as mesh.devices=N does); "
        "on a CPU, XLA_FLAGS=--xla_force_host_platform_device_count=N makes N host devices",
    )
    p.add_argument(
        "--mesh-exact",
        action="store_true",
        help="with --mesh-devices: shards compute what one device computes (mesh.exact)",
    )
    p.add_argument("--json", action="store_true", help="print one JSON line")
    p.add_argument("overrides", nargs="*", help="extra config overrides, key=value")
    args = p.parse_args(argv)

    from omegaconf import OmegaConf

    import envs
    from jaxmarl_llm.config import build_config
    from jaxmarl_llm.learners import algo_spec, make_learner
    from jaxmarl_llm.runner.mesh import ShardedLearner, make_run_mesh
    from jaxmarl_llm.shaping.registry import build_shaper

    spec = algo_spec(args.algo)
    over = [f"algo.num_envs={args.num_envs}", f"env.name={args.env}"]
    if args.num_steps:
        over.append(f"algo.num_steps={args.num_steps}")

    def timed(updates):
        cfg = build_config({"algo": {"name": args.algo}}, over + list(args.overrides))
        cfg.algo.total_timesteps = cfg.algo.num_steps * cfg.algo.num_envs * updates
        if spec.replay:
            cfg.algo.learning_starts = 0  # measure the steady state: every update trains
            cfg.algo.batch_size = min(cfg.algo.batch_size, cfg.algo.buffer_size)
        env = envs.make_array_env(cfg.env.name, **cfg.env.kwargs)
        shaper = build_shaper(cfg.shaping, env)
        learner = make_learner(cfg.algo, env, shaper)
        t0 = time.perf_counter()
        if args.mesh_devices == 1:
            compiled = jax.jit(jax.vmap(learner.train)).lower(keys).compile()
        else:  # the runner's mesh: init, then every update in one chunk, on the devices
            mesh = make_run_mesh(
                OmegaConf.create(
                    {"devices": args.mesh_devices, "seeds": 1, "exact": args.mesh_exact}
                ),
                args.seeds,
            )
            part = make_learner(cfg.algo, env, shaper, mesh.shards)
            sharded = ShardedLearner(learner, part, mesh)
            placed = sharded.place_keys(keys)
            init = sharded.init().lower(placed).compile()
            chunk = sharded.chunk(learner.num_updates).lower(init(placed)).compile()
            compiled = lambda _: chunk(init(placed))
        compile_s = time.perf_counter() - t0
        best = float("inf")
        for _ in range(args.repeats):
            t0 = time.perf_counter()
            _, metrics = jax.block_until_ready(compiled(keys))
            best = min(best, time.perf_counter() - t0)
        return cfg, env, learner, metrics, best, compile_s

    keys = jax.random.split(jax.random.PRNGKey(0), args.seeds)
    base_s = None
    if args.minus_updates is not None:
        base_s = timed(args.minus_updates)[4]
    cfg, env, learner, metrics, best, compile_s = timed(args.updates)
    env_steps = learner.num_updates * learner.env_steps_per_update * args.seeds
    ret = np.asarray(metrics["episode_return"])[:, -3:]
    out = {
        "algo": args.algo,
        "env": args.env,
        "num_envs": args.num_envs,
        "num_steps": int(cfg.algo.num_steps),
        "updates": learner.num_updates,
        "seeds": args.seeds,
        "env_steps": env_steps,
        "env_steps_per_s": env_steps / best,
        "compile_s": compile_s,
        "run_s": best,
        "final_return": float(np.nanmean(ret)) if not np.all(np.isnan(ret)) else None,
        "device": str(jax.devices()[0]),
        "mesh_devices": args.mesh_devices,
        "mesh_exact": args.mesh_exact,
        "jax": jax.__version__,
        "load_average_1min": os.getloadavg()[0],  # other jobs on the machine
        "shaping": cfg.shaping.name,
        "overrides": " ".join(args.overrides),
    }
    if base_s is not None:
        diff_updates = learner.num_updates - args.minus_updates
        out.update(
            minus_updates=args.minus_updates,
            base_run_s=base_s,
            diff_s=best - base_s,
            diff_env_steps_per_s=diff_updates * learner.env_steps_per_update / (best - base_s),
        )
    if spec.mixer is not None:  # the Q-learning learner
        from jaxmarl_llm.learners.qlearning import QLearning

        q = QLearning(cfg.algo, env, build_shaper(cfg.shaping, env))
        out["buffer_transitions"] = int(cfg.algo.buffer_size * cfg.algo.num_steps)
        out["buffer_gib"] = q.buffer_nbytes() / 2**30
    if args.json:
        print(json.dumps(out))
    else:
        for k, v in out.items():
            print(f"{k:>16}: {v:,.1f}" if isinstance(v, float) else f"{k:>16}: {v}")
    return out


if __name__ == "__main__":
    main()

"""The speed anchor for Level-Based Foraging: Jumanji's jittable LBF, raw.

Jumanji ships an LBF in JAX; issue 6 asks to wrap it when an adapter would keep 80% of
its throughput. This script times Jumanji's own env the way
``benchmarks/env_throughput.py`` times ours: the 8x8, 2-agent, 2-food cooperative scenario
(``force_coop``, full view, 50 steps), uniform random actions, ``vmap`` over envs, a
reset computed at every step and selected where an episode ended (what a training loop
needs), ``lax.scan`` over ``--steps`` steps, best of ``--repeats`` post-compile runs.
Jumanji is not a dependency of this project (its pins differ); run it from its own
environment:

    python -m venv /tmp/jvenv && /tmp/jvenv/bin/pip install "jax==0.10.2" jumanji
    /tmp/jvenv/bin/python benchmarks/jumanji_lbf_anchor.py --num-envs 4096 --json
"""

from __future__ import annotations

import argparse
import json
import time

import jax
import jax.numpy as jnp


def main() -> dict:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--num-envs", type=int, default=4096)
    p.add_argument("--steps", type=int, default=200)
    p.add_argument("--repeats", type=int, default=3)
    p.add_argument("--json", action="store_true")
    args = p.parse_args()
    from jumanji.environments.routing.lbf import LevelBasedForaging
    from jumanji.environments.routing.lbf.generator import RandomGenerator

    gen = RandomGenerator(
        grid_size=8, num_agents=2, num_food=2, fov=8, max_agent_level=2, force_coop=True
    )
    env = LevelBasedForaging(generator=gen, time_limit=50)
    n = args.num_envs

    def run(key):
        state, ts = jax.vmap(env.reset)(jax.random.split(key, n))

        def step(carry, k):
            state, ts = carry
            k_act, k_reset = jax.random.split(k)
            actions = jax.random.randint(k_act, (n, 2), 0, 6)
            state, ts = jax.vmap(env.step)(state, actions)
            fresh, fresh_ts = jax.vmap(env.reset)(jax.random.split(k_reset, n))
            done = ts.last()

            def pick(x, y):
                return jnp.where(done.reshape((-1,) + (1,) * (x.ndim - 1)), y, x)

            state, ts = jax.tree.map(pick, state, fresh), jax.tree.map(pick, ts, fresh_ts)
            return (state, ts), done.sum()

        return jax.lax.scan(step, (state, ts), jax.random.split(key, args.steps))[1].sum()

    f = jax.jit(run)
    t0 = time.perf_counter()
    jax.block_until_ready(f(jax.random.PRNGKey(0)))
    compile_s = time.perf_counter() - t0
    best = float("inf")
    for i in range(args.repeats):
        t0 = time.perf_counter()
        episodes = jax.block_until_ready(f(jax.random.PRNGKey(i + 1)))
        best = min(best, time.perf_counter() - t0)
    out = {
        "env": "jumanji LevelBasedForaging 8x8-2p-2f coop",
        "num_envs": n,
        "steps": args.steps,
        "env_steps_per_s": n * args.steps / best,
        "compile_s": compile_s,
        "episodes_ended": int(episodes),
        "device": str(jax.devices()[0]),
        "jax": jax.__version__,
    }
    print(json.dumps(out) if args.json else out)
    return out


if __name__ == "__main__":
    main()

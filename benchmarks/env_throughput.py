"""Post-compile environment throughput: random-legal-action steps per second of ArrayEnv.

    python benchmarks/env_throughput.py --envs smax:3m --num-envs 1 64 1024 --steps 1000

Each measurement jits ``lax.scan`` over ``vmap(ArrayEnv.step)`` (with auto-reset, avail
masks and uniform random legal actions) for ``--steps`` steps of ``--num-envs`` parallel
envs, compiles it once, then reports the best of ``--repeats`` timed runs. An env step
counts one step of one env (all its agents).
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time

import jax
import jax.numpy as jnp

DEFAULT_ENVS = ("mpe:simple_spread_3", "smax:3m", "overcooked:cramped_room")


def build(aenv, num_envs: int, steps: int):
    """(init, run): jitted batched reset and a jitted scan of ``steps`` random steps."""

    def init(key):
        obs, state = jax.vmap(aenv.reset)(jax.random.split(key, num_envs))
        return obs, state, jax.vmap(aenv.avail_actions)(state)

    def run(key, obs, state, avail):
        def body(carry, k):
            obs, state, avail, ret, dones = carry
            k_act, k_step = jax.random.split(k)
            actions = jax.vmap(aenv.random_actions)(jax.random.split(k_act, num_envs), avail)
            r = jax.vmap(aenv.step)(jax.random.split(k_step, num_envs), state, actions)
            return (r.obs, r.state, r.avail_actions, ret + r.reward, dones + r.done), None

        zeros = (jnp.zeros((num_envs, aenv.num_agents)), jnp.zeros((num_envs,), jnp.int32))
        carry, _ = jax.lax.scan(body, (obs, state, avail, *zeros), jax.random.split(key, steps))
        return carry  # everything stays live, so XLA cannot drop any of the step

    return jax.jit(init), jax.jit(run)


def _import_envs():
    # jaxmarl prints import notes to stdout; keep stdout to results (one JSON line each).
    # Redirect the file descriptor: jaxmarl's mabrax import resets sys.stdout itself.
    sys.stdout.flush()
    saved = os.dup(1)
    os.dup2(2, 1)
    try:
        import envs
    finally:
        sys.stdout.flush()
        os.dup2(saved, 1)
        os.close(saved)
    return envs


def measure(name: str, num_envs: int, steps: int, repeats: int, seed: int = 0) -> dict:
    envs = _import_envs()
    aenv = envs.make_array_env(name)
    init, run = build(aenv, num_envs, steps)
    k_init, k_run = jax.random.split(jax.random.PRNGKey(seed))
    obs, state, avail = jax.block_until_ready(init(k_init))
    t0 = time.perf_counter()
    compiled = run.lower(k_run, obs, state, avail).compile()
    compile_s = time.perf_counter() - t0
    best = float("inf")
    for i in range(repeats):
        key = jax.random.fold_in(k_run, i)
        t0 = time.perf_counter()
        carry = jax.block_until_ready(compiled(key, obs, state, avail))
        best = min(best, time.perf_counter() - t0)
    episodes = int(carry[-1].sum())
    return {
        "env": name,
        "num_envs": num_envs,
        "steps": steps,
        "env_steps_per_s": num_envs * steps / best,
        "compile_s": compile_s,
        "run_s": best,
        "episodes_ended": episodes,
        "device": str(jax.devices()[0]),
        "jax": jax.__version__,
    }


def main(argv=None) -> list[dict]:
    p = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    p.add_argument("--envs", nargs="+", default=list(DEFAULT_ENVS), metavar="NAME")
    p.add_argument("--num-envs", nargs="+", type=int, default=[1, 64, 1024], metavar="N")
    p.add_argument("--steps", type=int, default=1000, help="scan steps per measurement")
    p.add_argument("--repeats", type=int, default=3, help="timed runs; the best is reported")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--json", action="store_true", help="one JSON line per (env, num_envs)")
    args = p.parse_args(argv)
    envs = _import_envs()
    for name in args.envs:
        try:
            envs.spec(name)
        except envs.UnknownEnvError as e:
            p.error(str(e))

    results = []
    if not args.json:
        print(f"{'env':<28} {'num_envs':>8} {'env steps/s':>14} {'compile s':>10}")
    for name in args.envs:
        for n in args.num_envs:
            r = measure(name, n, args.steps, args.repeats, args.seed)
            results.append(r)
            if args.json:
                print(json.dumps(r), flush=True)
            else:
                print(
                    f"{name:<28} {n:>8} {r['env_steps_per_s']:>14,.0f} {r['compile_s']:>10.1f}",
                    flush=True,
                )
    if not args.json:
        print(f"device: {jax.devices()[0]}, jax {jax.__version__}")
    return results


if __name__ == "__main__":
    main()

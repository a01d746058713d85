"""Cost of V-GEPF's potential on a batch of football states: the renderer alone and
render + the football CLIP's image tower (``potential.potential``), both jitted.

    python benchmarks/render_throughput.py --batch 64 --size 96 --repeats 20 --json

States come from random-action rollouts of ``--env`` (the counterattack by default), so
players and ball are where training puts them. Times are the median over ``--repeats``
calls after a warm-up call (compile excluded). ``--frozen`` times the renderer the football
CLIP was trained on (``tests/envs/football_render_frozen.py``, the same pixels) instead of
``envs/football/render.py``.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))


def rollout_states(env_name: str, batch: int, seed: int = 0):
    """``batch`` states [batch, ...] of random-action rollouts (``batch`` envs, a random
    number of steps each)."""
    import jax
    import jax.numpy as jnp

    import envs

    env = envs.make(env_name)
    k_reset, k_run = jax.random.split(jax.random.PRNGKey(seed))
    _, state = jax.vmap(env.reset)(jax.random.split(k_reset, batch))
    n_act = env.action_space(env.agents[0]).n

    def body(carry, key):
        state = carry
        k_act, k_step = jax.random.split(key)
        acts = jax.random.randint(k_act, (batch, len(env.agents)), 0, n_act)
        actions = {a: acts[:, i] for i, a in enumerate(env.agents)}
        _, state, *_ = jax.vmap(env.step)(jax.random.split(k_step, batch), state, actions)
        return state, None

    state, _ = jax.lax.scan(body, state, jax.random.split(k_run, 30))
    return jax.tree.map(jnp.asarray, state)


def timed(fn, *args, repeats: int) -> float:
    """Median seconds of ``fn(*args)`` over ``repeats`` calls, after one warm-up call."""
    import jax
    import numpy as np

    jax.block_until_ready(fn(*args))
    times = []
    for _ in range(repeats):
        t0 = time.perf_counter()
        jax.block_until_ready(fn(*args))
        times.append(time.perf_counter() - t0)
    return float(np.median(times))


def main(argv=None) -> dict:
    p = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    p.add_argument("--env", default="football:academy_counterattack_easy")
    p.add_argument("--batch", type=int, default=64)
    p.add_argument("--size", type=int, default=96)
    p.add_argument("--repeats", type=int, default=20)
    p.add_argument("--frozen", action="store_true", help="the frozen reference renderer")
    p.add_argument("--json", action="store_true")
    args = p.parse_args(argv)

    import importlib

    import jax

    from jaxmarl_llm.methods.vgepf.clip_model import load_vgepf_clip
    from jaxmarl_llm.methods.vgepf.potential import frames, initial_params, potential

    if args.frozen:
        sys.path.insert(0, str(ROOT / "tests" / "envs"))
        from football_render_frozen import render as frozen

        # frames() draws with the potential module's ``render``
        importlib.import_module("jaxmarl_llm.methods.vgepf.potential").render = frozen
    states = rollout_states(args.env, args.batch)
    clip = load_vgepf_clip()
    params = initial_params(clip, "encourage attack")
    render_fn = jax.jit(lambda s: frames(s, args.size))
    potential_fn = jax.jit(lambda p, s: potential(clip.config, p, s, args.size))
    out = {
        "env": args.env,
        "batch": args.batch,
        "size": args.size,
        "renderer": "frozen" if args.frozen else "current",
        "repeats": args.repeats,
        "render_ms": 1e3 * timed(render_fn, states, repeats=args.repeats),
        "potential_ms": 1e3 * timed(potential_fn, params, states, repeats=args.repeats),
        "jax": jax.__version__,
        "device": jax.devices()[0].device_kind,
        "load_average_1min": os.getloadavg()[0],  # other jobs on the CPU
    }
    print(json.dumps(out) if args.json else out)
    return out


if __name__ == "__main__":
    main()

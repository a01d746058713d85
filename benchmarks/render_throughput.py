"""Cost of V-GEPF's potential on a batch of football states: the renderer alone and
render + the football CLIP's image tower (``potential.potential``), both jitted.

    python benchmarks/render_throughput.py --batch 64 --size 96 --repeats 20 --json

States come from random-action rollouts of ``--env`` (the counterattack by default), so
players and ball are where training puts them. Times are the median over ``--repeats``
calls after a warm-up call (compile excluded). ``--frozen`` times the renderer the football
CLIP was trained on (``tests/envs/football_render_frozen.py``, the same pixels) instead of
``envs/football/render.py``.

The image tower is V-GEPF's default CLIP, or ``--clip-weights DIR``; any of the shape
options (``--vision-width``, ``--vision-layers``, ``--vision-heads``, ``--vision-mlp``,
``--grid``) times a tower of that shape with random weights instead (the other numbers
from the loaded model, its image size ``--size``), to price a shape before training it:

    python benchmarks/render_throughput.py --batch 64 --size 48 --grid 4 \
        --vision-width 64 --vision-layers 2 --json
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


TOWER_FIELDS = (
    "image_size",
    "patch_size",
    "vision_width",
    "vision_layers",
    "vision_heads",
    "vision_mlp_dim",
    "embed_dim",
)


def random_shape(args) -> bool:
    """Whether a shape option was given (then the tower has random weights)."""
    names = ("vision_width", "vision_layers", "vision_heads", "vision_mlp", "grid")
    return any(getattr(args, n) is not None for n in names)


def random_tower(clip, args):
    """``(config, VGEPFParams)`` of a random-weights image tower of the shape options
    (the loaded ``clip``'s numbers for the others, image size ``args.size``), or None
    when no shape option is given."""
    if not random_shape(args):
        return None
    import dataclasses

    import jax
    import jax.numpy as jnp

    from jaxmarl_llm.methods.vgepf.potential import VGEPFParams, image_params
    from jaxmarl_llm.vision.clip import init_params

    c = clip.config
    width = args.vision_width or c.vision_width
    grid = args.grid or c.image_size // c.patch_size
    if args.size % grid:
        raise SystemExit(f"--size {args.size} is not a multiple of --grid {grid}")
    cfg = dataclasses.replace(
        c,
        image_size=args.size,
        patch_size=args.size // grid,
        vision_width=width,
        vision_layers=args.vision_layers or c.vision_layers,
        vision_heads=args.vision_heads or c.vision_heads,
        vision_mlp_dim=args.vision_mlp or 4 * width,
    )
    text = jax.random.normal(jax.random.key(1), (cfg.embed_dim,))
    params = VGEPFParams(
        image=image_params(init_params(cfg, jax.random.key(0))),
        text=text / jnp.linalg.norm(text),
        mean=jnp.zeros((), jnp.float32),
        std=jnp.ones((), jnp.float32),
        skill=jnp.zeros((), jnp.int32),
    )
    return cfg, params


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
    p.add_argument("--clip-weights", default=None, help="a CLIP directory (V-GEPF's default)")
    shape = p.add_argument_group("a random-weights image tower of this shape")
    shape.add_argument("--vision-width", type=int, default=None)
    shape.add_argument("--vision-layers", type=int, default=None)
    shape.add_argument("--vision-heads", type=int, default=None)
    shape.add_argument("--vision-mlp", type=int, default=None, help="MLP width")
    shape.add_argument("--grid", type=int, default=None, help="patches per side")
    args = p.parse_args(argv)
    if args.grid is not None and args.size % args.grid:
        raise SystemExit(f"--size {args.size} is not a multiple of --grid {args.grid}")

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
    clip = load_vgepf_clip({"clip_weights": args.clip_weights})
    tower = random_tower(clip, args)
    cfg, params = tower or (clip.config, initial_params(clip, "encourage attack"))
    render_fn = jax.jit(lambda s: frames(s, args.size))
    potential_fn = jax.jit(lambda p, s: potential(cfg, p, s, args.size))
    potential_ms = 1e3 * timed(potential_fn, params, states, repeats=args.repeats)
    out = {
        "env": args.env,
        "batch": args.batch,
        "size": args.size,
        "renderer": "frozen" if args.frozen else "current",
        "repeats": args.repeats,
        "render_ms": 1e3 * timed(render_fn, states, repeats=args.repeats),
        "potential_ms": potential_ms,
        "potential_ms_per_state": potential_ms / args.batch,
        "weights": "random" if random_shape(args) else str(clip.path),
        "tower": {f: getattr(cfg, f) for f in TOWER_FIELDS},
        "tower_parameters": int(sum(x.size for x in jax.tree.leaves(params.image))),
        "jax": jax.__version__,
        "device": jax.devices()[0].device_kind,
        "load_average_1min": os.getloadavg()[0],  # other jobs on the CPU
    }
    print(json.dumps(out) if args.json else out)
    return out


if __name__ == "__main__":
    main()

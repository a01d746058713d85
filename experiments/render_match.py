"""Play one episode and write its frames as a GIF.

``python experiments/render_match.py RUN_DIR`` plays the run's greedy policy (the first
seed of its latest checkpoint); ``python experiments/render_match.py --env
football:academy_counterattack_easy`` plays uniformly random legal actions. Any env
with a ``Renderer`` capability works. ``--steps N`` caps the episode (the GIF holds the
start frame and one frame per step, stopping after the step that ends the episode);
``--out PATH`` names the GIF.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path


def play_frames(env, steps: int, seed: int, policy=None, train_state=None) -> list:
    """Frames ``[H, W, 3]`` uint8 of one episode of ``env`` (an ``ArrayEnv``): the reset
    state and each state after a step, up to ``steps`` steps or the episode's end.
    ``policy`` (a ``GreedyPolicy``) with ``train_state`` picks the actions; random legal
    actions otherwise."""
    import jax
    import jax.numpy as jnp
    import numpy as np

    import envs
    from envs.capabilities import Renderer

    renderer = envs.require(env, Renderer, needed_by="render_match")
    draw = jax.jit(renderer.render)
    step = jax.jit(env.step)
    key_reset, key = jax.random.split(jax.random.PRNGKey(seed))
    obs, state = env.reset(key_reset)
    avail = env.avail_actions(state)
    carry = None if policy is None else policy.init_carry(train_state, 1)
    act = None if policy is None else jax.jit(policy.act)
    frames = [np.asarray(draw(state.env_state))]
    for t in range(steps):
        key, k_act, k_step = jax.random.split(key, 3)
        if policy is None:
            actions = env.random_actions(k_act, avail)
        else:
            first = jnp.asarray([t == 0])
            carry, actions = act(train_state, carry, obs[None], avail[None], first)
            actions = actions[0]
        res = step(k_step, state, actions)
        # the true next state (before an auto-reset) ends the film
        frames.append(np.asarray(draw(res.terminal_env_state)))
        if bool(res.done):
            break
        obs, state, avail = res.obs, res.state, res.avail_actions
    return frames


def write_gif(frames: list, out: Path, fps: int = 10) -> None:
    from PIL import Image

    images = [Image.fromarray(f) for f in frames]
    out.parent.mkdir(parents=True, exist_ok=True)
    images[0].save(out, save_all=True, append_images=images[1:], duration=int(1000 / fps), loop=0)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("run", nargs="?", type=Path, help="run folder (greedy policy)")
    parser.add_argument("--env", help="registered env name (random actions)")
    parser.add_argument("--steps", type=int, default=400, help="most steps to play")
    parser.add_argument("--out", type=Path, default=Path("match.gif"), help="GIF path")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--fps", type=int, default=10)
    args = parser.parse_args(argv)
    if (args.run is None) == (args.env is None):
        parser.error("give either a run folder or --env NAME")
    if args.steps < 1:
        parser.error("--steps must be >= 1")

    import jax

    import envs

    try:
        if args.env is not None:
            frames = play_frames(envs.make_array_env(args.env), args.steps, args.seed)
        else:
            from jaxmarl_llm.runner import load_trained

            run = load_trained(args.run)
            first_seed = jax.tree.map(lambda x: x[0], run.state)
            frames = play_frames(run.env, args.steps, args.seed, run.learner.policy, first_seed)
    except ValueError as e:
        print(f"render_match: {e}", file=sys.stderr)
        return 2
    write_gif(frames, args.out, args.fps)
    print(f"wrote {len(frames)} frames to {args.out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())

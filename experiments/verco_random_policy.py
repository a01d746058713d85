"""The salad kitchen under the uniformly random policy: each cook picks uniformly among its
available macro-actions at every step. This is where every learner starts, and what an
untrained language model's action distribution is measured against.

    python experiments/verco_random_policy.py              # both maps, 2,048 kitchens x 1,000 steps
    python experiments/verco_random_policy.py --maps A --envs 256 --steps 400

Writes ``experiments/results/verco/random_policy.json``: per map, the episodes that ended,
their success rate (a correct delivery), mean length and mean team return.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
RESULTS = ROOT / "experiments" / "results" / "verco"


def random_policy_stats(name: str, num_envs: int, steps: int, seed: int) -> dict:
    """Statistics of the episodes that end within ``steps`` steps of ``num_envs`` kitchens."""
    import jax
    import numpy as np

    import envs

    env = envs.make_array_env(name)
    _, state = jax.vmap(env.reset)(jax.random.split(jax.random.PRNGKey(seed), num_envs))

    def step(state, key):
        r_act, r_env = jax.random.split(key)
        avail = jax.vmap(env.avail_actions)(state)
        actions = jax.vmap(env.random_actions)(jax.random.split(r_act, num_envs), avail)
        res = jax.vmap(env.step)(jax.random.split(r_env, num_envs), state, actions)
        info = res.info
        team_return = info["episode_return"][:, 0]  # every cook is paid the team reward
        return res.state, (res.done, info["won"], info["episode_length"], team_return)

    keys = jax.random.split(jax.random.PRNGKey(seed + 1), steps)
    _, out = jax.jit(lambda s: jax.lax.scan(step, s, keys))(state)
    done, won, length, ret = (np.asarray(x) for x in out)
    return {
        "env": name,
        "kitchens": num_envs,
        "steps": steps,
        "episodes": int(done.sum()),
        "success_rate": float(won[done].mean()),
        "episode_length": float(length[done].mean()),
        "episode_return": float(ret[done].mean()),
    }


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--maps", nargs="+", default=["A", "B"], choices=["A", "B"])
    p.add_argument("--envs", type=int, default=2048, help="kitchens stepped in parallel")
    p.add_argument("--steps", type=int, default=1000, help="steps of every kitchen")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--out", type=Path, default=RESULTS / "random_policy.json")
    args = p.parse_args(argv)
    rows = [random_policy_stats(f"salad:{m}", args.envs, args.steps, args.seed) for m in args.maps]
    for row in rows:
        print(json.dumps(row))
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(rows, indent=1) + "\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

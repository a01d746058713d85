"""How the scripted opponents and keepers of ``envs/football`` behave against a team that
does nothing, the policy an untrained or language-model team often falls back on.

    python experiments/football_behaviour.py               # all three measurements
    python experiments/football_behaviour.py --matches 64  # fewer matches, quicker

Writes ``experiments/results/football/behaviour.json``:

* ``possession``: 11 vs 11 at difficulty 0.05 (easy) and 0.95 (hard), the left team's CF on
  the ball at the centre spot and every left player idle: steps until the right team wins
  the ball (median, 90th percentile, maximum, and the share of matches where it did
  within ``--horizon`` steps).
* ``keeper``: a shot from 0.15 in front of the right goal's centre against the right
  keeper on its line (0.99, 0) or off it (0.90, 0.12), everyone else far away: share of
  shots saved (the keeper takes the ball) and scored, per difficulty.
* ``idle_matches``: whole 3,000-step matches of an idle left team: goals conceded per
  match and the share of matches with none, per difficulty.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
OUT = ROOT / "experiments" / "results" / "football" / "behaviour.json"
SCENARIOS = {"easy": "11_vs_11_easy_stochastic", "hard": "11_vs_11_hard_stochastic"}


def _idle(env):
    import jax.numpy as jnp

    return {a: jnp.int32(0) for a in env.agents}


def _left_on_ball(env, state):
    """``state`` with the left player nearest the ball owning it."""
    import jax.numpy as jnp

    from envs.football.env import BALL_OFFSET

    d = ((state.pos[:11] - state.ball) ** 2).sum(-1)
    owner = jnp.argmin(d).astype(jnp.int32)
    ball = state.pos[owner] + state.facing[owner] * BALL_OFFSET
    return state.replace(owner=owner, ball=ball, prev_ball=ball, last_touch=jnp.int32(0))


def possession_loss(scenario: str, matches: int, horizon: int, seed: int) -> dict:
    import jax
    import jax.numpy as jnp
    import numpy as np

    from envs.football import Football

    env = Football(scenario)
    idle = _idle(env)

    def one(key):
        _, state = env.reset(key)
        state = _left_on_ball(env, state)

        def body(carry, k):
            state, lost_at, t = carry
            _, state, _, _, _ = env.step_env(k, state, idle)
            lost_at = jnp.where((lost_at < 0) & (state.owner >= 11), t + 1, lost_at)
            return (state, lost_at, t + 1), None

        init = (state, jnp.int32(-1), jnp.int32(0))
        (_, lost_at, _), _ = jax.lax.scan(body, init, jax.random.split(key, horizon))
        return lost_at

    keys = jax.random.split(jax.random.PRNGKey(seed), matches)
    lost = np.asarray(jax.jit(jax.vmap(one))(keys))
    won_back = lost[lost > 0]
    return {
        "matches": matches,
        "horizon": horizon,
        "lost_within_horizon": float((lost > 0).mean()),
        "median_steps": float(np.median(won_back)) if won_back.size else None,
        "p90_steps": float(np.percentile(won_back, 90)) if won_back.size else None,
        "max_steps": int(won_back.max()) if won_back.size else None,
    }


def keeper_saves(scenario: str, spots: dict, shots: int, seed: int) -> dict:
    """Per keeper spot (name -> (x, y)): shares of ``shots`` shots saved and scored."""
    import jax
    import jax.numpy as jnp
    import numpy as np

    from envs.football import Football
    from envs.football.env import BALL_OFFSET, SHOT

    env = Football(scenario)
    idle = _idle(env)
    shoot = idle | {"player_9": jnp.int32(SHOT)}
    _, s = env.reset(jax.random.PRNGKey(0))
    pos = jnp.concatenate(
        [
            jnp.stack([jnp.full(11, -0.6), jnp.linspace(-0.4, 0.4, 11)], -1),
            jnp.stack([jnp.full(11, -0.9), jnp.linspace(-0.4, 0.4, 11)], -1),
        ]
    )
    pos = pos.at[9].set(jnp.array([0.85, 0.0]))
    facing = s.facing.at[9].set(jnp.array([1.0, 0.0]))
    ball = pos[9] + facing[9] * BALL_OFFSET
    s = s.replace(
        pos=pos, facing=facing, ball=ball, prev_ball=ball, owner=jnp.int32(9),
        last_touch=jnp.int32(0), game_mode=jnp.int32(0),
    )  # fmt: skip

    def one(spot, key):
        def body(state, k_t):
            k, t = k_t
            acts = {a: jnp.where(t == 0, shoot[a], idle[a]) for a in env.agents}
            return env.step_env(k, state, acts)[1], None

        state = s.replace(pos=s.pos.at[11].set(spot))
        state, _ = jax.lax.scan(body, state, (jax.random.split(key, 4), jnp.arange(4)))
        return state.score[0] > 0, (state.owner == 11)

    keys = jax.random.split(jax.random.PRNGKey(seed), shots)
    at = jnp.asarray(list(spots.values()), jnp.float32)
    per_spot = jax.vmap(lambda spot: jax.vmap(lambda k: one(spot, k))(keys))
    scored, saved = (np.asarray(x) for x in jax.jit(per_spot)(at))
    return {
        name: {"shots": shots, "keeper_at": list(xy), "saved": float(saved[i].mean()),
               "scored": float(scored[i].mean())}
        for i, (name, xy) in enumerate(spots.items())
    }  # fmt: skip


KEEPER_SPOTS = {"on_line": (0.99, 0.0), "off_line": (0.90, 0.12)}


def idle_matches(scenario: str, matches: int, seed: int) -> dict:
    import jax
    import numpy as np

    from envs.football import Football

    env = Football(scenario)
    idle = _idle(env)

    def one(key):
        _, state = env.reset(key)

        def body(state, k):
            _, state, _, _, _ = env.step_env(k, state, idle)
            return state, None

        state, _ = jax.lax.scan(body, state, jax.random.split(key, env.max_steps))
        return state.score

    scores = np.asarray(jax.jit(jax.vmap(one))(jax.random.split(jax.random.PRNGKey(seed), matches)))
    conceded = scores[:, 1]
    return {"matches": matches, "steps": env.max_steps,
            "goals_conceded_mean": float(conceded.mean()),
            "no_goal_conceded": float((conceded == 0).mean())}  # fmt: skip


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--matches", type=int, default=256, help="matches per measurement")
    p.add_argument("--horizon", type=int, default=1000, help="steps to wait for a tackle")
    p.add_argument("--full-matches", type=int, default=32, help="3,000-step idle matches")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--out", type=Path, default=OUT)
    args = p.parse_args(argv)
    result = {"possession": {}, "keeper": {}, "idle_matches": {}}
    for level, scenario in SCENARIOS.items():
        result["possession"][level] = possession_loss(
            scenario, args.matches, args.horizon, args.seed
        )
        result["keeper"][level] = keeper_saves(scenario, KEEPER_SPOTS, args.matches, args.seed)
        result["idle_matches"][level] = idle_matches(scenario, args.full_matches, args.seed)
        print(level, json.dumps({k: v[level] for k, v in result.items()}))
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(result, indent=1) + "\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

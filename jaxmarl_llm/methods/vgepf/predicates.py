"""State predicates of V-GEPF's seven skills: when a football state shows a skill.

One predicate per skill of :data:`.skills.SKILLS` (same order). Each takes a
``envs.football.FootballState`` and returns ``(holds, score)``: a boolean and a graded
score in [0, 1] that is positive exactly where the predicate holds and grows with how
clearly it holds; "correct formation" instead grades closeness (1 exactly where it holds,
falling off with the worst violation). They are pure ``jax.numpy`` functions of one state: they jit
and vmap over batches of states. The frame dataset of ``experiments/train_clip.py``
captions rendered frames with them.

Coordinates are the state's: the blue (left) team, players 0..10 with keeper 0, attacks
toward x = +1; the red (right) team is 11..21 with keeper 11; y in [-0.42, 0.42].
"Outfield" excludes the keepers.

Definitions (constants below):

* **has advantage**: blue outnumbers red where it matters: more blue outfield players
  ahead of the ball (x > ball x, attacking options) than red outfield players goal-side
  of it (x > ball x, defenders between the ball and red's goal), or at least
  ``NEAR_SUPERIORITY`` more blue than red outfield players within ``NEAR_RADIUS`` of the
  ball. Score: the larger margin, over 3.
* **ball location**: the ball is within ``GOAL_RADIUS`` of red's goal centre (1, 0) and
  at x > ``GOAL_ZONE_X``. Score: ``1 - distance / GOAL_RADIUS``.
* **correct formation**: blue's three lines of its 4-3-3 by slot
  (``scenarios.FORMATION_LINES``: the back four, the central three, the front three, as
  the renderer draws them). Each line is flat (its x range at most ``LINE_DEPTH``, so the
  lines are parallel to the goal lines and to each other), the gaps between consecutive
  line means lie in ``LINE_GAP``, and each line spans at least ``LINE_SPACING`` in y per
  gap between its players (a line, not a cluster). The team's home spots hold it. Score:
  ``1 -`` the worst violation over ``FORMATION_TOLERANCE`` (1 when it holds).
* **encourage dribbling**: a blue player owns the ball and moved at least
  ``DRIBBLE_SPEED`` in the last step (the ball moves with it). Score: speed over the
  running speed.
* **encourage attack**: blue is in possession (owns the ball, or a blue pass is in
  flight) with the ball in red's half (x > 0), and at least ``ATTACK_SUPPORT`` other blue
  outfield players support it: no more than ``SUPPORT_BEHIND`` behind the ball and within
  ``SUPPORT_RADIUS`` of it. Score: supporters over ``ATTACK_SUPPORT + 1``.
* **encourage defense**: the ball is within ``GOAL_RADIUS`` of blue's goal (-1, 0) at
  x < ``-GOAL_ZONE_X``, and at least ``DEFENDERS_NEEDED`` blue outfield players are
  goal-side of it (x < ball x) and within ``DEFENCE_LANE`` of it in y. Score: proximity
  times defenders over ``DEFENDERS_NEEDED + 1``.
* **encourage passing**: the ball is free, the last kick was a blue pass still in flight
  (``pass_team == 0``: not yet received, not a shot) and the ball rolls at least
  ``PASS_SPEED`` per step. Score: speed over ``2 * PASS_SPEED``.
"""

from __future__ import annotations

import jax
import jax.numpy as jnp

from envs.football.env import RUN_SPEED
from envs.football.scenarios import FORMATION_LINES

NEAR_RADIUS = 0.2
NEAR_SUPERIORITY = 2
GOAL_RADIUS = 0.5
GOAL_ZONE_X = 0.6
LINE_DEPTH = 0.12
LINE_GAP = (0.1, 0.4)
LINE_SPACING = 0.1
FORMATION_TOLERANCE = 0.15
DRIBBLE_SPEED = 0.5 * RUN_SPEED
ATTACK_SUPPORT = 2
SUPPORT_BEHIND = 0.15
SUPPORT_RADIUS = 0.45
DEFENDERS_NEEDED = 2
DEFENCE_LANE = 0.3
PASS_SPEED = 0.006

_BLUE_OUT = slice(1, 11)
_RED_OUT = slice(12, 22)


def _clip01(x: jax.Array) -> jax.Array:
    return jnp.clip(x, 0.0, 1.0).astype(jnp.float32)


def _blue_owns(state) -> jax.Array:
    return (state.owner >= 0) & (state.owner < 11)


def _speed(v: jax.Array) -> jax.Array:
    return jnp.sqrt((v**2).sum(-1))


def has_advantage(state) -> tuple[jax.Array, jax.Array]:
    """Blue outnumbers red ahead of the ball or near it (module docstring)."""
    bx = state.ball[0]
    blue_ahead = (state.pos[_BLUE_OUT, 0] > bx).sum()
    red_goal_side = (state.pos[_RED_OUT, 0] > bx).sum()
    d = _speed(state.pos - state.ball)  # [22] distance to the ball
    near_margin = (d[_BLUE_OUT] < NEAR_RADIUS).sum() - (d[_RED_OUT] < NEAR_RADIUS).sum()
    # both margins on one scale: the first unit of advantage is where each predicate starts
    margin = jnp.maximum(blue_ahead - red_goal_side, near_margin - (NEAR_SUPERIORITY - 1))
    return margin >= 1, _clip01(margin / 3.0)


def ball_location(state) -> tuple[jax.Array, jax.Array]:
    """The ball is close to red's goal (module docstring)."""
    d = _speed(state.ball - jnp.array([1.0, 0.0]))
    holds = (d < GOAL_RADIUS) & (state.ball[0] > GOAL_ZONE_X)
    return holds, jnp.where(holds, _clip01(1.0 - d / GOAL_RADIUS), 0.0)


def formation_lines(state) -> tuple[jax.Array, jax.Array, jax.Array]:
    """Blue's formation lines by slot, back to front: mean x [3], x range [3], y range [3]."""
    lines = [state.pos[jnp.asarray(line)] for line in FORMATION_LINES]
    mean_x = jnp.stack([p[:, 0].mean() for p in lines])
    depth = jnp.stack([p[:, 0].max() - p[:, 0].min() for p in lines])
    width = jnp.stack([p[:, 1].max() - p[:, 1].min() for p in lines])
    return mean_x, depth, width


_MIN_WIDTH = tuple(LINE_SPACING * (len(line) - 1) for line in FORMATION_LINES)


def correct_formation(state) -> tuple[jax.Array, jax.Array]:
    """Three flat, parallel, properly spaced blue lines (module docstring)."""
    mean_x, depth, width = formation_lines(state)
    gaps = jnp.diff(mean_x)  # [2]: negative where a line is behind the one it should lead
    violation = jnp.concatenate(
        [
            jnp.maximum(depth - LINE_DEPTH, 0.0),
            jnp.maximum(LINE_GAP[0] - gaps, 0.0),
            jnp.maximum(gaps - LINE_GAP[1], 0.0),
            jnp.maximum(jnp.asarray(_MIN_WIDTH) - width, 0.0),
        ]
    ).max()
    return violation <= 0.0, _clip01(1.0 - violation / FORMATION_TOLERANCE)


def encourage_dribbling(state) -> tuple[jax.Array, jax.Array]:
    """A blue player carries the ball and moves with it (module docstring)."""
    speed = _speed(state.vel[jnp.clip(state.owner, 0, 21)])
    holds = _blue_owns(state) & (speed >= DRIBBLE_SPEED)
    return holds, jnp.where(holds, _clip01(speed / RUN_SPEED), 0.0)


def encourage_attack(state) -> tuple[jax.Array, jax.Array]:
    """Blue in possession in red's half with supporting players (module docstring)."""
    in_flight = (state.owner < 0) & (state.pass_team == 0)
    possession = _blue_owns(state) | in_flight
    pos = state.pos[_BLUE_OUT]  # [10, 2]
    carrier = jnp.arange(1, 11) == state.owner
    near = _speed(pos - state.ball) < SUPPORT_RADIUS
    forward = pos[:, 0] >= state.ball[0] - SUPPORT_BEHIND
    support = (near & forward & ~carrier).sum()
    holds = possession & (state.ball[0] > 0.0) & (support >= ATTACK_SUPPORT)
    return holds, jnp.where(holds, _clip01(support / (ATTACK_SUPPORT + 1.0)), 0.0)


def encourage_defense(state) -> tuple[jax.Array, jax.Array]:
    """The ball near blue's goal with blue players between it and the goal (docstring)."""
    d = _speed(state.ball - jnp.array([-1.0, 0.0]))
    close = (d < GOAL_RADIUS) & (state.ball[0] < -GOAL_ZONE_X)
    pos = state.pos[_BLUE_OUT]
    goal_side = (pos[:, 0] < state.ball[0]) & (jnp.abs(pos[:, 1] - state.ball[1]) < DEFENCE_LANE)
    n = goal_side.sum()
    holds = close & (n >= DEFENDERS_NEEDED)
    score = (1.0 - d / GOAL_RADIUS) * n / (DEFENDERS_NEEDED + 1.0)
    return holds, jnp.where(holds, _clip01(score), 0.0)


def encourage_passing(state) -> tuple[jax.Array, jax.Array]:
    """A blue pass rolling toward its receiver (module docstring)."""
    speed = _speed(state.ball_vel)
    holds = (state.owner < 0) & (state.pass_team == 0) & (speed >= PASS_SPEED)
    return holds, jnp.where(holds, _clip01(speed / (2.0 * PASS_SPEED)), 0.0)


PREDICATES = (
    has_advantage,
    ball_location,
    correct_formation,
    encourage_dribbling,
    encourage_attack,
    encourage_defense,
    encourage_passing,
)


def skill_predicates(state) -> tuple[jax.Array, jax.Array]:
    """All seven predicates in :data:`.skills.SKILLS` order: ``holds`` [7] bool and
    ``score`` [7] float32 (vmap for batches of states)."""
    out = [p(state) for p in PREDICATES]
    return jnp.stack([h for h, _ in out]), jnp.stack([s for _, s in out])

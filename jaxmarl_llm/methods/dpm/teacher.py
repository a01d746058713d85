"""DPM's scripted teacher on SMAX: the authors' human criteria (appendix D.2) as arrays.

- Trajectory comparison: the segment in which the allies keep more health while the
  enemies lose more is preferred. A segment's value is the enemy team's health lost
  minus the ally team's health lost between its first and last state (fractions of each
  team's total, so in [-1, 1]); the prompt shows exactly those two states. With
  ``enemy_weight`` > 1 the damage dealt counts more than the damage taken: while a team
  loses its fights, a segment without contact (value 0) otherwise beats any segment with
  contact, and the labels teach it to keep away from the enemy.
- Agent comparison (one step): agents focusing fire rank high (an attack scores 2 plus
  the number of other allies attacking the same enemy); a healthy agent (over half its
  health) that does not attack although an enemy is in range ranks lowest (0); agents
  that are hard to rank (dead, hurt and not attacking, or with no enemy in range) are
  left unrated. ``idle_out_of_range=True`` ranks healthy agents that do not attack
  lowest wherever they are (the prompt's "an agent with no contribution gets the lowest
  rank"); by default an agent with no enemy in range is unrated, as it may be closing in.
"""

from __future__ import annotations

from typing import Any

import jax
import jax.numpy as jnp

from envs.array_env import ArrayEnv
from envs.capabilities import SmaxUnits, require

ATTACK_SCORE = 2.0
HEALTHY = 0.5


def require_smax(env: ArrayEnv):
    return require(env, SmaxUnits, needed_by="DPM (its scripted teacher reads SMAX units)")


def _units(env_state: Any):
    return getattr(env_state, "state", env_state)


def health_fractions(env: ArrayEnv, env_state: Any) -> jax.Array:
    """Each unit's health as a fraction of its type's maximum ``[U]`` (0 when dead)."""
    raw = require_smax(env)
    u = _units(env_state)
    max_health = jnp.asarray(raw.unit_type_health)[u.unit_types]
    return jnp.where(u.unit_alive, u.unit_health / max_health, 0.0)


def segment_value(env: ArrayEnv, first: Any, last: Any, enemy_weight: float = 1.0) -> jax.Array:
    """``enemy_weight`` x enemy health lost minus ally health lost from ``first`` to ``last``
    (team fractions)."""
    n = require_smax(env).num_allies
    h0, h1 = health_fractions(env, first), health_fractions(env, last)
    ally_lost = (h0[:n] - h1[:n]).mean()
    enemy_lost = (h0[n:] - h1[n:]).mean()
    return enemy_weight * enemy_lost - ally_lost


def agent_contributions(
    env: ArrayEnv, env_state: Any, actions: jax.Array, idle_out_of_range: bool = False
):
    """``(scores [N], rated [N])`` of the allies' actions ``[N]`` in ``env_state``."""
    raw = require_smax(env)
    moves = raw.num_movement_actions  # 4 moves + stop; attacks follow
    u = _units(env_state)
    n = raw.num_allies
    alive = u.unit_alive[:n]
    healthy = health_fractions(env, env_state)[:n] > HEALTHY
    avail = raw.get_avail_actions(env_state)
    in_range = jnp.stack([jnp.asarray(avail[a])[moves:].any() for a in env.agents])
    attacking = (actions >= moves) & alive
    target = jnp.where(attacking, actions - moves, -1)
    same = (target[:, None] == target[None, :]) & attacking[:, None] & attacking[None, :]
    focus = same.sum(-1) - attacking  # other allies on the same enemy
    scores = jnp.where(attacking, ATTACK_SCORE + focus, 0.0).astype(jnp.float32)
    rated = attacking | (alive & healthy & (in_range | idle_out_of_range))
    return scores, rated

"""The scripted intent of the learners' players as GRF actions.

A football env's scripted policy gives every player an intent (``ScriptedIntents``: a move
direction, sprint, a kick); the learners' players act only through GRF's sticky actions,
one per step. ``scripted_actions`` picks, per controlled player, the action that carries
the intent out.
"""

from __future__ import annotations

from typing import Any

import jax
import jax.numpy as jnp

from envs.capabilities import ScriptedIntents, require
from envs.football.env import (
    DIRECTIONS,
    HIGH_PASS,
    IDLE,
    LONG_PASS,
    NO_KICK,
    RELEASE_DIRECTION,
    RELEASE_SPRINT,
    SHORT_PASS,
    SHOT,
    SPRINT,
    FootballState,
)

# scripted kick kind -> the action that kicks it
_KICK_ACTION = jnp.array([IDLE, SHORT_PASS, LONG_PASS, HIGH_PASS, SHOT], jnp.int32)


def scripted_actions(env: Any, state: FootballState, sprint: bool = True) -> jax.Array:
    """Actions ``[C]`` of the controlled players following their scripted intent.

    One GRF action per step, by priority: the carrier's kick, then (``sprint``) the
    sprint toggle, then the move direction (the nearest of the 8; release when standing)
    when it differs from the sticky one, else idle. Without ``sprint`` the players'
    sprint state is left as it is."""
    intents = require(env, ScriptedIntents, needed_by="scripted football actions")
    ctrl = intents.controlled
    move, sprints, kick = intents.scripted_intent(state)
    move, sprints, kick = move[ctrl], sprints[ctrl], kick[ctrl]
    standing = (move**2).sum(-1) < 1e-6
    # DIRECTIONS[1:] are the unit vectors of actions LEFT..BOTTOM_LEFT (1..8)
    direction = jnp.where(standing, 0, 1 + jnp.argmax(move @ DIRECTIONS[1:].T, -1))
    steer = jnp.where(direction == 0, RELEASE_DIRECTION, direction)
    action = jnp.where(direction != state.sticky_dir[ctrl], steer, IDLE)
    if sprint:
        toggle = jnp.where(sprints, SPRINT, RELEASE_SPRINT)
        action = jnp.where(sprints != state.sprint[ctrl], toggle, action)
    return jnp.where(kick != NO_KICK, _KICK_ACTION[kick], action).astype(jnp.int32)

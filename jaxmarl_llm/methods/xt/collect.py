"""Event counts for xT from simulated football matches.

No match event data ships with the project, so the counts come from our own env. The
right team plays the env's scripted policy; the left team's controlled players play the
same scripted intent turned into GRF actions (``envs.football.scripted_actions``), each
replaced by a uniformly random action with probability ``epsilon`` (``explored_actions``),
so that play (and the grid's data) reaches more of the pitch than the scripted policy's
single lane toward goal. The events of both teams (``events.step_events``) count in their
attacking frames.
"""

from __future__ import annotations

import jax
import jax.numpy as jnp

from envs.capabilities import ScriptedIntents, require
from envs.football.env import (
    HIGH_PASS,
    KICK_HIGH,
    KICK_LONG,
    KICK_SHORT,
    KICK_SHOT,
    LONG_PASS,
    NO_KICK,
    NUM_ACTIONS,
    SHORT_PASS,
    SHOT,
    Football,
    FootballState,
)
from envs.football.scripted_actions import scripted_actions
from jaxmarl_llm.methods.xt.events import TALLY_NAMES, Pending, add_events, step_events
from jaxmarl_llm.methods.xt.grid import NX, NY, XTCounts


def explored_actions(
    env: Football, state: FootballState, key: jax.Array, epsilon: float = 0.0
) -> jax.Array:
    """Actions ``[C]`` of the controlled players following the scripted intent
    (``scripted_actions``), each replaced by a uniformly random action with probability
    ``epsilon``."""
    action = scripted_actions(env, state)
    k_mix, k_random = jax.random.split(key)
    explore = jax.random.uniform(k_mix, action.shape) < epsilon
    random = jax.random.randint(k_random, action.shape, 0, NUM_ACTIONS)
    return jnp.where(explore, random, action).astype(jnp.int32)


def kick_intent(env: Football, state: FootballState, actions: jax.Array) -> jax.Array:
    """Kick kind ``[22]`` each player tries this step: from ``actions`` [C] for the
    controlled players, the scripted intent for the others (as ``Football.step_env``)."""
    intents = require(env, ScriptedIntents, needed_by="xT's event counts")
    scripted = intents.scripted_intent(state)[2]
    kinds = jnp.select(
        [actions == SHORT_PASS, actions == LONG_PASS, actions == HIGH_PASS, actions == SHOT],
        [KICK_SHORT, KICK_LONG, KICK_HIGH, KICK_SHOT],
        NO_KICK,
    )
    chosen = jnp.zeros((22,), jnp.int32).at[intents.controlled].set(kinds)
    return jnp.where(intents.is_controlled, chosen, scripted)


def match_counts(
    env: Football,
    key: jax.Array,
    num_envs: int,
    epsilon: float = 0.0,
    nx: int = NX,
    ny: int = NY,
) -> tuple[XTCounts, jax.Array]:
    """Counts and tallies ``[len(TALLY_NAMES)]`` of ``num_envs`` episodes of
    ``env.max_steps`` steps each (no resets: the episodes end with the scan)."""
    reset_key, step_key = jax.random.split(key)
    _, states = jax.vmap(env.reset)(jax.random.split(reset_key, num_envs))
    pending = jax.vmap(lambda _: Pending.none())(jnp.arange(num_envs))

    def one_env(k, pend, s):
        k_act, k_step = jax.random.split(k)
        actions = explored_actions(env, s, k_act, epsilon)
        kick = kick_intent(env, s, actions)
        act = {a: actions[i] for i, a in enumerate(env.agents)}
        _, s2, _, _, _ = env.step_env(k_step, s, act)
        pend, events = step_events(pend, s, kick, s2, nx, ny)
        return pend, s2, events

    def body(carry, k):
        counts, tallies, pend, s = carry
        pend, s, events = jax.vmap(one_env)(jax.random.split(k, num_envs), pend, s)
        return (add_events(counts, events), tallies + events.tallies.sum(0), pend, s), None

    init = (XTCounts.zeros(nx, ny), jnp.zeros((len(TALLY_NAMES),)), pending, states)
    keys = jax.random.split(step_key, env.max_steps)
    (counts, tallies, _, _), _ = jax.lax.scan(body, init, keys)
    return counts, tallies

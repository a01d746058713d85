"""A scripted salad team: a pure, jittable policy over ``SaladState``.

``scripted_actions(env, state) -> int32[2]`` picks every agent's macro-action (a busy agent
keeps its running one); ``ScriptedTeam(env)`` is the salad entries' ``ScriptedPolicy``.
The team is rule-based and finishes every task on both maps; it is not claimed optimal.

* The **chef** (agent 0) does the cooking. Foods are taken in task order (tomato, lettuce,
  onion); the k-th food of the task is chopped on knife ``k % 2 + 1``. Empty-handed, the
  chef chops the unchopped food lying on a knife (walking there first), else fetches the
  next food whose knife is free, else fetches the plate. With the plate it scoops up every
  chopped food, delivers a complete dish, and, when a food still needs the busy knife (the
  three-food salad), parks the plate on the other knife, chops the last food, carries it to
  the parked plate and picks both up.
* The **partner** (agent 1) on map B is the runner: it carries each food of the task, then
  the plate, from its side to the wall counter ("go to counter"). On map A the partner
  waits at its start, which is off every item's and tool's access cell (the knives and the
  delivery counter each have one neighbouring floor cell, so a second cook there deadlocks
  the kitchen without primitive moves).
"""

from __future__ import annotations

import jax
import jax.numpy as jnp

from envs.salad.env import (
    CHOP,
    CHOPS_NEEDED,
    DELIVER,
    GET_PLATE,
    GET_TOMATO,
    GO_COUNTER,
    GO_KNIFE_1,
    NOBODY,
    WAIT,
    SaladKitchen,
    SaladState,
    _cell,
    _pos,
)
from envs.salad.maps import NUM_CELLS, PLATE, UNREACHABLE


def _first(mask):
    return mask.any(), jnp.argmax(mask)


def _chef(env: SaladKitchen, state: SaladState) -> jax.Array:
    me = 0
    my_cell = _cell(state.agent_pos[me])
    needed = env._task_foods[state.task]
    rank = jnp.cumsum(needed) - 1
    knife_of = rank % 2  # [3] knife index of each food
    chopped = state.chops >= CHOPS_NEEDED
    loose = env._loose(state)
    knife_cells = env._knives
    on_knife = loose[:3, None] & (state.item_cell[:3, None] == knife_cells[None, :])  # [3, 2]
    knife_busy = (loose[:, None] & (state.item_cell[:, None] == knife_cells[None, :])).any(0)
    reach = env._distance[state.item_cell, NUM_CELLS, my_cell] < UNREACHABLE  # [4]
    holding, held = env._held_item(state, me)
    held_f = jnp.minimum(held, 2)
    plate_loose = loose[PLATE]
    plate_has_food = state.in_plate.any()

    get = lambda f: GET_TOMATO + f
    # holding the plate
    complete = (state.in_plate == needed).all()
    has_chopped, chopped_f = _first(needed & chopped & loose[:3] & reach[:3])
    pending = needed & ~chopped & ~on_knife.any(1)
    has_pending, pending_f = _first(pending)
    park_knife = 1 - knife_of[pending_f]
    with_plate = jnp.select(
        [complete, has_chopped, has_pending & ~knife_busy[park_knife]],
        [DELIVER, get(chopped_f), GO_KNIFE_1 + park_knife],
        WAIT,
    )
    # holding food
    with_food = jnp.where(
        chopped[held_f],
        GET_PLATE,
        jnp.where(knife_busy[knife_of[held_f]], WAIT, GO_KNIFE_1 + knife_of[held_f]),
    )
    # empty-handed
    to_chop, chop_f = _first(needed & ~chopped & on_knife.any(1))
    chop_knife = knife_cells[jnp.argmax(on_knife[chop_f])]
    next_to_knife = jnp.abs(state.agent_pos[me] - _pos(chop_knife)).sum() == 1
    to_finish, finish_f = _first(needed & chopped & loose[:3] & plate_loose & plate_has_food)
    to_fetch, fetch_f = _first(pending & loose[:3] & reach[:3] & ~knife_busy[knife_of])
    plate_free = plate_loose & ~plate_has_food & reach[PLATE]
    empty_handed = jnp.select(
        [to_chop & next_to_knife, to_chop, to_finish, to_fetch, plate_free],
        [CHOP, get(chop_f), get(finish_f), get(fetch_f), GET_PLATE],
        WAIT,
    )
    return jnp.where(holding, jnp.where(held == PLATE, with_plate, with_food), empty_handed).astype(
        jnp.int32
    )


def _runner(env: SaladKitchen, state: SaladState) -> jax.Array:
    me = 1
    holding, _ = env._held_item(state, me)
    needed = env._task_foods[state.task]
    at_source = (state.item_holder == NOBODY) & (state.item_cell == env._item_start)
    at_source = at_source & jnp.append(~state.in_plate, True)
    has_food, food = _first(needed & at_source[:3])
    return jnp.select(
        [holding, has_food, at_source[PLATE]],
        [GO_COUNTER, GET_TOMATO + food, GET_PLATE],
        WAIT,
    ).astype(jnp.int32)


def scripted_actions(env: SaladKitchen, state: SaladState) -> jax.Array:
    """int32[2] macro-actions of the scripted team (busy agents keep theirs)."""
    chef = _chef(env, state)
    partner = _runner(env, state) if env.map_name == "B" else jnp.int32(WAIT)
    fresh = jnp.stack([chef, partner])
    return jnp.where(state.busy, state.macro, fresh).astype(jnp.int32)


class ScriptedTeam:
    """The salad entries' ``ScriptedPolicy`` (``envs.capabilities``): the scripted team
    playing ``env``."""

    def __init__(self, env: SaladKitchen):
        self.env = env

    def greedy_actions(self, state: SaladState) -> jax.Array:
        """int32[2]: the scripted team's macro-actions."""
        return scripted_actions(self.env, state)


def run_scripted(env: SaladKitchen, state: SaladState, forbid: tuple[int, ...] = ()) -> SaladState:
    """Play the scripted team from ``state`` to the end of the episode and return the
    terminal state; macro-actions in ``forbid`` are replaced by waiting. Jittable and
    vmappable over ``state`` (``env`` and ``forbid`` static)."""
    key = jax.random.PRNGKey(0)  # the env's step draws nothing

    def body(carry):
        state, _ = carry
        actions = scripted_actions(env, state)
        for m in forbid:
            actions = jnp.where(actions == m, WAIT, actions)
        _, state, _, dones, _ = env.step_env(
            key, state, dict(zip(env.agents, actions, strict=True))
        )
        return state, dones["__all__"]

    over = state.delivered | (state.step >= env.max_steps)
    state, _ = jax.lax.while_loop(lambda c: ~c[1], body, (state, over))
    return state

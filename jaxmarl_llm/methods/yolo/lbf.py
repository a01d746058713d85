"""YOLO-MARL on Level-Based Foraging: state interpretation, tasks, task-to-action matching.

- ``make_interpret(grid_size)(state)``: the pure function from the env state to the named
  parts the planning function reads; its source (with the docstring) is what the model is
  shown (appendix C.2).
- Tasks (section 5, LBF): ``TARGET_FOOD_0 .. TARGET_FOOD_{F-1}``, then ``PICKUP``. Food
  ``i`` is the ``i``-th in the observation's order (the food still on the grid row-major,
  then the collected food), in the interpreted state as in the raw observation, so a plan
  reads the same indices either way.
- ``action_matches(state, tasks, actions)``: "target food i" accepts a move that brings
  the agent closer (Manhattan) to a cell next to food i, and ``LOAD`` once it is next to
  it (the paper's rule); "pickup" accepts ``LOAD``. A task naming collected food accepts
  anything (there is nothing left to do for it). Two refinements close loopholes that
  MAPPO exploits under the paper's rule alone: ``NONE`` next to the food is not accepted
  (an agent parked there would collect the bonus forever), and a move only counts if its
  cell is open now (on the grid, no food, no other agent), with any open move accepted
  as a detour when no open cell is closer. Without the latter, an agent lined up behind
  its partner "approaches" by bumping into it every step while the partner loads alone:
  both match their tasks for the rest of the episode and never collect anything.
- ``REFERENCE_PLANNING_FUNCTION``: what the scripted backend answers, compiled through
  the same sandbox as a model's answer: both agents target the nearest remaining food
  (they must load together), and pick it up once both are next to it.
"""

from __future__ import annotations

import jax
import jax.numpy as jnp

from envs.lbf import LOAD, MOVES, LBFState, food_order


def make_interpret(grid_size: int):
    def interpret(state: LBFState) -> dict:
        """Named parts of a Level-Based Foraging state. Food items are listed as the
        agents' observation lists them: those still on the grid first (row by row), then
        those collected.

        Returns a dict of arrays:
            agent_pos: [N, 2] (row, col) of every agent.
            agent_level: [N] level of every agent.
            food_pos: [F, 2] (row, col) of every food item.
            food_level: [F] level of every food item.
            food_alive: [F] 1 while the food is still on the grid, 0 once collected.
            distance: [N, F] Manhattan distance from each agent to each food item
                (1 means adjacent: the agent can load it).
        """
        order = food_order(state, grid_size)
        food_pos = state.food_pos[order]
        d = jnp.abs(state.agent_pos[:, None, :] - food_pos[None, :, :]).sum(-1)
        return {
            "agent_pos": state.agent_pos,
            "agent_level": state.agent_level,
            "food_pos": food_pos,
            "food_level": state.food_level[order],
            "food_alive": state.food_alive[order].astype(jnp.int32),
            "distance": d,
        }

    return interpret


def task_constants(num_food: int) -> dict[str, int]:
    out = {f"TARGET_FOOD_{i}": i for i in range(num_food)}
    out["PICKUP"] = num_food
    return out


def _distance_to_adjacent(pos, food):
    """Manhattan distance from ``pos`` to the nearest cell next to ``food``."""
    return jnp.maximum(jnp.abs(pos - food).sum(-1) - 1, 0)


def open_moves(state: LBFState, grid_size: int) -> jax.Array:
    """``[N, 6]``: the action is a move (not NONE/LOAD) onto a cell that is on the grid,
    holds no remaining food and no other agent right now."""
    n = state.agent_pos.shape[0]
    cell = state.agent_pos[:, None, :] + MOVES[None]  # [N, 6, 2]
    inside = ((cell >= 0) & (cell < grid_size)).all(-1)
    on_food = ((cell[:, :, None, :] == state.food_pos[None, None]).all(-1) & state.food_alive).any(
        -1
    )
    on_agent = (cell[:, :, None, :] == state.agent_pos[None, None]).all(-1)  # [N, 6, N]
    on_other = (on_agent & ~jnp.eye(n, dtype=bool)[:, None, :]).any(-1)
    is_move = (MOVES != 0).any(-1)[None]
    return inside & ~on_food & ~on_other & is_move


def action_matches(
    state: LBFState, tasks: jax.Array, actions: jax.Array, grid_size: int = 8
) -> jax.Array:
    """``[N]`` bool: does each agent's action carry out its task?"""
    num_food = state.food_pos.shape[0]
    target = food_order(state, grid_size)[jnp.clip(tasks, 0, num_food - 1)]  # state indices
    food = state.food_pos[target]  # [N, 2]
    here = _distance_to_adjacent(state.agent_pos, food)  # [N]
    cell = state.agent_pos[:, None, :] + MOVES[None]  # [N, 6, 2]
    closer = _distance_to_adjacent(cell, food[:, None, :]) < here[:, None]
    open_ = open_moves(state, grid_size)
    toward = open_ & closer
    # boxed in (every closer cell holds food or an agent): any open move is the detour
    good = toward | (open_ & ~toward.any(-1, keepdims=True))
    move_ok = jnp.take_along_axis(good, actions[:, None], -1)[:, 0]
    approach = jnp.where(here == 0, actions == LOAD, move_ok)
    gone = ~state.food_alive[target]
    is_pickup = tasks >= num_food
    return jnp.where(is_pickup, actions == LOAD, approach | gone)


REFERENCE_PLANNING_FUNCTION = '''
def planning_function(processed_state):
    """Both agents go for the nearest food still on the grid; once both stand next to it
    they pick it up together (each food needs the sum of the agents' levels)."""
    distance = processed_state["distance"]
    alive = processed_state["food_alive"]
    total = distance.sum(0) + 1000 * (1 - alive)
    food = jnp.argmin(total)
    both_adjacent = (distance[:, food] == 1).all()
    task = jnp.where(both_adjacent, PICKUP, food)
    return {"agent_0": task, "agent_1": task}
'''

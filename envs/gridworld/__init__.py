"""A small multi-agent grid world in pure JAX: the core of ``two_switch`` and ``victim_rubble``.

The paper's grid worlds (LCA, Fig. 2; Swamy et al., 2024) are minigrid-like: agents are
triangles on a grid of walls and floor that turn to face the direction they move in and
act on the cell they face. ``GridWorld`` is that core as a jaxmarl ``MultiAgentEnv``;
the two tasks subclass it and only add their layout, objects and task logic.

Modules
    ``actions``: the action and facing constants.
    ``layout``: ASCII layouts, task objects (``GridObject``) and the distance tables.
    ``state``: ``GridState``.
    ``dynamics``: ``GridWorld`` (transition, rewards, observations).
    ``policy``: the scripted policy (``greedy_actions``) over the distance tables.
    ``rendering``: ``render``, the RGB picture of a state.
    ``sampling``: hashed uniforms and agent placement for start and random states.
"""

from envs.gridworld.actions import (
    ACTION_NAMES,
    DIR_XY,
    DIRECTIONS,
    DOWN,
    INTERACT,
    LEFT,
    NUM_ACTIONS,
    RIGHT,
    STAY,
    UP,
)
from envs.gridworld.dynamics import GridWorld
from envs.gridworld.layout import (
    STAGE,
    UNREACHABLE,
    GridObject,
    distance_table,
    flood_fill,
    parse_layout,
)
from envs.gridworld.sampling import padded_cells, pick_two, uniforms
from envs.gridworld.state import GridState

__all__ = [
    "ACTION_NAMES",
    "DIRECTIONS",
    "DIR_XY",
    "DOWN",
    "LEFT",
    "RIGHT",
    "UP",
    "GridObject",
    "GridState",
    "GridWorld",
    "INTERACT",
    "NUM_ACTIONS",
    "STAGE",
    "STAY",
    "UNREACHABLE",
    "distance_table",
    "flood_fill",
    "padded_cells",
    "parse_layout",
    "pick_two",
    "uniforms",
]

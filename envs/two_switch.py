"""Two-Switch (LCA paper, sec. 5.1, Fig. 2 left): split the switches, open the door, reach the goal.

Two identical agents start at random cells of the upper room (random facing). Two
switches sit in the upper room's left and right walls; an agent triggers one by
standing next to it, facing it and using ``interact``. The door in the wall between
the upper and the lower room opens once both switches are on (at the end of that step),
and the task is completed when an agent stands on the goal in the lower room. Agents
see each other (the teammate's cell and facing are in the observation) but cannot
communicate, so they should split the switches by watching each other.

Layout (9 x 9; ``L``/``R`` switches, ``D`` door, ``G`` goal; ``w`` is plain floor: the
cell in front of the door where the heuristic sends the agent not needed at a switch)::

    #########
    #.......#
    L.......R
    #.......#
    #...w...#
    ####D####
    #.......#
    #......G#
    #########

Rewards (see ``envs.gridworld.dynamics``): every agent gets +1 when a switch is turned on (twice),
+1 when the door opens, +1 when an agent arrives at the goal and +1 for completing the
task, so a successful episode of ``n`` steps returns ``5 - n / max_steps`` (the step
penalty ``-n / n_max`` is paid once, at the end of the episode; a timeout returns the
events so far minus 1). ``individual_reward`` (the hand-crafted baseline): 1 to the
agent that itself turns a switch on or reaches the goal.

The paper (sec. 5.1) lists +1 for completing the task and +1 when any agent handles a
switch or arrives, and a step penalty ``-n / n_max``: no door reward, which makes the best
return ``4 - n / n_max``, while its Fig. 3 text calls the optimum ``5 - step_penalty``;
when the penalty is paid it does not say. ``paper_rewards=True`` follows the list: no door
reward and ``-1 / n_max`` at every step (``-n / n_max`` in all), best return
``4 - n / max_steps``.

``heuristic_potential`` is the paper's behaviour-dependence heuristic ("assuming the
teammate will take the best action for the team at this step, does the ego's action
help?"): with no switch on, the switches go to the agents by the assignment with the
smaller total distance (ties: agent 0 takes Switch1); with one on, the closer agent
(ties: lower index) goes for the other switch and the other agent to the cell in front
of the door; with the door open both head for the goal.
``phi_i = STAGE * (switches on + door open + goal reached) - distance to i's target``
(distances count actions, turns included, through the current obstacles). Moving toward
one's switch or the goal, and turning a switch on, always raise the mover's potential
(a step toward the assigned switch cannot flip the assignment: it lowers that total by
one and the other by at most one, and ties keep the identity assignment). The waiting
agent is the exception: walking to the door cell can bring it closer to the remaining
switch than its teammate, which makes that switch its target (no gain, or a loss).

``greedy_actions`` (BFS scripted policy) solves every start; from 100 random starts it
took 14.15 steps on average (12-16) against 14.06 for the exact joint optimum.
"""

from __future__ import annotations

from functools import partial

import jax
import jax.numpy as jnp
import numpy as np

from envs.capabilities import (
    RankingHeuristic,
    Renderer,
    ScriptedPolicy,
    StateDescriber,
    provides,
)
from envs.gridworld import (
    DIRECTIONS,
    STAGE,
    GridObject,
    GridState,
    GridWorld,
    padded_cells,
    pick_two,
    uniforms,
)
from envs.registry import EnvSpec, register

__all__ = ["LAYOUT", "TwoSwitch"]

LAYOUT = """
#########
#.......#
L.......R
#.......#
#...w...#
####D####
#.......#
#......G#
#########
"""

SWITCH1, SWITCH2, DOOR = 0, 1, 2  # object / flag indices; flag 3: goal reached
T_SWITCH1, T_SWITCH2, T_WAIT, T_GOAL = 0, 1, 2, 3  # distance-table targets

TASK_DESCRIPTION = (
    "Two agents in a grid world must get one of them to the goal in the lower room. A "
    "locked door in the wall between the upper room and the lower room opens only when "
    "both switches on the upper room's walls have been triggered. An agent triggers a "
    "switch by standing next to it, facing it and using 'interact'; moving turns an agent "
    "to face the direction it moves in. The agents cannot communicate but see each "
    "other's positions."
)
TEAM_TARGET = (
    "Trigger both switches to open the door, then bring one agent to the goal, in as few "
    "steps as possible."
)
KEY_STEPS = (
    "1. The two agents split the switches: each goes to a different switch, faces it and "
    "triggers it. 2. When both switches are on the door opens. 3. The agent closer to the "
    "door walks through it to the goal."
)
DEPENDENCY = (
    'Assuming the "teammate" agent will take the best action for the team at this step, '
    'does the current action taken by the "ego" agent help the team trigger both switches '
    "and reach the goal? The ego should head for the switch the teammate is not heading "
    "for (whoever is closer takes a switch), rather than follow the teammate, wait for it "
    "or leave all the work to it."
)


class TwoSwitch(GridWorld):
    """Two-Switch grid world; see the module docstring.

    Args:
        max_steps: episode length limit (``n_max`` of the step penalty), default 50.
        cell_px: pixels per cell in ``render``.
        paper_rewards: the paper's reward list: no door reward, step penalty paid per step.
    """

    def __init__(self, max_steps: int = 50, cell_px: int = 8, paper_rewards: bool = False):
        objects = (
            GridObject("Switch1", "L", "switch", users=(0, 1)),
            GridObject("Switch2", "R", "switch", users=(0, 1)),
            GridObject("Door", "D", "door", users=(), blocks_off=True, blocks_on=False),
        )
        super().__init__(
            LAYOUT,
            objects,
            arrival="G",
            arrival_kind="goal",
            roles=("agent", "agent"),
            max_steps=max_steps,
            configs=np.array([[0, 0, 0], [1, 1, 1]], bool),  # door closed / open
            targets=(("L", "face"), ("R", "face"), ("w", "stand"), ("G", "stand")),
            marks="w",
            cell_px=cell_px,
            paper_rewards=paper_rewards,
        )
        w = self.width
        self.door_y = self.cell_of("D") // w
        cells = np.arange(self.num_cells)
        upper = self.floor & (cells // w < self.door_y)
        open_all = self.free_cells([1, 1, 1]).copy()
        open_all[self.arrival_cell] = False  # random states never sit on the goal
        self._start_cells, self._start_sizes = padded_cells([np.nonzero(upper)[0]])
        self._random_cells, self._random_sizes = padded_cells(
            [np.nonzero(upper)[0], np.nonzero(open_all)[0]]
        )

    # ----- task logic ---------------------------------------------------------------------
    def _passive_update(self, obj):
        both = obj[SWITCH1] & obj[SWITCH2]
        return obj.at[DOOR].set(obj[DOOR] | both)

    def _arrival_ready(self, obj):
        return obj[DOOR]

    def _config_index(self, flags):
        return flags[DOOR].astype(jnp.int32)

    @partial(jax.jit, static_argnums=(0,))
    def reset(self, key):
        u = uniforms(key, 4)
        pos = pick_two(u[:2], jnp.zeros((2,), jnp.int32), self._start_cells, self._start_sizes)
        facing = jnp.minimum((u[2:] * 4).astype(jnp.int32), 3)
        state = self.make_state(pos, facing, jnp.zeros((self.num_flags,), bool), 0)
        return self.get_obs(state), state

    @partial(jax.jit, static_argnums=(0,))
    def random_state(self, key) -> GridState:
        """Random switches (door open iff both on), agents anywhere they could be (the
        lower room only with the door open; never on the goal), random facing and step."""
        u = uniforms(key, 7)
        on = u[:2] < 0.5
        door = on[0] & on[1]
        group = jnp.broadcast_to(door.astype(jnp.int32), (2,))
        pos = pick_two(u[2:4], group, self._random_cells, self._random_sizes)
        facing = jnp.minimum((u[4:6] * 4).astype(jnp.int32), 3)
        step = jnp.minimum((u[6] * self.max_steps).astype(jnp.int32), self.max_steps - 1)
        flags = jnp.stack([on[0], on[1], door, jnp.zeros((), bool)])
        return self.make_state(pos, facing, flags, step)

    # ----- heuristic ------------------------------------------------------------------------
    def _targets(self, state: GridState) -> jax.Array:
        """``[N]`` distance-table target of each agent (see the module docstring)."""
        d1 = self.distance(T_SWITCH1, state)
        d2 = self.distance(T_SWITCH2, state)
        on1, on2, door = state.flags[SWITCH1], state.flags[SWITCH2], state.flags[DOOR]
        ident = d1[0] + d2[1] <= d2[0] + d1[1]
        none_on = jnp.where(
            ident, jnp.array([T_SWITCH1, T_SWITCH2]), jnp.array([T_SWITCH2, T_SWITCH1])
        )
        remaining = jnp.where(on1, T_SWITCH2, T_SWITCH1)
        d_rem = jnp.where(on1, d2, d1)
        agent0_closer = d_rem[0] <= d_rem[1]
        one_on = jnp.where(
            agent0_closer,
            jnp.stack([remaining, jnp.int32(T_WAIT)]),
            jnp.stack([jnp.int32(T_WAIT), remaining]),
        )
        tid = jnp.where(door, T_GOAL, jnp.where(on1 | on2, one_on, none_on))
        return tid.astype(jnp.int32)

    @partial(jax.jit, static_argnums=(0,))
    def heuristic_potential(self, state: GridState) -> jax.Array:
        tid = self._targets(state)
        dist = self.distance(tid, state).astype(jnp.float32)
        dist = jnp.where(self.won(state), 0.0, dist)
        progress = jnp.sum(state.flags).astype(jnp.float32)
        return STAGE * progress - dist

    def _policy_targets(self, state):
        return self._targets(state), jnp.broadcast_to(~self.won(state), (self.num_agents,))

    # ----- text ---------------------------------------------------------------------------
    def _where(self, cell: int) -> str:
        x, y = self.xy(cell)
        if y < self.door_y:
            room = "the upper room"
        elif y == self.door_y:
            room = "the doorway between the upper room and the lower room"
        else:
            room = "the lower room"
        return f"({x}, {y}) in {room}"

    def describe(self, state: GridState, agent: int) -> str:
        s = self._host(state)
        me, mate = agent, 1 - agent
        flags = s["flags"]
        lines = [
            f"You are the ego agent at {self._where(s['pos'][me])}, facing "
            f"{DIRECTIONS[s['facing'][me]]}.",
            f"The teammate is at {self._where(s['pos'][mate])}, facing "
            f"{DIRECTIONS[s['facing'][mate]]}.",
        ]
        for k, side in ((SWITCH1, "left"), (SWITCH2, "right")):
            x, y = self.xy(self.obj_cell[k])
            state_txt = "on" if flags[k] else "off"
            lines.append(
                f"{self.objects[k].name} at ({x}, {y}) on the {side} wall of the upper room "
                f"is {state_txt}."
            )
        x, y = self.xy(self.obj_cell[DOOR])
        lines.append(
            f"The door at ({x}, {y}) between the upper room and the lower room is "
            f"{'open' if flags[DOOR] else 'closed'}."
        )
        gx, gy = self.xy(self.arrival_cell)
        reached = " and has been reached" if flags[-1] else ""
        lines.append(f"The goal is at ({gx}, {gy}) in the lower room{reached}.")
        lines.append(
            f"Time step {s['step']} of {self.max_steps}. Coordinates are (x, y): x grows to "
            "the right, y grows downward."
        )
        return "\n".join(lines)

    def prompt_context(self, state: GridState, agent: int) -> dict[str, str]:
        s = self._host(state)
        x, y = self.xy(s["pos"][agent])
        room = self._where(s["pos"][agent]).split(" in ", 1)[1]
        return {
            "task_description": TASK_DESCRIPTION,
            "team_target": TEAM_TARGET,
            "key_steps": KEY_STEPS,
            "dependency": DEPENDENCY,
            "ego_role": f"one of two identical agents, the ego at ({x},{y}) in {room}",
        }


register(
    EnvSpec(
        "two_switch",
        TwoSwitch,
        "LCA Two-Switch grid world (9x9): two agents trigger two switches to open a door, "
        "then one reaches the goal; team reward 5 - n/n_max at best",
        won_fn=lambda env, s: env.won(s),
        stats_fn=lambda env, s: {"individual_return": env.individual_return(s)},
        capabilities=provides(RankingHeuristic, StateDescriber, Renderer, ScriptedPolicy),
    )
)

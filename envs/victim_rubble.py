"""Victim-Rubble (LCA paper, sec. 4.2.2, 5.1 and Fig. 2 middle): heterogeneous rescue.

The green agent (agent 0) heals victims, the orange agent (agent 1) removes rubble: each
by standing next to the object, facing it and using ``interact``; the other agent's
``interact`` does nothing there. Nobody walks through rubble or victims (a healed victim
stays where it is). Five rooms: Victim1 in Chamber1 can be reached freely; Victim2 lies
at the end of the corridor Chamber4 (upper right), behind Rubble1 (blocking the only
passage between Chamber3 and Chamber5, on Chamber5's side) and Rubble2 (blocking the only
passage from Chamber5 into Chamber4); Rubble3, in Chamber3 next to the way to Chamber5,
blocks nothing (so the orange agent meets it before the blocking ones, the situation
the paper's sec. 5.2 discusses). Each agent starts at a random cell of a random room
among those reachable without removing rubble (Chamber1, Chamber2, Chamber3), with
random facing. Once every victim is healed and every piece of rubble removed, the task is
completed when an agent stands at home (Chamber3).

The default map (``layout="paper"``, 14 x 7) puts the objects the paper's prompt names
where it names them (sec. 4.2.2: Rubble1 at Chamber5 (8,1), Rubble2 at Chamber5 (9,2),
the orange agent at Chamber3 (4,3)); the rest of the paper's Fig. 2 is not given in
text and is drawn to match its description. ``layout="long_corridor"`` (11 x 9) is a
reconstruction with a four-cell corridor and longer walks (the scripted team
needs 29.7 steps on average against 27.1 here). ``A``/``B`` Victim1/Victim2,
``X``/``Y``/``Z`` Rubble1/2/3, ``H`` home; rooms ``1``-``5`` Chamber1-5, ``a``/``b``/
``c`` doorways::

    paper                             long_corridor
    ##############  ##############    ###########  ###########
    #A......X.####  #11a333c55####    #A..#..##B#  #111#33##4#
    #..#..Z#.Y..B#  #11#333#55444#    #......##.#  #111a33##4#
    ####...#######  ####333#######    #...#..##.#  #111#33##4#
    #......#######  #22b333#######    #####H.#.Y#  #####33#55#
    #..#H..#######  #22#333#######    #...#..#..#  #222#33#55#
    ##############  ##############    #.......X.#  #222b33c55#
                                      #...#.Z#..#  #222#33#55#
                                      ###########  ###########

The paper's optimum, ``7 - step penalty``, counts seven +1 events: two victims, three
pieces of rubble, the arrival home and the completion; so the task ends at home here.

Rewards (see ``envs.gridworld.dynamics``): every agent gets +1 for each victim healed (twice),
each piece of rubble removed (three times), +1 when an agent arrives home after all of
that and +1 for completing the task, so a successful episode of ``n`` steps returns
``7 - n / max_steps`` (step penalty ``-n / n_max`` once, at the end of the episode).
``individual_reward`` (the hand-crafted baseline): 1 to the green agent per victim it
heals, 1 to the orange agent per piece of rubble it removes, and 1 to the agent that
arrives home and completes the task.

``heuristic_potential`` is the paper's task-dependence heuristic ("the green agent always
prioritizes rescuing victims whose path is free of any rubble, waiting for the orange
agent to remove rubbles and clear paths"; the orange agent removes the rubble blocking
passages in path order, then the harmless one). Green's target is the nearest unhealed
victim it can reach; while only a blocked victim is left its distance is the constant
``UNREACHABLE`` (waiting is neutral); after all victims, home. Orange's target is the
first of Rubble1, Rubble2, Rubble3 still there, then home. ``phi_i = STAGE * (objects of
i's role done + task completed) - distance to i's target``, distances (actions, turns
included) through the current rubble. Removing the harmless Rubble3 early still raises
orange's potential (a unit of progress outweighs any distance).

``greedy_actions`` (BFS scripted policy; green waits while only the blocked victim is
left, stepping aside when it stands in orange's way) solves every start: 27.1 steps on
average (20-42) over 4000 random starts on the paper's map, 29.7 (23-42) on the long
corridor, where the exact joint optimum over 60 starts is 25.8 (19-31).

The Victim-Rubble configs train IPPO with ``ent_coef=0.05``: with 0.01 the policies
stop exploring before the last stage (going home). On the team reward alone no team
learns to finish the task; the oracle ``heuristic_potential`` shaper does.
"""

from __future__ import annotations

import itertools
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
    UNREACHABLE,
    GridObject,
    GridState,
    GridWorld,
    flood_fill,
    padded_cells,
    parse_layout,
    pick_two,
    uniforms,
)
from envs.registry import EnvSpec, register

__all__ = ["LAYOUTS", "VictimRubble"]

PAPER_LAYOUT = """
##############
#A......X.####
#..#..Z#.Y..B#
####...#######
#......#######
#..#H..#######
##############
"""
PAPER_ROOMS = """
##############
#11a333c55####
#11#333#55444#
####333#######
#22b333#######
#22#333#######
##############
"""
LONG_CORRIDOR_LAYOUT = """
###########
#A..#..##B#
#......##.#
#...#..##.#
#####H.#.Y#
#...#..#..#
#.......X.#
#...#.Z#..#
###########
"""
LONG_CORRIDOR_ROOMS = """
###########
#111#33##4#
#111a33##4#
#111#33##4#
#####33#55#
#222#33#55#
#222b33c55#
#222#33#55#
###########
"""
#: name -> (layout, rooms)
LAYOUTS = {
    "paper": (PAPER_LAYOUT, PAPER_ROOMS),
    "long_corridor": (LONG_CORRIDOR_LAYOUT, LONG_CORRIDOR_ROOMS),
}
ROOM_NAMES = {str(i): f"Chamber{i}" for i in range(1, 6)}
DOORWAYS = {
    "a": "the doorway between Chamber1 and Chamber3",
    "b": "the doorway between Chamber2 and Chamber3",
    "c": "the doorway between Chamber3 and Chamber5",
}
START_ROOMS = ("1", "2", "3")  # reachable without removing rubble

VICTIM1, VICTIM2, RUBBLE1, RUBBLE2, RUBBLE3 = range(5)  # flag 5: task completed
GREEN, ORANGE = 0, 1
T_HOME = 5  # distance-table targets 0-4 are the objects (in object order)

TASK_DESCRIPTION = (
    "Two agents with different skills work in a grid world of five rooms, Chamber1 to "
    "Chamber5. The green agent heals victims and the orange agent removes rubble, each by "
    "standing next to the object, facing it and using 'interact'; moving turns an agent "
    "to face the direction it moves in. Neither agent can walk through rubble or victims. "
    "One victim lies at the end of a long corridor (Chamber4) behind two pieces of "
    "rubble; the other victim can be reached freely; one piece of rubble blocks nothing."
)
KEY_STEPS = (
    "1. The orange agent removes the rubble blocking passages, in path order (Rubble1, "
    "then Rubble2), then the harmless Rubble3. 2. The green agent first heals the victim "
    "whose path is free, then the victim in Chamber4 once its path is cleared. 3. When "
    "every victim is healed and all rubble is removed, an agent goes home."
)
PRIORITY = (
    "The green agent always prioritizes rescuing victims whose path is free of any "
    "rubble, waiting for the orange agent to remove rubbles and clear paths."
)


class VictimRubble(GridWorld):
    """Victim-Rubble grid world; see the module docstring.

    Args:
        max_steps: episode length limit (``n_max`` of the step penalty), default 80.
        cell_px: pixels per cell in ``render``.
        layout: a name in ``LAYOUTS`` ("paper", the default, or "long_corridor"), or an
            ASCII map with the same letters, whose room map is then ``rooms``.
        rooms: the room map of an ASCII ``layout`` (digits 1-5 for Chamber1-5, ``a``/
            ``b``/``c`` for the doorways).
    """

    def __init__(
        self,
        max_steps: int = 80,
        cell_px: int = 8,
        layout: str = "paper",
        rooms: str | None = None,
    ):
        self.layout = layout if layout in LAYOUTS else "custom"
        if layout in LAYOUTS:
            if rooms is not None:
                raise ValueError(f"layout={layout!r} is a named layout; rooms is only for maps")
            layout, rooms = LAYOUTS[layout]
        elif "#" not in layout:
            raise ValueError(f"unknown layout {layout!r}; named layouts: {', '.join(LAYOUTS)}")
        elif rooms is None:
            raise ValueError("an ASCII layout needs its room map (rooms)")
        objects = (
            GridObject("Victim1", "A", "victim", users=(GREEN,)),
            GridObject("Victim2", "B", "victim", users=(GREEN,)),
            GridObject("Rubble1", "X", "rubble", users=(ORANGE,), blocks_on=False),
            GridObject("Rubble2", "Y", "rubble", users=(ORANGE,), blocks_on=False),
            GridObject("Rubble3", "Z", "rubble", users=(ORANGE,), blocks_on=False),
        )
        # configuration c: rubble j removed iff bit j of c (victims always block)
        subsets = np.array(list(itertools.product((0, 1), repeat=3)))[:, ::-1]
        configs = np.concatenate([np.zeros((8, 2), bool), subsets.astype(bool)], axis=1)
        super().__init__(
            layout,
            objects,
            arrival="H",
            arrival_kind="home",
            roles=("green", "orange"),
            max_steps=max_steps,
            configs=configs,
            targets=tuple((o.char, "face") for o in objects) + (("H", "stand"),),
            cell_px=cell_px,
        )
        rooms = parse_layout(rooms)
        if rooms.shape != self.grid.shape:
            raise ValueError("rooms must have the layout's shape")
        self.room_map = rooms.reshape(-1)
        starts = [np.nonzero(self.floor & (self.room_map == r))[0] for r in START_ROOMS]
        self._start_cells, self._start_sizes = padded_cells(starts)
        # random states: free cells connected to home under each rubble configuration;
        # home itself too (it only ends the task once everything is done: last row)
        reach = [
            np.nonzero(flood_fill(self.free_cells(cfg), self.arrival_cell, self.width))[0]
            for cfg in configs
        ]
        reach.append(reach[-1][reach[-1] != self.arrival_cell])
        self._random_cells, self._random_sizes = padded_cells(reach)
        self._progress_combos = np.array(
            [
                c
                for c in itertools.product((False, True), repeat=RUBBLE3 + 1)
                if not c[VICTIM2] or (c[RUBBLE1] and c[RUBBLE2])
            ],
            bool,
        )

    # ----- task logic ---------------------------------------------------------------------
    def _arrival_ready(self, obj):
        return jnp.all(obj)

    def _config_index(self, flags):
        r = flags[RUBBLE1 : RUBBLE3 + 1].astype(jnp.int32)
        return r[0] + 2 * r[1] + 4 * r[2]

    @partial(jax.jit, static_argnums=(0,))
    def reset(self, key):
        u = uniforms(key, 6)
        rooms = jnp.minimum((u[:2] * len(START_ROOMS)).astype(jnp.int32), len(START_ROOMS) - 1)
        pos = pick_two(u[2:4], rooms, self._start_cells, self._start_sizes)
        facing = jnp.minimum((u[4:] * 4).astype(jnp.int32), 3)
        state = self.make_state(pos, facing, jnp.zeros((self.num_flags,), bool), 0)
        return self.get_obs(state), state

    @partial(jax.jit, static_argnums=(0,))
    def random_state(self, key) -> GridState:
        """Random task progress, uniform over the 20 reachable combinations of healed
        victims and removed rubble (Victim2 healed only once Rubble1 and Rubble2 are gone;
        independent coin flips would make the late stages rare), agents on distinct free
        cells connected to home (on it only while something is left to do), random facing
        and step; never a completed task."""
        u = uniforms(key, 10)
        combos = jnp.asarray(self._progress_combos)
        pick = jnp.minimum((u[0] * len(combos)).astype(jnp.int32), len(combos) - 1)
        flags = jnp.concatenate([combos[pick], jnp.zeros((1,), bool)])
        row = jnp.where(jnp.all(flags[: RUBBLE3 + 1]), len(self.configs), self._config_index(flags))
        pos = pick_two(u[5:7], jnp.stack([row, row]), self._random_cells, self._random_sizes)
        facing = jnp.minimum((u[7:9] * 4).astype(jnp.int32), 3)
        step = jnp.minimum((u[9] * self.max_steps).astype(jnp.int32), self.max_steps - 1)
        return self.make_state(pos, facing, flags, step)

    # ----- heuristic ------------------------------------------------------------------------
    def _targets(self, state: GridState) -> tuple[jax.Array, jax.Array]:
        """``([N] target, [N] distance)``: green's and orange's current targets."""
        f = state.flags
        d1 = self.distance(VICTIM1, state)[GREEN]
        d2 = self.distance(VICTIM2, state)[GREEN]
        ok1 = ~f[VICTIM1] & (d1 < UNREACHABLE)
        ok2 = ~f[VICTIM2] & (d2 < UNREACHABLE)
        first1 = ok1 & (~ok2 | (d1 <= d2))
        left = jnp.where(~f[VICTIM2], VICTIM2, jnp.where(~f[VICTIM1], VICTIM1, T_HOME))
        g_target = jnp.where(first1, VICTIM1, jnp.where(ok2, VICTIM2, left))
        o_target = jnp.where(
            ~f[RUBBLE1],
            RUBBLE1,
            jnp.where(~f[RUBBLE2], RUBBLE2, jnp.where(~f[RUBBLE3], RUBBLE3, T_HOME)),
        )
        tid = jnp.stack([g_target, o_target]).astype(jnp.int32)
        dist = self.distance(tid, state)  # UNREACHABLE for a blocked victim
        return tid, dist

    @partial(jax.jit, static_argnums=(0,))
    def heuristic_potential(self, state: GridState) -> jax.Array:
        f = state.flags
        _, dist = self._targets(state)
        won = self.won(state)
        dist = jnp.where(won, 0, dist).astype(jnp.float32)
        green = f[VICTIM1].astype(jnp.int32) + f[VICTIM2] + won
        orange = f[RUBBLE1].astype(jnp.int32) + f[RUBBLE2] + f[RUBBLE3] + won
        progress = jnp.stack([green, orange]).astype(jnp.float32)
        return STAGE * progress - dist

    def _policy_targets(self, state):
        # the heuristic's targets; a green agent left with only the blocked victim stays
        # where it is (its target is unreachable) until the orange agent clears the way
        tid, _ = self._targets(state)
        return tid, jnp.broadcast_to(~self.won(state), (self.num_agents,))

    # ----- text ---------------------------------------------------------------------------
    def room_of(self, cell: int) -> str:
        r = str(self.room_map[int(cell)])
        return ROOM_NAMES.get(r) or DOORWAYS.get(r, "a wall")

    def _at(self, cell: int, space: bool = True) -> str:
        x, y = self.xy(cell)
        return f"{self.room_of(cell)} ({x}, {y})" if space else f"{self.room_of(cell)} ({x},{y})"

    def describe(self, state: GridState, agent: int) -> str:
        s = self._host(state)
        me, mate = agent, 1 - agent
        f = s["flags"]
        skill = {GREEN: "heals victims", ORANGE: "removes rubble"}
        lines = [
            f"You are the ego agent (the {self.roles[me]} agent, who {skill[me]}) at "
            f"{self._at(s['pos'][me])}, facing {DIRECTIONS[s['facing'][me]]}.",
            f"The teammate (the {self.roles[mate]} agent, who {skill[mate]}) is at "
            f"{self._at(s['pos'][mate])}, facing {DIRECTIONS[s['facing'][mate]]}.",
        ]
        for k in (VICTIM1, VICTIM2):
            status = "healed" if f[k] else "not healed yet"
            lines.append(f"{self.objects[k].name} at {self._at(self.obj_cell[k])}: {status}.")
        for k in (RUBBLE1, RUBBLE2, RUBBLE3):
            status = "removed" if f[k] else "still there"
            lines.append(f"{self.objects[k].name} at {self._at(self.obj_cell[k])}: {status}.")
        done = " (an agent has arrived home: task completed)" if f[-1] else ""
        lines.append(f"Home is at {self._at(self.arrival_cell)}{done}.")
        lines.append(
            f"Time step {s['step']} of {self.max_steps}. Coordinates are (x, y): x grows to "
            "the right, y grows downward."
        )
        return "\n".join(lines)

    def constraints(self, state: GridState) -> list[str]:
        """The current dependency constraints between the agents' tasks (host side)."""
        f = self._host(state)["flags"]
        at = lambda k: self._at(self.obj_cell[k], space=False)
        out = []
        if not f[RUBBLE1]:
            out.append(
                f"Rubble1: {at(RUBBLE1)}, **blocking the only passage** between Chamber5 "
                "and Chamber3 from the side of Chamber5"
            )
        if not f[RUBBLE2]:
            out.append(
                f"Rubble2: {at(RUBBLE2)}, **blocking the only passage** reaching Chamber4 "
                "which contains one Victim"
            )
        if not f[RUBBLE3]:
            out.append(f"Rubble3: {at(RUBBLE3)}, blocking no passage")
        if not f[VICTIM1]:
            out.append(f"Victim1: {at(VICTIM1)}, its path is free of rubble")
        if not f[VICTIM2]:
            path = (
                "its path is free of rubble"
                if f[RUBBLE1] and f[RUBBLE2]
                else "its path is blocked by rubble"
            )
            out.append(f"Victim2: {at(VICTIM2)}, {path}")
        if not out:
            out.append("Every victim is healed and all rubble is removed: an agent should go home")
        return out

    def prompt_context(self, state: GridState, agent: int) -> dict[str, str]:
        s = self._host(state)
        hx, hy = self.xy(self.arrival_cell)
        return {
            "task_description": TASK_DESCRIPTION,
            "team_target": (
                "Heal every victim and remove every piece of rubble, then bring one agent "
                f"home to Chamber3 ({hx},{hy}), in as few steps as possible."
            ),
            "key_steps": KEY_STEPS,
            "dependency": PRIORITY
            + "\nCurrent constraints:\n"
            + "\n".join(self.constraints(state)),
            "ego_role": f"the {self.roles[agent]} agent at {self._at(s['pos'][agent], False)}",
        }


register(
    EnvSpec(
        "victim_rubble",
        VictimRubble,
        "LCA Victim-Rubble grid world (11x9): the green agent heals 2 victims, the orange "
        "agent removes 3 rubble (2 block the way to a victim), then one goes home; team "
        "reward 7 - n/n_max at best",
        won_fn=lambda env, s: env.won(s),
        stats_fn=lambda env, s: {"individual_return": env.individual_return(s)},
        groups_fn=lambda env: (0, 1),
        capabilities=provides(RankingHeuristic, StateDescriber, Renderer, ScriptedPolicy),
    )
)

"""The grid-world env: state, transition, team and individual rewards, observations.

Actions
    A move turns the agent to face that direction and moves it one cell if the cell there
    is free: not a wall, not an object that currently blocks (a closed door, a switch, a
    victim, rubble not yet removed) and not another agent. Agents act in index order
    within a step (agent 0 first, seeing agent 1's old position; agent 1 sees agent 0's
    new one), so there are never conflicts. ``interact`` activates the object in the
    faced cell if this agent may activate it and it is not active yet.

Objects and flags
    Each object (``GridObject``) has one activation flag (switch on, door open, victim
    healed, rubble removed) and blocks movement depending on it. Objects without users
    are passive: the task turns them on (the Two-Switch door). ``state.flags`` holds the
    object flags followed by one task flag, set when an agent stands on the arrival
    cell (goal / home) while the task allows arriving (``_arrival_ready``); that
    completes the task (``won``).

Rewards (the paper's grid-world team reward, sec. 5.1)
    Every agent gets the same team reward: +1 for every flag that turns on at the step
    (each switch / victim / rubble / door, and the arrival), +1 more when the task is
    completed, and the step penalty ``-n / n_max`` once at the end of the episode (on
    success or at the time limit; ``n`` steps taken, ``n_max = max_steps``). The
    episode ends (``dones["__all__"]``) at completion or when ``step >= max_steps``.
    With ``paper_rewards`` passive objects (the Two-Switch door) pay nothing, since the
    paper's list of rewarded events does not name them, and the penalty is ``-1 / n_max``
    at every step (the same ``-n / n_max`` in all, paid as it accrues).
    ``event_reward`` is the team reward without the step penalty (the sparse reward LCA
    infers the team goal from); ``individual_return`` the hand-crafted individual
    rewards of an episode, read off its last state (logged as ``stat_individual_return``).

Observations
    Per agent, float32, ego first: one-hot of the ego cell over the grid, ego facing
    one-hot (up, down, left, right) and the ego's ``x / (W - 1)``, ``y / (H - 1)``; the
    same block for the teammate; the flags; the ego's role one-hot (only where roles
    differ) and the time fraction ``step / max_steps``. ``agent_features`` is the
    observation without the time fraction. (The two coordinates repeat what the one-hot
    says, in a form an MLP generalizes over: with them IPPO with the oracle potential
    learned Victim-Rubble markedly faster; see the ``victim_rubble`` docstring.)

Cost
    The step is branch-free array code on a handful of ints per env (the per-agent loop
    is unrolled over the two agents). The pure methods (``reset``, ``random_state``,
    ``transition``, ``agent_features``, ``heuristic_potential``, ``individual_reward``,
    ``greedy_actions``, ``render``) are jitted with the env static, so eager calls are
    fast too; they inline into callers' jits and vmap as usual.
"""

from __future__ import annotations

from collections.abc import Sequence
from functools import partial

import jax
import jax.numpy as jnp
import numpy as np
from jaxmarl.environments.multi_agent_env import MultiAgentEnv
from jaxmarl.environments.spaces import Box, Discrete

from envs.gridworld.actions import DIR_XY, INTERACT, NUM_ACTIONS, RIGHT, STAY, UP
from envs.gridworld.layout import GridObject, distance_table, parse_layout
from envs.gridworld.policy import GridPolicy
from envs.gridworld.rendering import GridRendering
from envs.gridworld.state import GridState


class GridWorld(GridPolicy, GridRendering, MultiAgentEnv):
    """Two-agent grid-world core; see the module docstring and ``envs.gridworld``.

    Subclasses pass the layout and objects and implement ``reset``, ``random_state``,
    ``heuristic_potential``, ``describe`` and ``prompt_context``; they may override
    ``_passive_update`` (flags the task sets itself), ``_arrival_ready`` and, for the
    distance tables, ``_config_index`` (which obstacle configuration a state is in).

    Args:
        layout: ASCII layout.
        objects: the task objects (each marked by its own letter in ``layout``).
        arrival: layout letter of the goal / home cell.
        arrival_kind: marker style for it ("goal" or "home").
        roles: role name per agent (two agents).
        max_steps: episode length limit ``n_max``.
        configs: ``[C, K]`` object-flag patterns whose obstacles the distance tables use.
        targets: ``(layout letter, mode)`` distance-table targets (see ``distance_table``).
        marks: extra layout letters that are plain floor (named cells, e.g. targets).
        cell_px: pixels per cell in ``render``.
        paper_rewards: the LCA paper's reward list (see the module docstring).
    """

    noop_action = STAY

    def __init__(
        self,
        layout: str,
        objects: Sequence[GridObject],
        arrival: str,
        arrival_kind: str,
        roles: tuple[str, ...],
        max_steps: int,
        configs: np.ndarray,
        targets: Sequence[tuple[str, str]],
        marks: str = "",
        cell_px: int = 8,
        paper_rewards: bool = False,
    ):
        if len(roles) != 2:
            raise ValueError("the grid worlds have two agents")
        if max_steps < 1:
            raise ValueError(f"max_steps must be positive, got {max_steps}")
        super().__init__(len(roles))
        self.roles = tuple(roles)
        self.max_steps = int(max_steps)
        self.cell_px = int(cell_px)
        self.paper_rewards = bool(paper_rewards)
        grid = parse_layout(layout)
        self.grid = grid
        self.height, self.width = grid.shape
        h, w = grid.shape
        self.num_cells = h * w
        self.objects = tuple(objects)
        k = len(self.objects)
        self.num_objects = k

        self.obj_cell = np.array([self.cell_of(o.char) for o in self.objects], np.int32)
        self.arrival_cell = self.cell_of(arrival)
        self.arrival_kind = arrival_kind
        known = {"#", ".", arrival} | {o.char for o in self.objects} | set(marks)
        unknown = set(np.unique(grid)) - known
        if unknown:
            raise ValueError(f"unknown layout letters {sorted(unknown)}")
        self.wall = (grid == "#").reshape(-1)
        inner = np.zeros((h, w), bool)
        inner[1:-1, 1:-1] = True
        open_cells = ~self.wall.copy()
        open_cells[self.obj_cell] = False
        self._border = ~inner.reshape(-1)
        if (open_cells & self._border).any():
            raise ValueError("the layout's border must be walls or objects")
        self.floor = open_cells  # [HW]: cells free of walls and objects
        self.blocks_off = np.array([o.blocks_off for o in self.objects], bool)
        self.blocks_on = np.array([o.blocks_on for o in self.objects], bool)
        self.can_use = np.array([[i in o.users for o in self.objects] for i in range(2)], bool)
        used = np.array([len(o.users) > 0 for o in self.objects], bool)
        self._used_objects = used
        # flags whose turning on pays the team +1: every object and the arrival, or with
        # paper_rewards the objects agents activate and the arrival
        self._paid_flags = np.append(used | (not self.paper_rewards), True)
        self.delta = (DIR_XY[:, 1] * w + DIR_XY[:, 0]).astype(np.int32)

        # distance tables
        self.configs = np.asarray(configs, bool).reshape(-1, k)
        self.target_names = tuple(t for t, _ in targets)
        self.target_face = np.array([m == "face" for _, m in targets], bool)
        free = np.stack([self.free_cells(cfg) for cfg in self.configs])
        self.dist = distance_table(free, [(self.cell_of(t), m) for t, m in targets], w)

        # spaces
        self._roles_differ = len(set(self.roles)) > 1
        self.role_names = tuple(dict.fromkeys(self.roles))
        self.num_flags = k + 1
        # one-hot cell, facing, x, y, then (dx, dy) to every object and the arrival cell
        landmarks = np.append(self.obj_cell, self.arrival_cell)
        self._landmark_xy = np.stack([landmarks % w, landmarks // w], -1).astype(np.float32)
        self.agent_block = self.num_cells + 6 + 2 * len(landmarks)
        self.feature_dim = (
            2 * self.agent_block
            + self.num_flags
            + (len(self.role_names) if self._roles_differ else 0)
        )
        self.obs_dim = self.feature_dim + 1
        self.observation_spaces = {a: Box(-1.0, 1.0, (self.obs_dim,)) for a in self.agents}
        self.action_spaces = {a: Discrete(NUM_ACTIONS) for a in self.agents}
        self._build_render()

    # ----- static helpers ---------------------------------------------------------------
    def free_cells(self, obj_flags) -> np.ndarray:
        """``[HW]`` bool (numpy): cells an agent may enter given object flags."""
        obj_flags = np.asarray(obj_flags, bool)
        free = self.floor.copy()
        blocking = np.where(obj_flags, self.blocks_on, self.blocks_off)
        free[self.obj_cell[~blocking]] = True
        return free

    def xy(self, cell) -> tuple[int, int]:
        """``(x, y)`` of a flat cell (host side)."""
        cell = int(cell)
        return cell % self.width, cell // self.width

    def cell(self, x: int, y: int) -> int:
        """The flat cell of ``(x, y)``."""
        return int(y * self.width + x)

    def cell_of(self, ch: str) -> int:
        """The flat cell of the layout letter ``ch`` (which must mark exactly one cell)."""
        ys, xs = np.nonzero(self.grid == ch)
        if len(ys) != 1:
            raise ValueError(f"layout must mark exactly one {ch!r} cell, got {len(ys)}")
        return int(ys[0] * self.width + xs[0])

    # ----- task hooks (overridden) ---------------------------------------------------------
    def _passive_update(self, obj: jax.Array) -> jax.Array:
        return obj

    def _arrival_ready(self, obj: jax.Array) -> jax.Array:
        return jnp.all(obj)

    def _config_index(self, flags: jax.Array) -> jax.Array:
        return jnp.zeros((), jnp.int32)

    # ----- the transition -------------------------------------------------------------------
    def _blocked(self, cell: jax.Array, obj: jax.Array) -> jax.Array:
        """Whether ``cell`` (any shape) is blocked by a wall or a blocking object."""
        blocking = jnp.where(obj, self.blocks_on, self.blocks_off)  # [K]
        hit = (cell[..., None] == self.obj_cell) & blocking
        return jnp.asarray(self.wall)[cell] | jnp.any(hit, axis=-1)

    @partial(jax.jit, static_argnums=(0,))
    def transition(self, state: GridState, actions: jax.Array) -> GridState:
        """The next state for ``actions`` ``[N]`` int (step counter included)."""
        k = self.num_objects
        pos, face = state.pos, state.facing
        obj = state.flags[:k]
        delta = jnp.asarray(self.delta)
        for i in range(self.num_agents):
            a = actions[i].astype(jnp.int32)
            is_move = (a >= UP) & (a <= RIGHT)
            d = jnp.clip(a - 1, 0, 3)
            target = pos[i] + delta[d]
            occupied = jnp.zeros((), bool)
            for j in range(self.num_agents):
                if j != i:
                    occupied = occupied | (pos[j] == target)
            moves = is_move & ~self._blocked(target, obj) & ~occupied
            front = pos[i] + delta[face[i]]
            hit = (a == INTERACT) & (front == self.obj_cell) & self.can_use[i] & ~obj
            obj = obj | hit
            pos = pos.at[i].set(jnp.where(moves, target, pos[i]))
            face = face.at[i].set(jnp.where(is_move, d, face[i]))
        obj = self._passive_update(obj)
        arrived = self._arrival_ready(obj) & jnp.any(pos == self.arrival_cell)
        done_flag = state.flags[k] | arrived
        flags = jnp.concatenate([obj, done_flag[None]])
        return GridState(pos=pos, facing=face, flags=flags, step=state.step + 1)

    def won(self, state: GridState) -> jax.Array:
        return state.flags[-1]

    def task_stage(self, state: GridState) -> jax.Array:
        """``[]`` int32: how many task flags (objects activated, completion) are set."""
        return jnp.sum(state.flags).astype(jnp.int32)

    def event_reward(self, state: GridState, nxt: GridState) -> jax.Array:
        """``[]`` float32: the team reward of the step ``state -> nxt`` without the step
        penalty (+1 per paid flag turned on, +1 more on completion)."""
        newly = nxt.flags & ~state.flags
        events = jnp.sum(newly & jnp.asarray(self._paid_flags))
        bonus = nxt.flags[-1] & ~state.flags[-1]
        return (events + bonus).astype(jnp.float32)

    def _reward_done(self, state: GridState, nxt: GridState):
        done = nxt.flags[-1] | (nxt.step >= self.max_steps)
        if self.paper_rewards:
            penalty = jnp.float32(1.0 / self.max_steps)
        else:
            penalty = jnp.where(done, nxt.step.astype(jnp.float32) / self.max_steps, 0.0)
        return self.event_reward(state, nxt) - penalty, done

    @partial(jax.jit, static_argnums=(0,))
    def step_env(self, key, state: GridState, actions: dict):
        act = jnp.stack([jnp.asarray(actions[a], jnp.int32).reshape(()) for a in self.agents])
        nxt = self.transition(state, act)
        reward, done = self._reward_done(state, nxt)
        obs = self._obs(nxt)
        rewards = {a: reward for a in self.agents}
        dones = {a: done for a in self.agents} | {"__all__": done}
        return self._to_dict(obs), nxt, rewards, dones, {}

    def get_obs(self, state: GridState) -> dict:
        return self._to_dict(self._obs(state))

    @property
    def agent_classes(self) -> dict:
        classes: dict = {}
        for a, r in zip(self.agents, self.roles, strict=True):
            classes.setdefault(r, []).append(a)
        return classes

    def _to_dict(self, x: jax.Array) -> dict:
        return {a: x[i] for i, a in enumerate(self.agents)}

    def make_state(self, pos, facing, flags=None, step=0) -> GridState:
        """A ``GridState`` from flat cells ``[N]``, facings ``[N]``, flags and step (arrays
        or host values; default: nothing done yet, step 0)."""
        if flags is None:
            flags = np.zeros((self.num_flags,), bool)
        return GridState(
            pos=jnp.asarray(pos, jnp.int32),
            facing=jnp.asarray(facing, jnp.int32),
            flags=jnp.asarray(flags, bool),
            step=jnp.asarray(step, jnp.int32),
        )

    # ----- observations -----------------------------------------------------------------
    @partial(jax.jit, static_argnums=(0,))
    def agent_features(self, state: GridState) -> jax.Array:
        """``[N, F]`` float32: observation without the time fraction (ego first).

        Besides the one-hot cell, each agent's block holds its coordinates and its offsets
        to every unfinished object and the arrival cell (zero once an object is done): a
        state-scoring model fitted on a few thousand ranked pairs generalises from those
        far better than from the one-hot cell alone (distances to targets are near-linear
        in them inside a room, and the zeroing tells it which targets are left).
        """
        cells = jnp.arange(self.num_cells)
        scale = jnp.asarray([self.width - 1, self.height - 1], jnp.float32)
        xy = jnp.stack([state.pos % self.width, state.pos // self.width], -1).astype(jnp.float32)
        offsets = (jnp.asarray(self._landmark_xy)[None] - xy[:, None]) / scale  # [N, L, 2]
        # a finished object (switch on, victim healed, rubble removed) is no target any more
        pending = jnp.append(~state.flags[: self.num_objects], True).astype(jnp.float32)
        offsets = offsets * pending[None, :, None]
        per = jnp.concatenate(
            [
                (state.pos[:, None] == cells).astype(jnp.float32),
                (state.facing[:, None] == jnp.arange(4)).astype(jnp.float32),
                xy / scale,
                offsets.reshape(self.num_agents, -1),
            ],
            axis=-1,
        )  # [N, agent_block]
        flags = state.flags.astype(jnp.float32)
        rows = []
        for i in range(self.num_agents):
            parts = [per[i]] + [per[j] for j in range(self.num_agents) if j != i] + [flags]
            if self._roles_differ:
                role = self.role_names.index(self.roles[i])
                parts.append(jnp.asarray(np.eye(len(self.role_names), dtype=np.float32)[role]))
            rows.append(jnp.concatenate(parts))
        return jnp.stack(rows)

    def _obs(self, state: GridState) -> jax.Array:
        t = state.step.astype(jnp.float32) / self.max_steps
        feats = self.agent_features(state)
        return jnp.concatenate([feats, jnp.broadcast_to(t, (self.num_agents, 1))], axis=-1)

    # ----- individual rewards ------------------------------------------------------------------
    @partial(jax.jit, static_argnums=(0,))
    def individual_reward(self, state: GridState, actions: jax.Array, next_state: GridState):
        """``[N]``: 1 per object the agent itself activated at this step (the first agent
        in index order that interacted with it, if allowed), and 1 for the agent that
        arrived on the goal / home cell and completed the task."""
        k = self.num_objects
        newly = next_state.flags[:k] & ~state.flags[:k]
        delta = jnp.asarray(self.delta)
        taken = jnp.zeros((k,), bool)
        out = []
        for i in range(self.num_agents):
            front = state.pos[i] + delta[state.facing[i]]
            hit = (actions[i] == INTERACT) & (front == self.obj_cell) & self.can_use[i]
            mine = hit & newly & ~taken
            taken = taken | hit
            arrived = (
                next_state.flags[k] & ~state.flags[k] & (next_state.pos[i] == self.arrival_cell)
            )
            out.append(jnp.sum(mine) + arrived)
        return jnp.stack(out).astype(jnp.float32)

    @partial(jax.jit, static_argnums=(0,))
    def individual_return(self, state: GridState) -> jax.Array:
        """``[]`` float32: the mean over agents of the ``individual_reward`` an episode
        ending in ``state`` paid. Each activated object with users was activated by exactly
        one agent and the arrival made by one, so their count over agents is the total."""
        k = self.num_objects
        earned = jnp.sum(state.flags[:k] & jnp.asarray(self._used_objects)) + state.flags[k]
        return earned.astype(jnp.float32) / self.num_agents

    # ----- host-side text ------------------------------------------------------------------
    def _host(self, state: GridState) -> dict:
        return {
            "pos": [int(p) for p in np.asarray(state.pos)],
            "facing": [int(f) for f in np.asarray(state.facing)],
            "flags": [bool(f) for f in np.asarray(state.flags)],
            "step": int(np.asarray(state.step)),
        }

    def ascii(self, state: GridState) -> str:
        """The layout with agents drawn as their index and active objects in lower case
        (host side; for debugging)."""
        s = self._host(state)
        g = self.grid.copy()
        for k, o in enumerate(self.objects):
            y, x = divmod(int(self.obj_cell[k]), self.width)
            g[y, x] = o.char.lower() if s["flags"][k] else o.char
        for i, p in enumerate(s["pos"]):
            y, x = divmod(p, self.width)
            g[y, x] = str(i)
        return "\n".join("".join(r) for r in g)

"""A small multi-agent grid world in pure JAX: the core of ``two_switch`` and ``victim_rubble``.

The paper's grid worlds (LCA, Fig. 2; Swamy et al., 2024) are minigrid-like: agents are
triangles on a grid of walls and floor that turn to face the direction they move in and
act on the cell they face. ``GridWorld`` is that core as a jaxmarl ``MultiAgentEnv``;
the two tasks subclass it and only add their layout, objects and task logic.

Layout and coordinates
    A layout is an ASCII picture (``#`` wall, ``.`` floor, task letters for objects and
    markers) parsed with numpy at construction. Cells are ``(x, y)`` with ``x`` the
    column from the left and ``y`` the row from the top; inside the state a cell is the
    flat index ``y * width + x``. The border must be wall (or objects in the wall), so
    a step never leaves the grid.

Actions
    ``0`` stay (the no-op), ``1`` up, ``2`` down, ``3`` left, ``4`` right, ``5``
    interact. A move turns the agent to face that direction and moves it one cell if the
    cell there is free: not a wall, not an object that currently blocks (a closed door,
    a switch, a victim, rubble not yet removed) and not another agent. Agents act in
    index order within a step (agent 0 first, seeing agent 1's old position; agent 1
    sees agent 0's new one), so there are never conflicts. ``interact`` activates the
    object in the faced cell if this agent may activate it and it is not active yet.

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

Observations
    Per agent, float32, ego first: one-hot of the ego cell over the grid, ego facing
    one-hot (up, down, left, right) and the ego's ``x / (W - 1)``, ``y / (H - 1)``; the
    same block for the teammate; the flags; the ego's role one-hot (only where roles
    differ) and the time fraction ``step / max_steps``. ``agent_features`` is the
    observation without the time fraction. (The two coordinates repeat what the one-hot
    says, in a form an MLP generalizes over: with them IPPO with the oracle potential
    learned Victim-Rubble markedly faster; see the ``victim_rubble`` docstring.)

Heuristics
    ``distance_table`` (numpy, at construction) gives for every target, every obstacle
    configuration (e.g. door closed/open, which rubble is left), every cell and facing
    the number of actions an agent needs to stand on the target cell (``stand``) or to
    stand next to it facing it (``face``, ready to interact), turns included; the
    heuristic potentials and the scripted policy (``greedy_actions``) are table
    lookups. Unreachable is ``UNREACHABLE`` (below ``STAGE``, the potential's weight
    per unit of task progress).

Cost
    The step is branch-free array code on a handful of ints per env (the per-agent loop
    is unrolled over the two agents); ``reset`` draws its few uniforms by hashing the
    key (``uniforms``) rather than through ``jax.random``, because ``ArrayEnv`` computes
    a reset at every step. The pure methods (``reset``, ``random_state``,
    ``transition``, ``agent_features``, ``heuristic_potential``, ``individual_reward``,
    ``greedy_actions``, ``render``) are jitted with the env static, so eager calls are
    fast too; they inline into callers' jits and vmap as usual.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from functools import partial

import jax
import jax.numpy as jnp
import numpy as np
from flax import struct
from jaxmarl.environments.multi_agent_env import MultiAgentEnv
from jaxmarl.environments.spaces import Box, Discrete

__all__ = [
    "ACTION_NAMES",
    "DIRECTIONS",
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
    "padded_cells",
    "parse_layout",
    "pick_two",
    "uniforms",
]

STAY, UP, DOWN, LEFT, RIGHT, INTERACT = range(6)
NUM_ACTIONS = 6
ACTION_NAMES = ("stay", "up", "down", "left", "right", "interact")
DIRECTIONS = ("up", "down", "left", "right")  # facing index = move action - 1
DIR_XY = np.array([[0, -1], [0, 1], [-1, 0], [1, 0]], np.int32)
STAGE = 100.0  # potential per unit of task progress; larger than any distance
UNREACHABLE = 60  # distance-table value for "cannot get there with these obstacles"

# Colours (RGB); agent 0 green and agent 1 orange as in the paper's Fig. 2.
WALL_RGB = (110, 110, 110)
FLOOR_RGB = (0, 0, 0)
AGENT_RGB = ((40, 200, 40), (255, 140, 0), (60, 140, 255), (220, 60, 220))


@struct.dataclass
class GridState:
    pos: jax.Array  # [N] int32 flat cell y * width + x
    facing: jax.Array  # [N] int32: 0 up, 1 down, 2 left, 3 right
    flags: jax.Array  # [K + 1] bool: object flags, then "task completed"
    step: jax.Array  # [] int32 steps taken in this episode


@dataclass(frozen=True)
class GridObject:
    """A task object at the layout cell marked ``char``.

    Args:
        name: shown in descriptions ("Switch1", "Rubble2").
        char: the layout letter marking its cell (one cell per letter).
        kind: drawing style, a key of ``STYLES`` ("switch", "door", "victim", "rubble").
        users: agents that can activate it with ``interact``; empty: a passive object.
        blocks_off / blocks_on: whether it blocks movement before / after activation.
    """

    name: str
    char: str
    kind: str
    users: tuple[int, ...] = ()
    blocks_off: bool = True
    blocks_on: bool = True


# ----- drawing -------------------------------------------------------------------------
def _shape(name: str, c: int) -> np.ndarray:
    """``[c, c]`` bool mask of a cell-sized shape."""
    yy, xx = np.mgrid[0:c, 0:c]
    m = c - 1
    if name == "none":
        return np.zeros((c, c), bool)
    if name == "full":
        return np.ones((c, c), bool)
    if name == "inset":
        return (yy >= 1) & (yy <= m - 1) & (xx >= 1) & (xx <= m - 1)
    if name == "small":
        return (yy >= 2) & (yy <= m - 2) & (xx >= 2) & (xx <= m - 2)
    if name == "frame":
        return (yy == 0) | (yy == m) | (xx == 0) | (xx == m)
    if name == "cross":
        mid = m / 2
        return ((np.abs(yy - mid) < 1.0) | (np.abs(xx - mid) < 1.0)) & _shape("inset", c)
    if name == "circle":
        mid = m / 2
        return (yy - mid) ** 2 + (xx - mid) ** 2 <= (c / 2 - 0.8) ** 2
    if name == "ring":
        mid = m / 2
        r2 = (yy - mid) ** 2 + (xx - mid) ** 2
        return (r2 <= (c / 2 - 0.5) ** 2) & (r2 >= (c / 2 - 2.0) ** 2)
    if name in DIRECTIONS:  # a triangle pointing that way
        # depth: 0 at the back edge, m at the tip; half-width shrinks toward the tip
        depth, side = {
            "up": (m - yy, xx),
            "down": (yy, xx),
            "left": (m - xx, yy),
            "right": (xx, yy),
        }[name]
        return np.abs(side - m / 2) <= (m - depth) / 2 + 0.25
    raise ValueError(f"unknown shape {name!r}")


# kind -> (shape when off, colour when off, shape when on, colour when on)
STYLES = {
    "switch": ("small", (70, 70, 220), "inset", (90, 230, 255)),
    "door": ("full", (150, 80, 30), "frame", (150, 80, 30)),
    "victim": ("cross", (230, 30, 30), "cross", (255, 200, 210)),
    "rubble": ("circle", (230, 200, 0), "none", (0, 0, 0)),
}
# static markers: char kind -> (shape, colour)
MARKERS = {
    "goal": ("inset", (0, 120, 0)),
    "home": ("ring", (80, 110, 255)),
}


# ----- layouts and distances ----------------------------------------------------------------
def parse_layout(text: str) -> np.ndarray:
    """ASCII rows (leading/trailing blank lines and indentation dropped) -> ``[H, W]`` chars."""
    rows = [r.strip() for r in text.strip().splitlines()]
    rows = [r for r in rows if r]
    if not rows or len({len(r) for r in rows}) != 1:
        raise ValueError("layout rows must be non-empty and of equal length")
    return np.array([list(r) for r in rows])


def _move_table(free: np.ndarray, width: int) -> np.ndarray:
    """``[HW, 4]``: the cell an agent at each cell ends in after each move."""
    hw = free.size
    cells = np.arange(hw)
    out = np.empty((hw, 4), np.int64)
    for d in range(4):
        t = np.clip(cells + DIR_XY[d, 1] * width + DIR_XY[d, 0], 0, hw - 1)
        out[:, d] = np.where(free[t], t, cells)
    return out


def distance_table(free: np.ndarray, targets: Sequence[tuple[int, str]], width: int) -> np.ndarray:
    """Exact action counts to reach each target, per obstacle configuration.

    Args:
        free: ``[C, HW]`` bool, the cells an agent may stand on in each configuration.
        targets: ``(flat cell, mode)`` pairs; mode ``"stand"`` (be on the cell) or
            ``"face"`` (be next to it facing it, so the next ``interact`` acts on it).
        width: grid width.

    Returns:
        ``[T, C, HW, 4]`` int32: actions needed from (cell, facing); 0 at the target;
        ``UNREACHABLE`` where the target cannot be reached (or the cell is not free).
        A move changes the facing even when it is blocked, so "turn to face" costs one.
    """
    free = np.asarray(free, bool)
    n_cfg, hw = free.shape
    big = 10**6
    out = np.full((len(targets), n_cfg, hw, 4), UNREACHABLE, np.int32)
    for c in range(n_cfg):
        nxt = _move_table(free[c], width)
        for t, (cell, mode) in enumerate(targets):
            goal = np.zeros((hw, 4), bool)
            if mode == "stand":
                goal[cell, :] = True
            elif mode == "face":
                for d in range(4):
                    src = cell - (DIR_XY[d, 1] * width + DIR_XY[d, 0])
                    if 0 <= src < hw:
                        goal[src, d] = True
            else:
                raise ValueError(f"unknown target mode {mode!r}")
            goal &= free[c][:, None]
            dist = np.where(goal, 0, big)
            while True:
                # one move d from (cell, any facing) lands in (nxt[cell, d], d)
                best = 1 + dist[nxt, np.arange(4)[None, :]].min(axis=1)
                new = np.minimum(dist, best[:, None])
                new[~free[c]] = big
                if np.array_equal(new, dist):
                    break
                dist = new
            reach = dist < big
            if reach.any() and dist[reach].max() >= UNREACHABLE:
                raise ValueError("grid too large for UNREACHABLE; raise it")
            out[t, c] = np.where(reach, dist, UNREACHABLE)
    return out


def flood_fill(free: np.ndarray, start: int, width: int) -> np.ndarray:
    """``[HW]`` bool: cells reachable from ``start`` over ``free`` cells."""
    nxt = _move_table(free, width)
    seen = np.zeros(free.size, bool)
    seen[start] = True
    while True:
        new = seen.copy()
        new[nxt[seen].reshape(-1)] = True
        if np.array_equal(new, seen):
            return seen
        seen = new


def _mix32(x: jax.Array) -> jax.Array:
    """A bijective 32-bit integer hash (the "lowbias32" xorshift-multiply finalizer)."""
    x = x ^ (x >> np.uint32(16))
    x = x * np.uint32(0x7FEB352D)
    x = x ^ (x >> np.uint32(15))
    x = x * np.uint32(0x846CA68B)
    return x ^ (x >> np.uint32(16))


def uniforms(key: jax.Array, n: int) -> jax.Array:
    """``[n]`` float32 uniforms in [0, 1) from ``key`` (raw ``uint32[2]`` or typed).

    The key's two words are hashed with a counter: ``mix(k0 ^ mix(k1 + golden * (i + 1)))``.
    ``ArrayEnv`` computes a reset at every step, and ``jax.random``'s threefry lowers to
    loops XLA cannot fuse on CPU; this doubles the grid worlds' step throughput and
    halves their compile time. Keys come from ``jax.random.split``, so their bits are
    already uniform; the hash only spreads them over the ``n`` draws.
    """
    if jnp.issubdtype(key.dtype, jax.dtypes.prng_key):
        key = jax.random.key_data(key)
    k = jnp.reshape(key, (-1,)).astype(jnp.uint32)
    counter = (np.arange(1, n + 1, dtype=np.uint64) * 0x9E3779B9 % 2**32).astype(np.uint32)
    x = _mix32(k[0] ^ _mix32(k[-1] + counter))
    return (x >> np.uint32(8)).astype(jnp.float32) * np.float32(2.0**-24)


def padded_cells(groups) -> tuple[np.ndarray, np.ndarray]:
    """Ragged lists of cells -> ``([G, M] padded cells, [G] sizes)`` for ``pick_two``."""
    m = max(len(g) for g in groups)
    cells = np.zeros((len(groups), m), np.int32)
    for i, g in enumerate(groups):
        cells[i, : len(g)] = g
    return cells, np.array([len(g) for g in groups], np.int32)


def pick_two(u: jax.Array, groups: jax.Array, cells: np.ndarray, sizes: np.ndarray):
    """Two distinct cells, agent ``i`` uniform in row ``groups[i]`` of ``cells``.

    Args:
        u: ``[2]`` uniforms in [0, 1).
        groups: ``[2]`` int rows of ``cells`` (rooms, or one obstacle configuration).
        cells: ``[G, M]`` candidate flat cells per row (padded); ``sizes``: ``[G]`` counts.
    Agent 1 skips agent 0's cell when both draw from the same row, so both stay uniform;
    different rows must not share cells.
    """
    sizes = jnp.asarray(sizes, jnp.int32)
    n0, n1 = sizes[groups[0]], sizes[groups[1]]
    same = (groups[0] == groups[1]).astype(jnp.int32)
    i0 = jnp.minimum((u[0] * n0).astype(jnp.int32), n0 - 1)
    m1 = n1 - same
    i1 = jnp.minimum((u[1] * m1).astype(jnp.int32), m1 - 1)
    i1 = i1 + same * (i1 >= i0).astype(jnp.int32)
    cells = jnp.asarray(cells, jnp.int32)
    return jnp.stack([cells[groups[0], i0], cells[groups[1], i1]])


class GridWorld(MultiAgentEnv):
    """Two-agent grid-world core; see the module docstring.

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
    ):
        if len(roles) != 2:
            raise ValueError("the grid worlds have two agents")
        if max_steps < 1:
            raise ValueError(f"max_steps must be positive, got {max_steps}")
        super().__init__(len(roles))
        self.roles = tuple(roles)
        self.max_steps = int(max_steps)
        self.cell_px = int(cell_px)
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

    def _reward_done(self, state: GridState, nxt: GridState):
        events = jnp.sum(nxt.flags) - jnp.sum(state.flags)
        bonus = nxt.flags[-1] & ~state.flags[-1]
        done = nxt.flags[-1] | (nxt.step >= self.max_steps)
        penalty = jnp.where(done, nxt.step.astype(jnp.float32) / self.max_steps, 0.0)
        reward = events.astype(jnp.float32) + bonus.astype(jnp.float32) - penalty
        return reward, done

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

    # ----- distances and the scripted policy ---------------------------------------------------
    def distance(self, target: jax.Array, state: GridState) -> jax.Array:
        """``[N]`` actions each agent needs to reach target index ``target`` (``[]`` or
        ``[N]``) under the state's obstacles (teammates ignored)."""
        cfg = self._config_index(state.flags)
        return jnp.asarray(self.dist)[target, cfg, state.pos, state.facing]

    def _policy_targets(self, state: GridState) -> tuple[jax.Array, jax.Array]:
        """``([N] target index, [N] bool active)`` the scripted policy heads for."""
        raise NotImplementedError

    @partial(jax.jit, static_argnums=(0,))
    def greedy_actions(self, state: GridState) -> jax.Array:
        """``[N]`` int32 actions of the scripted BFS policy (pure, jittable).

        Every agent descends its distance table toward ``_policy_targets`` (the
        heuristic's targets), treating the teammate as an obstacle, and interacts once
        it faces a ``face`` target; inactive agents stay. When the two agents want each
        other's cells, agent 1 steps aside to the best free cell.
        """
        tid, active = self._policy_targets(state)
        cfg = self._config_index(state.flags)
        dist = jnp.asarray(self.dist)
        obj = state.flags[: self.num_objects]
        delta = jnp.asarray(self.delta)
        dirs = jnp.arange(4)
        acts, wants, frees, d_next_all = [], [], [], []
        for i in range(self.num_agents):
            target = state.pos[i] + delta  # [4]
            env_free = ~self._blocked(target, obj)
            occ = jnp.zeros((4,), bool)
            for j in range(self.num_agents):
                if j != i:
                    occ = occ | (target == state.pos[j])
            nxt = jnp.where(env_free & ~occ, target, state.pos[i])
            d_next = dist[tid[i], cfg, nxt, dirs]  # [4]
            d_now = dist[tid[i], cfg, state.pos[i], state.facing[i]]
            best = jnp.argmin(d_next)
            # where it would go if the teammate were not there
            d_alone = dist[tid[i], cfg, jnp.where(env_free, target, state.pos[i]), dirs]
            want = target[jnp.argmin(d_alone)]
            at_goal = d_now == 0
            use = jnp.where(jnp.asarray(self.target_face)[tid[i]], INTERACT, STAY)
            a = jnp.where(at_goal, use, best + 1)
            a = jnp.where(active[i] & (d_now < UNREACHABLE), a, STAY)
            acts.append(a)
            wants.append(jnp.where(at_goal | ~active[i], state.pos[i], want))
            frees.append(env_free & ~occ)
            d_next_all.append(d_next)
        head_on = (wants[0] == state.pos[1]) & (wants[1] == state.pos[0])
        side = jnp.where(frees[1], d_next_all[1], 10**6)
        aside = jnp.where(jnp.any(frees[1]), jnp.argmin(side) + 1, STAY)
        acts[1] = jnp.where(head_on, aside, acts[1])
        return jnp.stack(acts).astype(jnp.int32)

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

    # ----- rendering ------------------------------------------------------------------------
    def _build_render(self):
        c, h, w = self.cell_px, self.height, self.width
        ph, pw = h * c, w * c
        pix_cell = (np.arange(ph)[:, None] // c) * w + (np.arange(pw)[None, :] // c)
        self._pix_cell = pix_cell.astype(np.int32)
        tile = lambda m: np.tile(m, (h, w))
        bg = np.zeros((ph, pw, 3), np.uint8)
        bg[:] = FLOOR_RGB
        # walls, and the border cells of objects set in the wall (switches), are grey
        bg[(self.wall | self._border)[pix_cell]] = WALL_RGB
        shape, colour = MARKERS[self.arrival_kind]
        bg[(pix_cell == self.arrival_cell) & tile(_shape(shape, c))] = colour
        self._background = bg
        masks_off, masks_on, col_off, col_on = [], [], [], []
        for o, cell in zip(self.objects, self.obj_cell, strict=True):
            s_off, c_off, s_on, c_on = STYLES[o.kind]
            here = pix_cell == cell
            masks_off.append(here & tile(_shape(s_off, c)))
            masks_on.append(here & tile(_shape(s_on, c)))
            col_off.append(c_off)
            col_on.append(c_on)
        self._obj_masks = np.stack([np.stack(masks_off), np.stack(masks_on)], 1)  # [K, 2, ph, pw]
        self._obj_colours = np.stack([np.array(col_off), np.array(col_on)], 1).astype(np.uint8)
        self._tri = np.stack([tile(_shape(d, c)) for d in DIRECTIONS])  # [4, ph, pw]

    @partial(jax.jit, static_argnums=(0,))
    def render(self, state: GridState) -> jax.Array:
        """``[H * cell_px, W * cell_px, 3]`` uint8 picture (pure JAX)."""
        img = jnp.asarray(self._background)
        pix_cell = jnp.asarray(self._pix_cell)
        for k in range(self.num_objects):
            on = state.flags[k]
            img = jnp.where(self._obj_masks[k, 0][..., None] & ~on, self._obj_colours[k, 0], img)
            img = jnp.where(self._obj_masks[k, 1][..., None] & on, self._obj_colours[k, 1], img)
        tri = jnp.asarray(self._tri)
        for i in range(self.num_agents):
            mask = (pix_cell == state.pos[i]) & tri[state.facing[i]]
            img = jnp.where(mask[..., None], jnp.asarray(AGENT_RGB[i], jnp.uint8), img)
        return img.astype(jnp.uint8)

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

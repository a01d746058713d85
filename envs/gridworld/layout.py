"""Grid-world layouts, task objects and the distance tables the heuristics read.

Layout and coordinates
    A layout is an ASCII picture (``#`` wall, ``.`` floor, task letters for objects and
    markers) parsed with numpy at construction. Cells are ``(x, y)`` with ``x`` the
    column from the left and ``y`` the row from the top; inside the state a cell is the
    flat index ``y * width + x``. The border must be wall (or objects in the wall), so
    a step never leaves the grid.

Distance tables
    ``distance_table`` (numpy, at construction) gives for every target, every obstacle
    configuration (e.g. door closed/open, which rubble is left), every cell and facing
    the number of actions an agent needs to stand on the target cell (``stand``) or to
    stand next to it facing it (``face``, ready to interact), turns included; the
    heuristic potentials and the scripted policy (``policy``) are table lookups.
    Unreachable is ``UNREACHABLE`` (below ``STAGE``, the potential's weight per unit of
    task progress).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from envs.gridworld.actions import DIR_XY

STAGE = 100.0  # potential per unit of task progress; larger than any distance
UNREACHABLE = 60  # distance-table value for "cannot get there with these obstacles"


@dataclass(frozen=True)
class GridObject:
    """A task object at the layout cell marked ``char``.

    Args:
        name: shown in descriptions ("Switch1", "Rubble2").
        char: the layout letter marking its cell (one cell per letter).
        kind: drawing style, a key of ``rendering.STYLES`` ("switch", "door", "victim", "rubble").
        users: agents that can activate it with ``interact``; empty: a passive object.
        blocks_off / blocks_on: whether it blocks movement before / after activation.
    """

    name: str
    char: str
    kind: str
    users: tuple[int, ...] = ()
    blocks_off: bool = True
    blocks_on: bool = True


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

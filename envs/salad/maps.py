"""The salad kitchens of gym-macro-overcooked (7x7, two agents) and their static tables.

Codes in the layouts are the original's: 0 floor, 1 counter, 2 agent, 3 tomato,
4 lettuce, 5 plate, 6 knife, 7 delivery, 8 onion. Cells are ``(row, col)``; a cell index is
``row * 7 + col``. Map A is the original's two-agent map A with one plate (the second plate
of the original, at ``(5, 6)``, is a plain counter here). Map B adds a counter wall in
column 3 (rows 1-5): the left agent reaches the knives and the delivery, the right agent
the food and the plate, so every dish crosses the wall.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

SIZE = 7
NUM_CELLS = SIZE * SIZE
UNREACHABLE = 10_000

FLOOR, COUNTER, KNIFE, DELIVERY = 0, 1, 2, 3  # tile kinds once items and agents are lifted
TOMATO, LETTUCE, ONION, PLATE = 0, 1, 2, 3  # movable items
FOOD_NAMES = ("tomato", "lettuce", "onion")
ITEM_NAMES = (*FOOD_NAMES, "plate")
# right, left, down, up: the original A*'s expansion order, used to break path ties
DIRECTIONS = np.array([[0, 1], [0, -1], [1, 0], [-1, 0]], np.int32)

_MAP_A = [
    [1, 1, 1, 1, 1, 3, 1],
    [6, 0, 2, 0, 2, 0, 4],
    [6, 0, 0, 0, 0, 0, 8],
    [7, 0, 0, 0, 0, 0, 1],
    [1, 0, 0, 0, 0, 0, 1],
    [1, 0, 0, 0, 0, 0, 1],
    [1, 1, 1, 1, 1, 5, 1],
]
_MAP_B = [row[:3] + [1 if 1 <= r <= 5 else row[3]] + row[4:] for r, row in enumerate(_MAP_A)]
LAYOUTS = {"A": _MAP_A, "B": _MAP_B}
# the original's order of preference among the wall's counters for "go to counter"
WALL_COUNTER_ROWS = (3, 2, 4, 1, 5)
WALL_COL = 3


@dataclass(frozen=True)
class Kitchen:
    """Static description of one map (numpy; the env turns what it needs into constants)."""

    name: str
    codes: np.ndarray  # [7, 7] the layout's codes
    tiles: np.ndarray  # [49] FLOOR / COUNTER / KNIFE / DELIVERY
    agent_start: np.ndarray  # [2, 2]
    item_start: np.ndarray  # [4] cell of tomato, lettuce, onion, plate
    knives: np.ndarray  # [2] cells
    delivery: int  # cell
    wall_counters: np.ndarray  # [K] cells in preference order (empty on map A)
    # distance[t, b, c]: moves from cell c to a floor cell next to target t, avoiding cell b
    # (b = NUM_CELLS: nothing avoided); UNREACHABLE where there is no such path
    distance: np.ndarray  # [49, 50, 49] int32


def _cell(r: int, c: int) -> int:
    return r * SIZE + c


def _distance_fields(floor: np.ndarray) -> np.ndarray:
    """All (target, avoided cell) BFS fields at once by repeated relaxation."""
    n = NUM_CELLS
    rows, cols = np.divmod(np.arange(n), SIZE)
    neighbours = []
    for dr, dc in DIRECTIONS:
        r, c = rows + dr, cols + dc
        inside = (r >= 0) & (r < SIZE) & (c >= 0) & (c < SIZE)
        neighbours.append(np.where(inside, r.clip(0, SIZE - 1) * SIZE + c.clip(0, SIZE - 1), -1))
    neighbours = np.stack(neighbours, 1)  # [n, 4], -1 off the grid
    adjacent = np.zeros((n, n), bool)  # adjacent[t, c]
    for k in range(4):
        ok = neighbours[:, k] >= 0
        adjacent[np.arange(n)[ok], neighbours[ok, k]] = True
    avoid = np.zeros((n + 1, n), bool)
    avoid[np.arange(n), np.arange(n)] = True
    walkable = floor[None, :] & ~avoid  # [b, c]
    dist = np.full((n, n + 1, n), UNREACHABLE, np.int32)
    dist[adjacent[:, None, :] & walkable[None]] = 0
    for _ in range(n):
        best = dist.copy()
        for k in range(4):
            nb = neighbours[:, k]
            via = np.where(nb >= 0, dist[:, :, nb.clip(0)] + 1, UNREACHABLE)
            best = np.minimum(best, via)
        best = np.where(walkable[None], best, UNREACHABLE)
        best = np.minimum(best, UNREACHABLE)
        if np.array_equal(best, dist):
            break
        dist = best
    return dist


def kitchen(name: str) -> Kitchen:
    if name not in LAYOUTS:
        raise ValueError(f"unknown salad map {name!r}; known maps: {', '.join(sorted(LAYOUTS))}")
    codes = np.array(LAYOUTS[name], np.int32)
    flat = codes.reshape(-1)
    tiles = np.full(NUM_CELLS, COUNTER, np.int32)
    tiles[(flat == 0) | (flat == 2)] = FLOOR
    tiles[flat == 6] = KNIFE
    tiles[flat == 7] = DELIVERY
    agent_start = np.argwhere(codes == 2).astype(np.int32)
    item_start = np.array([int(np.flatnonzero(flat == code)[0]) for code in (3, 4, 8, 5)], np.int32)
    walls = [_cell(r, WALL_COL) for r in WALL_COUNTER_ROWS] if name == "B" else []
    return Kitchen(
        name=name,
        codes=codes,
        tiles=tiles,
        agent_start=agent_start,
        item_start=item_start,
        knives=np.flatnonzero(flat == 6).astype(np.int32),
        delivery=int(np.flatnonzero(flat == 7)[0]),
        wall_counters=np.array(walls, np.int32),
        distance=_distance_fields(tiles == FLOOR),
    )

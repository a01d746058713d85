"""The grid worlds' actions and facing directions.

``0`` stay (the no-op), ``1`` up, ``2`` down, ``3`` left, ``4`` right, ``5`` interact. A
move turns the agent to face that direction and moves it one cell if the cell there is
free (``dynamics``); ``interact`` acts on the faced cell. A facing is an index into
``DIRECTIONS`` (move action - 1), and ``DIR_XY`` its ``(dx, dy)`` step.
"""

from __future__ import annotations

import numpy as np

STAY, UP, DOWN, LEFT, RIGHT, INTERACT = range(6)
NUM_ACTIONS = 6
ACTION_NAMES = ("stay", "up", "down", "left", "right", "interact")
DIRECTIONS = ("up", "down", "left", "right")  # facing index = move action - 1
DIR_XY = np.array([[0, -1], [0, 1], [-1, 0], [1, 0]], np.int32)

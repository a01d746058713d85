"""``GridState``: the state of a grid world (agents, object flags, step)."""

from __future__ import annotations

import jax
from flax import struct


@struct.dataclass
class GridState:
    pos: jax.Array  # [N] int32 flat cell y * width + x
    facing: jax.Array  # [N] int32: 0 up, 1 down, 2 left, 3 right
    flags: jax.Array  # [K + 1] bool: object flags, then "task completed"
    step: jax.Array  # [] int32 steps taken in this episode

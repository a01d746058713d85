"""Pictures of grid-world states: walls, objects by kind and state, agents as triangles.

The static parts (background, object and agent masks) are numpy arrays built once at
construction; ``render`` composes them with the state in pure JAX, so it vmaps.
"""

from __future__ import annotations

from functools import partial

import jax
import jax.numpy as jnp
import numpy as np

from envs.gridworld.actions import DIRECTIONS
from envs.gridworld.state import GridState

# Colours (RGB); agent 0 green and agent 1 orange as in the paper's Fig. 2.
WALL_RGB = (110, 110, 110)
FLOOR_RGB = (0, 0, 0)
AGENT_RGB = ((40, 200, 40), (255, 140, 0), (60, 140, 255), (220, 60, 220))


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


class GridRendering:
    """``render`` for ``GridWorld``: reads its grid (``cell_px``, ``height``, ``width``,
    ``wall``, ``_border``, ``arrival_cell``, ``arrival_kind``) and objects (``objects``,
    ``obj_cell``, ``num_objects``); ``_build_render`` runs once at construction."""

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

"""xT grid files: the packaged football grid and user-provided ones.

A grid file is JSON (an object whose ``"grid"`` holds the nested list, or the nested list
itself) or ``.npy``. Its array is ``[15, 21]`` = ``[y, x]`` (rows across the pitch, row 0
at y = -0.42, GRF's "top"; columns along it, column 0 at the own goal line x = -1, column
20 at the opponent's) or its transpose ``[21, 15]`` = ``[x, y]``; the two differ in shape,
so either is read without a flag. Values are xT in the left team's attacking frame.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import numpy as np

from jaxmarl_llm.errors import ConfigError
from jaxmarl_llm.methods.xt.grid import NX, NY

DEFAULT_GRID = Path(__file__).resolve().parent / "football_xt_21x15.json"
KEY = "shaping.kwargs.grid"


def load_grid(path: str | Path | None = None) -> np.ndarray:
    """The ``[NY, NX]`` float32 grid of ``path`` (default: the packaged football grid).

    Raises ``ConfigError`` naming ``shaping.kwargs.grid`` and the problem for a missing
    or unreadable file, a wrong shape or non-finite values."""
    path = Path(path) if path is not None else DEFAULT_GRID
    if not path.is_file():
        raise ConfigError(f"{KEY}: no xT grid file at {str(path)!r}")
    try:
        if path.suffix == ".npy":
            raw = np.load(path, allow_pickle=False)
        else:
            data = json.loads(path.read_text())
            raw = data["grid"] if isinstance(data, dict) else data
        grid = np.asarray(raw, np.float32)
    except (ValueError, KeyError, TypeError, OSError) as e:
        raise ConfigError(
            f"{KEY}: cannot read an xT grid from {str(path)!r} ({type(e).__name__}: {e}); "
            "expected .npy or JSON with a 'grid' list of lists"
        ) from e
    if grid.shape == (NX, NY):
        grid = grid.T
    if grid.shape != (NY, NX):
        raise ConfigError(
            f"{KEY}: the grid in {str(path)!r} has shape {list(grid.shape)}; expected "
            f"[{NY}, {NX}] ([y, x]) or [{NX}, {NY}] ([x, y])"
        )
    if not np.isfinite(grid).all():
        raise ConfigError(f"{KEY}: the grid in {str(path)!r} has non-finite values")
    return grid


def save_grid(path: str | Path, grid: np.ndarray, record: dict[str, Any]) -> None:
    """Write ``grid`` [NY, NX] and how it was made (``record``) as JSON."""
    grid = np.asarray(grid, np.float32)
    if grid.shape != (NY, NX):
        raise ValueError(f"grid shape {grid.shape} != {(NY, NX)}")
    doc = {
        "layout": (
            f"grid[{NY}][{NX}] = [y][x]: row 0 at y = -0.42 (GRF top), column 0 at the "
            "own goal line x = -1, column 20 at the opponent's x = +1; left team attacking"
        ),
        "grid": [[round(float(v), 6) for v in row] for row in grid],
        **record,
    }
    Path(path).write_text(json.dumps(doc, indent=1) + "\n")

"""Expected Threat (xT): Karun Singh's Markov model of ball progression on a zone grid.

The pitch is cut into ``NY x NX`` zones (15 across, 21 along the attacking direction, as
the V-GEPF paper's appendix C.3). From counts of what the team on the ball did in each
zone (moves: passes and carries, with where the successful ones ended; shots; goals) the
paper's eq. 24 defines

    xT_z = s_z * g_z + m_z * sum_z' T_{z -> z'} xT_z'

with ``s_z`` the share of shots and ``m_z`` the share of moves among the zone's actions,
``g_z`` the goals per shot and ``T_{z -> z'}`` the successful moves to ``z'`` per move
from ``z`` (a row sums to the move success rate, so a lost ball ends the chain). Starting
from xT = 0, iteration ``n`` is the probability of scoring within ``n`` actions.

Grids are ``[NY, NX]`` = ``[y, x]`` arrays in attacking coordinates: column 0 at the own
goal line x = -1, column ``NX - 1`` at the opponent's x = +1; row 0 at y = -PITCH_Y (GRF's
"top"). Flat zone indices are row-major: ``iy * NX + ix``.
"""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
from flax import struct

NX, NY = 21, 15  # zones along x (attacking direction), across y
PITCH_X, PITCH_Y = 1.0, 0.42  # envs.football's half-length and half-width
TOLERANCE, MAX_ITERATIONS = 1e-5, 1000


@struct.dataclass
class XTCounts:
    """Event counts per flat zone ``Z = NY * NX`` (float, summable across batches)."""

    moves: jax.Array  # [Z] passes and carries started in the zone, failed ones included
    success: jax.Array  # [Z, Z] successful moves from zone to zone
    shots: jax.Array  # [Z]
    goals: jax.Array  # [Z] goals from shots taken in the zone

    @classmethod
    def zeros(cls, nx: int = NX, ny: int = NY) -> XTCounts:
        z = nx * ny
        f = jnp.zeros((z,), jnp.float32)
        return cls(moves=f, success=jnp.zeros((z, z), jnp.float32), shots=f, goals=f)

    def __add__(self, other: XTCounts) -> XTCounts:
        return jax.tree.map(jnp.add, self, other)


def zone_index(xy: jax.Array, nx: int = NX, ny: int = NY) -> jax.Array:
    """Flat zone ``[...]`` int32 of positions ``xy [..., 2]``; off-pitch points go to the
    nearest edge zone (the ball may be up to 0.05 outside the lines)."""
    fx = (xy[..., 0] + PITCH_X) / (2 * PITCH_X)
    fy = (xy[..., 1] + PITCH_Y) / (2 * PITCH_Y)
    ix = jnp.clip(jnp.floor(fx * nx), 0, nx - 1).astype(jnp.int32)
    iy = jnp.clip(jnp.floor(fy * ny), 0, ny - 1).astype(jnp.int32)
    return iy * nx + ix


def zone_centres(nx: int = NX, ny: int = NY) -> np.ndarray:
    """``[ny, nx, 2]`` centre of every zone (for plots and tests)."""
    x = -PITCH_X + (np.arange(nx) + 0.5) * 2 * PITCH_X / nx
    y = -PITCH_Y + (np.arange(ny) + 0.5) * 2 * PITCH_Y / ny
    return np.stack(np.meshgrid(x, y), -1).astype(np.float32)


def _ratio(num: jax.Array, den: jax.Array) -> jax.Array:
    # zones without a single action have no estimate: 0 (no threat from there)
    return jnp.where(den > 0, num / jnp.where(den > 0, den, 1.0), 0.0)


def action_model(counts: XTCounts) -> tuple[jax.Array, jax.Array, jax.Array, jax.Array]:
    """``(s, m, g, T)`` of eq. 24 from counts: shot and move shares ``[Z]``, goals per
    shot ``[Z]``, move transition matrix ``[Z, Z]``."""
    actions = counts.shots + counts.moves
    s = _ratio(counts.shots, actions)
    m = _ratio(counts.moves, actions)
    g = _ratio(counts.goals, counts.shots)
    t = _ratio(counts.success, counts.moves[:, None])
    return s, m, g, t


def solve_xt(
    s: jax.Array,
    m: jax.Array,
    g: jax.Array,
    t: jax.Array,
    tol: float = TOLERANCE,
    max_iterations: int = MAX_ITERATIONS,
) -> tuple[jax.Array, jax.Array]:
    """Iterate eq. 24 from xT = 0 until no zone changes by more than ``tol`` (or
    ``max_iterations``). Returns ``(xT [Z], iterations [] int32)``; jit-able."""
    shoot = s * g

    def cond(carry):
        _, delta, i = carry
        return (delta > tol) & (i < max_iterations)

    def body(carry):
        xt, _, i = carry
        new = shoot + m * (t @ xt)
        return new, jnp.abs(new - xt).max(), i + 1

    init = (jnp.zeros_like(shoot), jnp.asarray(jnp.inf, shoot.dtype), jnp.int32(0))
    xt, _, iterations = jax.lax.while_loop(cond, body, init)
    return xt, iterations


def expected_threat(
    counts: XTCounts,
    nx: int = NX,
    ny: int = NY,
    tol: float = TOLERANCE,
    max_iterations: int = MAX_ITERATIONS,
) -> tuple[jax.Array, jax.Array]:
    """xT grid ``[ny, nx]`` of ``counts`` and the number of iterations it took."""
    xt, iterations = solve_xt(*action_model(counts), tol=tol, max_iterations=max_iterations)
    return xt.reshape(ny, nx), iterations

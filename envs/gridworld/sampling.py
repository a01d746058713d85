"""Cheap random draws for the grid worlds' start and random states.

``ArrayEnv`` computes a reset at every step, so ``reset`` draws its few uniforms by
hashing the key (``uniforms``) rather than through ``jax.random``; ``pick_two`` places
the two agents on distinct cells from those uniforms.
"""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np


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

"""Orthogonal initialisation that is safe to vmap over seeds on CPU.

``jax.nn.initializers.orthogonal`` under ``vmap`` lowers to *batched* LAPACK QR
calls. On XLA:CPU, a program holding several of them (a network's layers,
initialised for N seeds at once) intermittently deadlocks with every thread idle
(jax 0.10, 2 cores). Unbatched QR calls do not, so this initialiser keeps the
exact values of the library one but turns a batch of QRs into a sequential
``lax.map`` of unbatched ones. Init runs once per run, so the loop costs nothing.
"""

from __future__ import annotations

import math

import jax
import jax.numpy as jnp
from jax.custom_batching import custom_vmap


@custom_vmap
def _signed_q(a: jax.Array) -> jax.Array:
    """Q of ``a = QR`` with columns flipped so that diag(R) >= 0 (a uniform draw)."""
    q, r = jnp.linalg.qr(a)
    return q * jnp.sign(jnp.diag(r))[None, :]


@_signed_q.def_vmap
def _signed_q_batched(axis_size, in_batched, a):
    del axis_size, in_batched
    return jax.lax.map(_signed_q, a), True


def orthogonal(scale: float = 1.0):
    """Drop-in for ``flax.linen.initializers.orthogonal(scale)`` (column axis -1)."""

    def init(key, shape, dtype=jnp.float32):
        if len(shape) < 2:
            raise ValueError(f"orthogonal init needs at least 2 dimensions, got shape {shape}")
        n_cols = shape[-1]
        n_rows = math.prod(shape) // n_cols
        transposed = n_rows < n_cols
        a = jax.random.normal(key, (n_cols, n_rows) if transposed else (n_rows, n_cols), dtype)
        q = _signed_q(a)
        if transposed:
            q = q.T
        return (scale * q.reshape(shape)).astype(dtype)

    return init

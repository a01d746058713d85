"""The decoder's KV cache, position-based masking and grouped-query attention over the
cache.

Masking works from *positions*, not slot order: every cache slot remembers the position
of the token written there (``INVALID_POS`` for padding or unwritten slots) and a query
at position ``p`` sees slot ``s`` iff ``pos[s] <= p``. Rows of a batch may therefore be
left- or right-padded, and each row's positions start at 0 at its first real token.
"""

from __future__ import annotations

from typing import Any

import jax
import jax.numpy as jnp

INVALID_POS = 1 << 30  # position of a slot nobody may attend to

Cache = dict[str, jax.Array]  # k, v: [L, B, S, Hkv, Dh]; pos: [B, S] int32; index: [] int32


def init_cache(cfg: Any, batch: int, length: int, dtype=jnp.float32) -> Cache:
    """An empty cache of ``length`` slots per row for a config with ``n_layers``,
    ``n_kv_heads`` and ``head_dim``."""
    shape = (cfg.n_layers, batch, length, cfg.n_kv_heads, cfg.head_dim)
    return {
        "k": jnp.zeros(shape, dtype),
        "v": jnp.zeros(shape, dtype),
        "pos": jnp.full((batch, length), INVALID_POS, jnp.int32),
        "index": jnp.zeros((), jnp.int32),
    }


def slot_positions(cache: Cache, positions: jax.Array, valid: jax.Array):
    """The cache's slot positions once the new tokens are written, the causal mask
    ``[B, T, S]`` of the new tokens over them, and how many positions back each slot is
    from each new token (``[B, T, S]``, for windowed masks)."""
    new_pos = jnp.where(valid, positions, INVALID_POS).astype(jnp.int32)
    slot_pos = jax.lax.dynamic_update_slice(cache["pos"], new_pos, (0, cache["index"]))
    qp = positions[:, :, None]
    kp = slot_pos[:, None, :]
    return slot_pos, (kp <= qp) & (kp != INVALID_POS), qp - kp


def cached_attention(q, k, v, k_cache, v_cache, index, mask):
    """Writes one layer's new keys and values ``[B, T, Hkv, Dh]`` into its cache at slot
    ``index`` and attends the queries ``[B, T, H, Dh]`` (already scaled and rotated) to
    every slot ``mask`` ``[B, T, S]`` allows, heads grouped over the key/value heads:
    ``(out [B, T, H * Dh], k_cache, v_cache)``."""
    b, t, h, dh = q.shape
    kv = k.shape[2]
    k_cache = jax.lax.dynamic_update_slice(k_cache, k.astype(k_cache.dtype), (0, index, 0, 0))
    v_cache = jax.lax.dynamic_update_slice(v_cache, v.astype(v_cache.dtype), (0, index, 0, 0))
    qg = q.reshape(b, t, kv, h // kv, dh)
    scores = jnp.einsum("btkgd,bskd->bkgts", qg, k_cache.astype(q.dtype))
    scores = scores.astype(jnp.float32)
    scores = jnp.where(mask[:, None, None, :, :], scores, jnp.finfo(jnp.float32).min)
    probs = jax.nn.softmax(scores, axis=-1).astype(q.dtype)
    out = jnp.einsum("bkgts,bskd->btkgd", probs, v_cache.astype(q.dtype))
    return out.reshape(b, t, h * dh), k_cache, v_cache

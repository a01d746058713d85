"""jax.random's threefry written out in jnp ops, for env resets on CPU.

On CPU jax lowers every threefry2x32 call to a rolled 5-iteration while loop that XLA
cannot fuse with anything around it; at a few words per env that fixed cost made the
reset (which ArrayEnv computes at every step) as expensive as the whole step, or far
more. The same function unrolled in jnp ops fuses into one elementwise loop and gives
the same bits.
"""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np

ROTATIONS = ((13, 15, 26, 6), (17, 29, 16, 24))


def rotl(x: jax.Array, r: int) -> jax.Array:
    return (x << np.uint32(r)) | (x >> np.uint32(32 - r))


def threefry2x32(k1, k2, x1, x2):
    """Threefry-2x32 with 20 rounds, exactly as ``jax._src.random.threefry2x32``."""
    ks = (k1, k2, k1 ^ k2 ^ np.uint32(0x1BD11BDA))
    x1 = x1 + ks[0]
    x2 = x2 + ks[1]
    for i in range(5):
        for r in ROTATIONS[i % 2]:
            x1 = x1 + x2
            x2 = x1 ^ rotl(x2, r)
        x1 = x1 + ks[(i + 1) % 3]
        x2 = x2 + ks[(i + 2) % 3] + np.uint32(i + 1)
    return x1, x2


def raw_threefry_key(key: jax.Array) -> jax.Array | None:
    """``uint32[2]`` data of a single threefry key when jax draws bits the partitionable
    way (its default) and uniforms are float32; None where the written-out path does not
    apply (the caller then uses ``jax.random`` itself)."""
    if not jax.config.jax_threefry_partitionable or jax.config.jax_enable_x64:
        return None
    if jnp.issubdtype(key.dtype, jax.dtypes.prng_key):
        if key.shape != () or str(jax.random.key_impl(key)) != "threefry2x32":
            return None
        return jax.random.key_data(key)
    if (
        key.dtype != jnp.uint32
        or key.shape != (2,)
        or jax.config.jax_default_prng_impl != "threefry2x32"
    ):
        return None
    return key


def uniform_from_bits(bits: jax.Array, minval: float, maxval: float) -> jax.Array:
    """float32 uniforms from 32 random bits, exactly as ``jax.random.uniform``."""
    float_bits = (bits >> np.uint32(32 - 23)) | np.uint32(0x3F800000)
    floats = jax.lax.bitcast_convert_type(float_bits, jnp.float32) - np.float32(1.0)
    lo, hi = np.float32(minval), np.float32(maxval)
    return jnp.maximum(lo, floats * (hi - lo) + lo)


def uniform(key: jax.Array, n: int) -> jax.Array:
    """``jax.random.uniform(key, (n,))``, bit-identical, as one fused evaluation."""
    raw = raw_threefry_key(key)
    if raw is None:
        return jax.random.uniform(key, (n,))
    counts = np.arange(n, dtype=np.uint32)
    b1, b2 = threefry2x32(raw[0], raw[1], np.zeros_like(counts), counts)
    return uniform_from_bits(b1 ^ b2, 0.0, 1.0)

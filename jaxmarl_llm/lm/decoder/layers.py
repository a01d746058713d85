"""One decoder layer, configured by a :class:`~jaxmarl_llm.lm.decoder.config.DecoderConfig`:
RMSNorm, rotate-half RoPE, grouped-query attention over the KV cache and the gated MLP.

Per layer: ``h = x + [post_attn_norm](attn(pre_attn_norm(x)))`` then
``h + [post_ffw_norm](mlp(pre_ffw_norm(h)))`` (bracketed norms with ``post_norms``); the
MLP is ``down(act(gate(x)) * up(x))``.
"""

from __future__ import annotations

import functools

import flax.linen as nn
import jax
import jax.numpy as jnp

from .cache import cached_attention
from .config import DecoderConfig

ACTIVATIONS = {"gelu_tanh": functools.partial(jax.nn.gelu, approximate=True), "silu": jax.nn.silu}


class RMSNorm(nn.Module):
    """``x / rms(x) * scale`` in float32 (Gemma's checkpoints store ``1 + w`` as the
    scale, llama's ``w``)."""

    eps: float

    @nn.compact
    def __call__(self, x):
        scale = self.param("scale", nn.initializers.ones, (x.shape[-1],))
        x32 = x.astype(jnp.float32)
        y = x32 * jax.lax.rsqrt(jnp.mean(x32 * x32, axis=-1, keepdims=True) + self.eps)
        return (y * scale).astype(x.dtype)


def rope_tables(positions: jax.Array, head_dim: int, base: float, scale: float = 1.0):
    """cos/sin ``[B, T, head_dim]`` for rotate-half RoPE."""
    inv_freq = 1.0 / (base ** (jnp.arange(0, head_dim, 2, dtype=jnp.float32) / head_dim))
    ang = (positions.astype(jnp.float32) / scale)[..., None] * inv_freq
    ang = jnp.concatenate([ang, ang], axis=-1)
    return jnp.cos(ang), jnp.sin(ang)


def apply_rope(x, cos, sin):
    """x: ``[B, T, H, D]``; cos/sin: ``[B, T, D]``."""
    half = x.shape[-1] // 2
    rot = jnp.concatenate([-x[..., half:], x[..., :half]], axis=-1)
    return x * cos[:, :, None, :] + rot * sin[:, :, None, :]


class Attention(nn.Module):
    cfg: DecoderConfig

    @nn.compact
    def __call__(self, x, rope, mask, k_cache, v_cache, index):
        cfg = self.cfg
        b, t, _ = x.shape
        h, kv, dh = cfg.n_heads, cfg.n_kv_heads, cfg.head_dim
        bias = cfg.qkv_bias
        q = nn.Dense(h * dh, use_bias=bias, name="q")(x).reshape(b, t, h, dh)
        k = nn.Dense(kv * dh, use_bias=bias, name="k")(x).reshape(b, t, kv, dh)
        v = nn.Dense(kv * dh, use_bias=bias, name="v")(x).reshape(b, t, kv, dh)
        if cfg.qk_norm:
            q = RMSNorm(cfg.rms_eps, name="q_norm")(q)
            k = RMSNorm(cfg.rms_eps, name="k_norm")(k)
        cos, sin = rope
        q = apply_rope(q, cos, sin) * cfg.query_scale
        k = apply_rope(k, cos, sin)
        out, k_cache, v_cache = cached_attention(q, k, v, k_cache, v_cache, index, mask)
        return nn.Dense(cfg.d_model, use_bias=False, name="o")(out), k_cache, v_cache


class MLP(nn.Module):
    cfg: DecoderConfig

    @nn.compact
    def __call__(self, x):
        gate = nn.Dense(self.cfg.ffn_dim, use_bias=False, name="gate")(x)
        up = nn.Dense(self.cfg.ffn_dim, use_bias=False, name="up")(x)
        act = ACTIVATIONS[self.cfg.activation]
        return nn.Dense(self.cfg.d_model, use_bias=False, name="down")(act(gate) * up)


class Block(nn.Module):
    """One decoder layer; scanned over layers (carry: hidden state and shared context).

    ``rope`` and ``mask`` are the layer's, or with a sliding window ``(local, global)``
    pairs that ``windowed`` (this layer's entry of ``sliding_window_layers``) picks from.
    """

    cfg: DecoderConfig

    @nn.compact
    def __call__(self, carry, layer_in):
        x, rope, mask, index = carry
        windowed, k_cache, v_cache = layer_in
        layer_rope, layer_mask = rope, mask
        if windowed is not None:
            (cos_l, sin_l), (cos_g, sin_g) = rope
            layer_rope = (jnp.where(windowed, cos_l, cos_g), jnp.where(windowed, sin_l, sin_g))
            layer_mask = jnp.where(windowed, *mask)  # [B, T, S]
        eps = self.cfg.rms_eps
        a, k_cache, v_cache = Attention(self.cfg, name="attn")(
            RMSNorm(eps, name="pre_attn_norm")(x), layer_rope, layer_mask, k_cache, v_cache, index
        )
        if self.cfg.post_norms:
            a = RMSNorm(eps, name="post_attn_norm")(a)
        x = x + a
        f = MLP(self.cfg, name="mlp")(RMSNorm(eps, name="pre_ffw_norm")(x))
        if self.cfg.post_norms:
            f = RMSNorm(eps, name="post_ffw_norm")(f)
        x = x + f
        return (x, rope, mask, index), (k_cache, v_cache)

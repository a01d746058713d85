"""Gemma 3 text model in Flax (linen), with a KV cache and position-based masking.

Architecture (Gemma 3, as in the reference PyTorch implementation):

- token embeddings scaled by ``sqrt(d_model)``; the output head is the same matrix (tied);
- per layer: ``x + post_attn_norm(attn(pre_attn_norm(x)))`` then
  ``h + post_ffw_norm(mlp(pre_ffw_norm(h)))``, RMSNorms with scale ``1 + w`` (stored
  pre-added, see :mod:`.weights`);
- grouped-query attention with RMSNorm on queries and keys, queries scaled by
  ``query_pre_attn_scalar ** -0.5``, rotate-half RoPE with base 10k on local
  (sliding-window) layers and 1M on global layers, every ``sliding_window_pattern``-th
  layer global;
- GeGLU MLP: ``down(gelu_tanh(gate(x)) * up(x))``.

Layers are stacked and run with ``nn.scan`` (one compiled layer body, fast compiles).

Masking, RoPE and the KV cache are every family's (:mod:`jaxmarl_llm.lm.decoder`); local
layers also mask slots ``window`` or more positions back.
"""

from __future__ import annotations

from typing import Any

import flax.linen as nn
import jax
import jax.numpy as jnp

from ..decoder import (
    Cache,
    RMSNorm,
    apply_rope,
    cached_attention,
    init_cache,
    rope_tables,
    slot_positions,
)
from .weights import GemmaConfig

__all__ = ["Gemma3", "init_cache"]


class Attention(nn.Module):
    cfg: GemmaConfig

    @nn.compact
    def __call__(self, x, rope, mask, is_global, k_cache, v_cache, index):
        cfg = self.cfg
        b, t, _ = x.shape
        h, kv, dh = cfg.n_heads, cfg.n_kv_heads, cfg.head_dim
        q = nn.Dense(h * dh, use_bias=False, name="q")(x).reshape(b, t, h, dh)
        k = nn.Dense(kv * dh, use_bias=False, name="k")(x).reshape(b, t, kv, dh)
        v = nn.Dense(kv * dh, use_bias=False, name="v")(x).reshape(b, t, kv, dh)
        q = RMSNorm(cfg.rms_eps, name="q_norm")(q)
        k = RMSNorm(cfg.rms_eps, name="k_norm")(k)
        (cos_l, sin_l), (cos_g, sin_g) = rope
        cos = jnp.where(is_global, cos_g, cos_l)
        sin = jnp.where(is_global, sin_g, sin_l)
        q = apply_rope(q, cos, sin) * (cfg.query_pre_attn_scalar**-0.5)
        k = apply_rope(k, cos, sin)
        mask_local, mask_global = mask
        m = jnp.where(is_global, mask_global, mask_local)  # [B, T, S]
        out, k_cache, v_cache = cached_attention(q, k, v, k_cache, v_cache, index, m)
        return nn.Dense(cfg.d_model, use_bias=False, name="o")(out), k_cache, v_cache


class MLP(nn.Module):
    cfg: GemmaConfig

    @nn.compact
    def __call__(self, x):
        gate = nn.Dense(self.cfg.ffn_dim, use_bias=False, name="gate")(x)
        up = nn.Dense(self.cfg.ffn_dim, use_bias=False, name="up")(x)
        return nn.Dense(self.cfg.d_model, use_bias=False, name="down")(
            jax.nn.gelu(gate, approximate=True) * up
        )


class Block(nn.Module):
    """One decoder layer; scanned over layers (carry: hidden state and shared context)."""

    cfg: GemmaConfig

    @nn.compact
    def __call__(self, carry, layer_in):
        x, rope, mask, index = carry
        is_global, k_cache, v_cache = layer_in
        eps = self.cfg.rms_eps
        a, k_cache, v_cache = Attention(self.cfg, name="attn")(
            RMSNorm(eps, name="pre_attn_norm")(x), rope, mask, is_global, k_cache, v_cache, index
        )
        x = x + RMSNorm(eps, name="post_attn_norm")(a)
        f = MLP(self.cfg, name="mlp")(RMSNorm(eps, name="pre_ffw_norm")(x))
        x = x + RMSNorm(eps, name="post_ffw_norm")(f)
        return (x, rope, mask, index), (k_cache, v_cache)


class Gemma3(nn.Module):
    """Gemma 3 decoder. ``__call__`` runs new tokens against (and into) a KV cache.

    Args:
      tokens: ``[B, T]`` int32 new tokens.
      positions: ``[B, T]`` int32 positions of the new tokens (0 at each row's first token).
      valid: ``[B, T]`` bool, False for padding (never attended to).
      cache: from :func:`init_cache`; the new tokens are written at ``cache["index"]``.
      return_hidden: return the final-norm hidden states instead of logits.

    Returns ``(logits [B, T, V] float32 or hidden [B, T, D], new_cache)``.
    """

    cfg: GemmaConfig
    dtype: Any = jnp.float32

    def setup(self):
        self.embed = nn.Embed(self.cfg.vocab_size, self.cfg.d_model, name="embed")
        self.layers = nn.scan(
            Block,
            variable_axes={"params": 0},
            split_rngs={"params": True},
            in_axes=0,
            out_axes=0,
            length=self.cfg.n_layers,
        )(self.cfg, name="layers")
        self.final_norm = RMSNorm(self.cfg.rms_eps, name="final_norm")

    def __call__(self, tokens, positions, valid, cache: Cache, return_hidden: bool = False):
        cfg = self.cfg
        index = cache["index"]
        x = self.embed(tokens).astype(self.dtype) * jnp.asarray(cfg.d_model**0.5, self.dtype)
        slot_pos, causal, back = slot_positions(cache, positions, valid)
        mask = (causal & (back < cfg.sliding_window), causal)
        rope = (
            rope_tables(positions, cfg.head_dim, cfg.rope_local_base),
            rope_tables(positions, cfg.head_dim, cfg.rope_global_base, cfg.rope_global_scale),
        )
        is_global = jnp.asarray(cfg.global_layers)
        (x, *_), (k, v) = self.layers((x, rope, mask, index), (is_global, cache["k"], cache["v"]))
        x = self.final_norm(x)
        new_cache = {"k": k, "v": v, "pos": slot_pos, "index": index + tokens.shape[1]}
        if return_hidden:
            return x, new_cache
        return self.logits(x), new_cache

    def logits(self, hidden):
        out = self.embed.attend(hidden.astype(self.dtype)).astype(jnp.float32)
        if self.cfg.final_logit_softcap:
            c = self.cfg.final_logit_softcap
            out = jnp.tanh(out / c) * c
        return out

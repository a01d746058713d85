"""Llama-family decoder (Llama, SmolLM2, Qwen2) in Flax (linen), with a KV cache and
position-based masking; same calling convention and parameter tree as
:class:`jaxmarl_llm.lm.gemma.model.Gemma3`, so code written for one runs the other
(``params["layers"]["attn"]["q"]["kernel"]`` is ``[L, d_model, heads * head_dim]`` in both).

Architecture (as transformers' ``LlamaForCausalLM`` / ``Qwen2ForCausalLM``):

- per layer: ``h = x + attn(pre_attn_norm(x))`` then ``h + mlp(pre_ffw_norm(h))``, RMSNorms
  computing ``x * w``;
- grouped-query attention, optional q/k/v biases (Qwen2), queries scaled by
  ``head_dim ** -0.5``, rotate-half RoPE (llama.cpp's q/k permutation is undone when the
  weights are loaded, see :mod:`.weights`), no sliding window;
- SwiGLU MLP: ``down(silu(gate(x)) * up(x))``;
- output head tied to the embedding or a separate ``lm_head``.

Masking, RoPE and the KV cache are every family's (:mod:`jaxmarl_llm.lm.decoder`).
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
from .weights import LlamaConfig

__all__ = ["Llama", "init_cache"]


class Attention(nn.Module):
    cfg: LlamaConfig

    @nn.compact
    def __call__(self, x, rope, mask, k_cache, v_cache, index):
        cfg = self.cfg
        b, t, _ = x.shape
        h, kv, dh = cfg.n_heads, cfg.n_kv_heads, cfg.head_dim
        bias = cfg.qkv_bias
        q = nn.Dense(h * dh, use_bias=bias, name="q")(x).reshape(b, t, h, dh)
        k = nn.Dense(kv * dh, use_bias=bias, name="k")(x).reshape(b, t, kv, dh)
        v = nn.Dense(kv * dh, use_bias=bias, name="v")(x).reshape(b, t, kv, dh)
        cos, sin = rope
        q = apply_rope(q, cos, sin) * (dh**-0.5)
        k = apply_rope(k, cos, sin)
        out, k_cache, v_cache = cached_attention(q, k, v, k_cache, v_cache, index, mask)
        return nn.Dense(cfg.d_model, use_bias=False, name="o")(out), k_cache, v_cache


class MLP(nn.Module):
    cfg: LlamaConfig

    @nn.compact
    def __call__(self, x):
        gate = nn.Dense(self.cfg.ffn_dim, use_bias=False, name="gate")(x)
        up = nn.Dense(self.cfg.ffn_dim, use_bias=False, name="up")(x)
        return nn.Dense(self.cfg.d_model, use_bias=False, name="down")(jax.nn.silu(gate) * up)


class Block(nn.Module):
    """One decoder layer; scanned over layers (carry: hidden state and shared context)."""

    cfg: LlamaConfig

    @nn.compact
    def __call__(self, carry, layer_in):
        x, rope, mask, index = carry
        k_cache, v_cache = layer_in
        eps = self.cfg.rms_eps
        a, k_cache, v_cache = Attention(self.cfg, name="attn")(
            RMSNorm(eps, name="pre_attn_norm")(x), rope, mask, k_cache, v_cache, index
        )
        x = x + a
        x = x + MLP(self.cfg, name="mlp")(RMSNorm(eps, name="pre_ffw_norm")(x))
        return (x, rope, mask, index), (k_cache, v_cache)


class Llama(nn.Module):
    """Llama-family decoder. ``__call__`` runs new tokens against (and into) a KV cache.

    Args:
      tokens: ``[B, T]`` int32 new tokens.
      positions: ``[B, T]`` int32 positions of the new tokens (0 at each row's first token).
      valid: ``[B, T]`` bool, False for padding (never attended to).
      cache: from :func:`init_cache`; the new tokens are written at ``cache["index"]``.
      return_hidden: return the final-norm hidden states instead of logits.

    Returns ``(logits [B, T, V] float32 or hidden [B, T, D], new_cache)``.
    """

    cfg: LlamaConfig
    dtype: Any = jnp.float32

    def setup(self):
        cfg = self.cfg
        self.embed = nn.Embed(cfg.vocab_size, cfg.d_model, name="embed")
        self.layers = nn.scan(
            Block,
            variable_axes={"params": 0},
            split_rngs={"params": True},
            in_axes=0,
            out_axes=0,
            length=cfg.n_layers,
        )(cfg, name="layers")
        self.final_norm = RMSNorm(cfg.rms_eps, name="final_norm")
        if not cfg.tie_embeddings:
            self.lm_head = nn.Dense(cfg.vocab_size, use_bias=False, name="lm_head")

    def __call__(self, tokens, positions, valid, cache: Cache, return_hidden: bool = False):
        cfg = self.cfg
        index = cache["index"]
        x = self.embed(tokens).astype(self.dtype)
        slot_pos, mask, _ = slot_positions(cache, positions, valid)
        rope = rope_tables(positions, cfg.head_dim, cfg.rope_base, cfg.rope_scale)
        (x, *_), (k, v) = self.layers((x, rope, mask, index), (cache["k"], cache["v"]))
        x = self.final_norm(x)
        new_cache = {"k": k, "v": v, "pos": slot_pos, "index": index + tokens.shape[1]}
        if return_hidden:
            return x, new_cache
        return self.logits(x), new_cache

    def logits(self, hidden):
        hidden = hidden.astype(self.dtype)
        if self.cfg.tie_embeddings:
            return self.embed.attend(hidden).astype(jnp.float32)
        return self.lm_head(hidden).astype(jnp.float32)

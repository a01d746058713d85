"""The decoder every GGUF family runs on, in Flax (linen), with a KV cache and
position-based masking.

Token embeddings (optionally scaled by ``sqrt(d_model)``), ``n_layers`` layers
(:class:`.layers.Block`) stacked and run with ``nn.scan`` (one compiled layer body, fast
compiles), a final RMSNorm and the output head (the embedding, or ``lm_head``). Layers in
``sliding_window_layers`` use the local RoPE base and mask slots ``sliding_window`` or
more positions back.

Every family's parameters have one tree: ``params["layers"]["attn"]["q"]["kernel"]`` is
``[L, d_model, heads * head_dim]``, so a LoRA adapter for one family fits another's.
"""

from __future__ import annotations

from typing import Any

import flax.linen as nn
import jax.numpy as jnp

from .cache import Cache, slot_positions
from .config import DecoderConfig
from .layers import Block, RMSNorm, rope_tables


class Decoder(nn.Module):
    """A decoder. ``__call__`` runs new tokens against (and into) a KV cache.

    Args:
      tokens: ``[B, T]`` int32 new tokens.
      positions: ``[B, T]`` int32 positions of the new tokens (0 at each row's first token).
      valid: ``[B, T]`` bool, False for padding (never attended to).
      cache: from :func:`~jaxmarl_llm.lm.decoder.init_cache`; the new tokens are written
        at ``cache["index"]``.
      return_hidden: return the final-norm hidden states instead of logits.

    Returns ``(logits [B, T, V] float32 or hidden [B, T, D], new_cache)``.
    """

    cfg: DecoderConfig
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
        if cfg.embed_scale:
            x = x * jnp.asarray(cfg.d_model**0.5, self.dtype)
        slot_pos, causal, back = slot_positions(cache, positions, valid)
        if cfg.sliding_window is None:
            rope = rope_tables(positions, cfg.head_dim, cfg.rope_base, cfg.rope_scale)
            mask, windowed = causal, None
        else:  # (local, global) pairs, picked per layer
            mask = (causal & (back < cfg.sliding_window), causal)
            rope = (
                rope_tables(positions, cfg.head_dim, cfg.local_rope_base),
                rope_tables(positions, cfg.head_dim, cfg.rope_base, cfg.rope_scale),
            )
            windowed = jnp.asarray(cfg.sliding_window_layers)
        (x, *_), (k, v) = self.layers((x, rope, mask, index), (windowed, cache["k"], cache["v"]))
        x = self.final_norm(x)
        new_cache = {"k": k, "v": v, "pos": slot_pos, "index": index + tokens.shape[1]}
        if return_hidden:
            return x, new_cache
        return self.logits(x), new_cache

    def logits(self, hidden):
        hidden = hidden.astype(self.dtype)
        if self.cfg.tie_embeddings:
            out = self.embed.attend(hidden).astype(jnp.float32)
        else:
            out = self.lm_head(hidden).astype(jnp.float32)
        if self.cfg.final_logit_softcap:
            c = self.cfg.final_logit_softcap
            out = jnp.tanh(out / c) * c
        return out

"""The decoder every GGUF family runs on, in Flax (linen), with a KV cache and
position-based masking.

Token embeddings (optionally scaled by ``sqrt(d_model)``), ``n_layers`` layers
(:class:`.layers.Block`) stacked and run with ``nn.scan`` (one compiled layer body, fast
compiles), a final RMSNorm and the output head (the embedding, or ``lm_head``). Layers in
``sliding_window_layers`` use the local RoPE base and mask slots ``sliding_window`` or
more positions back.

Every family's parameters have one tree: ``params["layers"]["attn"]["q"]["kernel"]`` is
``[L, d_model, heads * head_dim]``, so a LoRA adapter for one family fits another's.

``Decoder(cfg, layers_run=(start, stop))`` runs only blocks ``start .. stop - 1`` (a
frozen trunk, or the top blocks above it): its parameters are the full tree with the
stacked layers sliced (:func:`slice_layers`), its cache has ``stop - start`` layers
(:func:`layer_range_config`), and it returns the residual stream (no final norm) where
``stop < L``. With ``embeds=False`` it reads the residual stream ``[B, T, D]`` instead of
tokens.
"""

from __future__ import annotations

import dataclasses
from typing import Any

import flax.linen as nn
import jax
import jax.numpy as jnp

from .cache import Cache, slot_positions
from .config import DecoderConfig
from .layers import Block, RMSNorm, rope_tables


def layer_range_config(cfg: DecoderConfig, start: int, stop: int) -> DecoderConfig:
    """``cfg`` for blocks ``start .. stop - 1`` alone: their count and window pattern."""
    if not 0 <= start <= stop <= cfg.n_layers:
        raise ValueError(f"layer range {start}..{stop} is not within 0..{cfg.n_layers}")
    windows = cfg.sliding_window_layers[start:stop] if cfg.sliding_window_layers else ()
    return dataclasses.replace(cfg, n_layers=stop - start, sliding_window_layers=windows)


def slice_layers(params, start: int, stop: int) -> dict:
    """The parameter tree with the stacked blocks cut to ``start .. stop - 1``."""
    layers = jax.tree.map(lambda p: p[start:stop], params["layers"])
    return {**params, "layers": layers}


class Decoder(nn.Module):
    """A decoder. ``__call__`` runs new tokens against (and into) a KV cache.

    Args:
      tokens: ``[B, T]`` int32 new tokens (the residual stream ``[B, T, D]`` where
        ``embeds`` is False).
      positions: ``[B, T]`` int32 positions of the new tokens (0 at each row's first token).
      valid: ``[B, T]`` bool, False for padding (never attended to).
      cache: from :func:`~jaxmarl_llm.lm.decoder.init_cache`; the new tokens are written
        at ``cache["index"]``.
      return_hidden: return the final-norm hidden states instead of logits.

    Returns ``(logits [B, T, V] float32 or hidden [B, T, D], new_cache)``.
    """

    cfg: DecoderConfig
    dtype: Any = jnp.float32
    layers_run: tuple[int, int] | None = None  # (start, stop); None: every block
    embeds: bool = True

    @property
    def layer_range(self) -> tuple[int, int]:
        return self.layers_run or (0, self.cfg.n_layers)

    @property
    def stack_cfg(self) -> DecoderConfig:
        """The config of the blocks this module runs (its cache's layer count)."""
        return layer_range_config(self.cfg, *self.layer_range)

    def setup(self):
        cfg = self.cfg
        self.embed = nn.Embed(cfg.vocab_size, cfg.d_model, name="embed")
        stack = self.stack_cfg
        if stack.n_layers:
            self.layers = nn.scan(
                Block,
                variable_axes={"params": 0},
                split_rngs={"params": True},
                in_axes=0,
                out_axes=0,
                length=stack.n_layers,
            )(stack, name="layers")
        self.final_norm = RMSNorm(cfg.rms_eps, name="final_norm")
        if not cfg.tie_embeddings:
            self.lm_head = nn.Dense(cfg.vocab_size, use_bias=False, name="lm_head")

    def __call__(self, tokens, positions, valid, cache: Cache, return_hidden: bool = False):
        cfg, stop = self.stack_cfg, self.layer_range[1]
        index = cache["index"]
        if not self.embeds:
            x = tokens.astype(self.dtype)
        else:
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
        if cfg.n_layers:
            carry, layer_in = (x, rope, mask, index), (windowed, cache["k"], cache["v"])
            (x, *_), (k, v) = self.layers(carry, layer_in)
        else:
            k, v = cache["k"], cache["v"]
        new_cache = {"k": k, "v": v, "pos": slot_pos, "index": index + positions.shape[1]}
        if stop < self.cfg.n_layers:
            if not return_hidden:
                raise ValueError("a decoder below the top block returns the residual stream")
            return x, new_cache
        x = self.final_norm(x)
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

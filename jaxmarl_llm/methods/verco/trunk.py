"""The action policy with adapters on the top ``K`` blocks only (``algo.lora_layers:
last:K``): a frozen trunk below them whose output is computed once per prompt and kept.

The decoder's stacked blocks are cut at ``split = L - K``. The trunk (blocks
``0 .. split - 1``, the base weights, no gradient) turns a prompt and the candidate
actions after it into the residual stream at the split, ``[T, D]`` for the prompt and
``[A, C, D]`` for the candidates (:func:`trunk_states`); nothing above the split changes
them, so they are kept by prompt token ids (:class:`TrunkCache`) and in the rollout
buffer. Scoring (:func:`top_action_log_probs`) runs only the top blocks, with the adapter,
from those states: the same numbers as :func:`~jaxmarl_llm.methods.verco.policy.
action_log_probs` with that adapter up to float rounding, at about ``K / L`` of the
blocks' cost. The critic's input (:func:`top_prompt_features`) is the same states through
the top blocks with the adapter off: the frozen base's last hidden state, as
:func:`~jaxmarl_llm.methods.verco.policy.prompt_features` computes it in a full pass.

Jit every function here with the :class:`SplitLM` static.
"""

from __future__ import annotations

import collections
import dataclasses

import jax
import jax.numpy as jnp
import numpy as np

from jaxmarl_llm.lm.decoder.model import slice_layers
from jaxmarl_llm.lm.lora import LoraAdapter
from jaxmarl_llm.methods.verco.policy import (
    DecoderLM,
    Normalization,
    action_log_probs,
    positions_from_valid,
    prompt_features,
    tile_cache,
)


@dataclasses.dataclass(frozen=True)
class SplitLM:
    """A decoder cut at block ``split``: ``trunk`` runs the blocks below, ``top`` the rest
    (reading the residual stream). Hashable, a static jit argument."""

    trunk: DecoderLM
    top: DecoderLM
    split: int

    @property
    def n_layers(self) -> int:
        return self.top.module.cfg.n_layers

    def params(self, base_params) -> tuple[dict, dict]:
        """The trunk's and the top's parameter trees (sliced once, outside jit: a slice
        inside a program copies the trunk's weights on every call)."""
        return (
            slice_layers(base_params, 0, self.split),
            slice_layers(base_params, self.split, self.n_layers),
        )


def split_lm(lm: DecoderLM, top_layers: int) -> SplitLM:
    """``lm`` (a :class:`~jaxmarl_llm.lm.decoder.Decoder`) cut below its top ``top_layers``
    blocks."""
    n_layers = lm.module.cfg.n_layers
    if not 1 <= top_layers <= n_layers:
        raise ValueError(f"top_layers={top_layers}; the model has 1..{n_layers} blocks")
    split = n_layers - top_layers

    def part(start, stop, embeds):
        module = lm.module.clone(parent=None, layers_run=(start, stop), embeds=embeds)
        return dataclasses.replace(lm, module=module)

    return SplitLM(part(0, split, True), part(split, n_layers, False), split)


def trunk_states(
    split: SplitLM,
    trunk_params,
    prompt_tokens: jax.Array,
    prompt_valid: jax.Array,
    cand_tokens: jax.Array,
    cand_valid: jax.Array,
) -> tuple[jax.Array, jax.Array]:
    """The residual stream at the split: prompts ``[N, T, D]`` and, after each prompt,
    every candidate ``[N, K, C, D]`` (layouts as :func:`~jaxmarl_llm.methods.verco.policy.
    candidate_token_log_probs`); no gradient reaches the weights."""
    params = jax.lax.stop_gradient(trunk_params)
    n, k, c = cand_tokens.shape
    cache = split.trunk.empty_cache(n, prompt_tokens.shape[1] + c)
    positions = positions_from_valid(prompt_valid)
    prompt_states, cache = split.trunk.hidden(params, prompt_tokens, positions, prompt_valid, cache)
    flat_valid = cand_valid.reshape(n * k, c)
    positions = positions_from_valid(flat_valid, jnp.repeat(prompt_valid.sum(-1), k))
    cand_states, _ = split.trunk.hidden(
        params, cand_tokens.reshape(n * k, c), positions, flat_valid, tile_cache(cache, k)
    )
    return prompt_states, cand_states.reshape(n, k, c, -1)


def top_action_log_probs(
    split: SplitLM,
    top_params,
    lora: LoraAdapter | None,
    prompt_states: jax.Array,
    prompt_valid: jax.Array,
    cand_states: jax.Array,
    cand_tokens: jax.Array,
    cand_valid: jax.Array,
    avail: jax.Array,
    normalization: Normalization = "none",
    word_counts: jax.Array | None = None,
) -> tuple[jax.Array, jax.Array]:
    """``log pi(u_k | prompt)`` ``[N, K]`` and the adapted prompt's last hidden state
    ``[N, D]`` (gradient-stopped) from the trunk's states; ``lora`` covers the top blocks
    (``None``: the base). Gradients flow to ``lora`` only."""
    return action_log_probs(
        split.top, jax.lax.stop_gradient(top_params), lora, prompt_states, prompt_valid,
        cand_tokens, cand_valid, avail, normalization, word_counts, cand_states,
    )  # fmt: skip


def top_prompt_features(split: SplitLM, top_params, prompt_states, prompt_valid) -> jax.Array:
    """The frozen base's final-norm hidden state at each prompt's last token ``[N, D]``
    (the critic's input) from the trunk's prompt states."""
    return prompt_features(split.top, top_params, prompt_states, prompt_valid)


@dataclasses.dataclass(frozen=True)
class TrunkEntry:
    """One prompt's trunk states: its real tokens' ``prompt [n, D]`` and the candidates'
    ``cands [A, C, D]``."""

    prompt: np.ndarray
    cands: np.ndarray

    @property
    def nbytes(self) -> int:
        return self.prompt.nbytes + self.cands.nbytes


def pack_entries(entries: list[TrunkEntry], prompt_valid: np.ndarray):
    """Host-side: entries as the batch ``(prompt_states [N, T, D], cand_states [N, A, C,
    D])`` for prompts laid out as ``prompt_valid [N, T]`` (zeros at padding)."""
    n, t = prompt_valid.shape
    d = entries[0].prompt.shape[-1]
    prompts = np.zeros((n, t, d), entries[0].prompt.dtype)
    for row, entry in enumerate(entries):
        prompts[row, prompt_valid[row]] = entry.prompt
    return prompts, np.stack([e.cands for e in entries])


class TrunkCache:
    """Trunk states by prompt token ids, least recently used first out once they hold
    more than ``max_bytes`` (0: nothing is kept); counts hits and misses."""

    def __init__(self, max_bytes: int):
        self.max_bytes = int(max_bytes)
        self._entries: collections.OrderedDict[bytes, TrunkEntry] = collections.OrderedDict()
        self.bytes = 0
        self.hits = 0
        self.misses = 0
        self.evictions = 0

    @staticmethod
    def key(token_ids) -> bytes:
        return np.asarray(token_ids, np.int32).tobytes()

    def get(self, token_ids) -> TrunkEntry | None:
        key = self.key(token_ids)
        entry = self._entries.get(key)
        if entry is None:
            self.misses += 1
            return None
        self.hits += 1
        self._entries.move_to_end(key)
        return entry

    def put(self, token_ids, entry: TrunkEntry) -> None:
        key = self.key(token_ids)
        if key in self._entries or entry.nbytes > self.max_bytes:
            return
        self._entries[key] = entry
        self.bytes += entry.nbytes
        while self.bytes > self.max_bytes:
            _, old = self._entries.popitem(last=False)
            self.bytes -= old.nbytes
            self.evictions += 1

    def __len__(self) -> int:
        return len(self._entries)

    def stats(self) -> dict:
        asked = self.hits + self.misses
        return {
            "entries": len(self._entries),
            "bytes": self.bytes,
            "hits": self.hits,
            "misses": self.misses,
            "evictions": self.evictions,
            "hit_rate": self.hits / asked if asked else float("nan"),
        }

"""Verco's action policy: a language model scores each available macro-action's text.

For prompt ``p`` (observation text and the teammates' messages) and candidate actions
``u_k = (w_k^1 .. w_k^n)``, the policy is (Verco's Eq. 2-3, after TWOSOME)

    log P_token(u_k | p) = sum_j log P(w_k^j | p, w_k^<j)
    pi(u_k | p) = softmax over the available k of score(u_k)

where ``score`` is ``log P_token`` (``normalization="none"``, Verco's equation) or, as
TWOSOME's options, that sum divided by the candidate's token count (``"token"``) or word
count (``"word"``).

Cost: every prompt is run through the model once into a KV cache; the cache is tiled over
the ``K`` candidates and all candidates' tokens run in one forward against it. The first
candidate token's log-probability comes from the prompt's last logits. For ``N`` prompts
of ``T`` tokens and ``K`` candidates of ``C`` tokens that is ``N*T + N*K*C`` token
positions, against ``N*K*(T+C)`` when each prompt+candidate is scored from scratch.

Critic (TWOSOME, followed by Verco: "an additional MLP added to the last transformer
block"): :class:`ValueHead`, a bias-free ``d -> 1024 -> 512 -> 1`` ReLU MLP on the
final-norm hidden state of the prompt's last token, computed by the frozen base model
(adapters disabled, no gradient into the model). The base never changes, so
:func:`prompt_features` is run once per observation when acting and the PPO update reads
the stored features, with no model pass for the critic. :func:`action_log_probs` also
returns the last hidden state of its own (adapted) prefill, gradient-stopped, for a
cheaper critic that needs no second prefill.

Layouts: prompts ``[N, T]`` may be left- or right-padded (``prompt_valid`` marks real
tokens, at least one per row); candidates ``[N, K, C]`` are right-padded (each
candidate's real tokens first), ``avail [N, K]`` marks the actions allowed in each row
(at least one per row).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Sequence
from typing import Any, Literal

import flax.linen as nn
import jax
import jax.numpy as jnp
import numpy as np

from jaxmarl_llm.lm.lora import LoraAdapter, merge_lora

Normalization = Literal["none", "token", "word"]
NORMALIZATIONS = ("none", "token", "word")


@dataclasses.dataclass(frozen=True)
class DecoderLM:
    """A decoder with the project's calling convention and its cache builder.

    ``module(tokens, positions, valid, cache, return_hidden)`` and ``module.logits`` as in
    :class:`jaxmarl_llm.lm.decoder.Decoder`; ``init_cache(cfg, batch, length, dtype)`` as
    :func:`jaxmarl_llm.lm.decoder.init_cache`. Hashable, so it can be a static jit argument.
    """

    module: nn.Module
    init_cache: Callable[..., dict]
    cache_dtype: Any = jnp.float32

    def empty_cache(self, batch: int, length: int) -> dict:
        cfg = getattr(self.module, "stack_cfg", self.module.cfg)  # the blocks it runs
        return self.init_cache(cfg, batch, length, self.cache_dtype)

    def hidden(self, params, tokens, positions, valid, cache):
        """Final-norm hidden states ``[B, T, D]`` and the updated cache."""
        return self.module.apply(
            {"params": params}, tokens, positions, valid, cache, return_hidden=True
        )

    def logits(self, params, hidden):
        return self.module.apply({"params": params}, hidden, method="logits")


def positions_from_valid(valid: jax.Array, offset: jax.Array | int = 0) -> jax.Array:
    """Each real token's position: ``offset`` plus the number of real tokens before it in
    its row (padding gets the position of the next real token; the model ignores it)."""
    count_before = jnp.cumsum(valid, axis=-1) - valid
    return (jnp.asarray(offset)[..., None] + count_before).astype(jnp.int32)


def last_valid_index(valid: jax.Array) -> jax.Array:
    """Index of each row's last real token, ``[B]`` (left or right padding alike)."""
    steps = jnp.arange(valid.shape[-1])
    return jnp.max(jnp.where(valid, steps, -1), axis=-1)


def prefill_prompts(
    lm: DecoderLM, params, prompt_tokens: jax.Array, prompt_valid: jax.Array, extra_slots: int
) -> tuple[jax.Array, dict]:
    """Run the prompts (``[N, T]`` tokens, or ``[N, T, D]`` inputs of a decoder's top
    blocks) into a cache with ``extra_slots`` free slots after them.

    Returns the prompts' last-token hidden states ``[N, D]`` and the cache.
    """
    n, t = prompt_tokens.shape[:2]
    cache = lm.empty_cache(n, t + extra_slots)
    positions = positions_from_valid(prompt_valid)
    hidden, cache = lm.hidden(params, prompt_tokens, positions, prompt_valid, cache)
    last = jnp.take_along_axis(hidden, last_valid_index(prompt_valid)[:, None, None], axis=1)
    return last[:, 0], cache


def tile_cache(cache: dict, copies: int) -> dict:
    """Each row's cache repeated ``copies`` times, consecutively (row ``n`` -> rows
    ``n*copies .. n*copies + copies - 1``); the shared write index is kept."""
    return {
        "k": jnp.repeat(cache["k"], copies, axis=1),
        "v": jnp.repeat(cache["v"], copies, axis=1),
        "pos": jnp.repeat(cache["pos"], copies, axis=0),
        "index": cache["index"],
    }


def gather_log_probs(logits: jax.Array, targets: jax.Array) -> jax.Array:
    """``log softmax(logits)[..., targets]``."""
    log_probs = jax.nn.log_softmax(logits.astype(jnp.float32), axis=-1)
    return jnp.take_along_axis(log_probs, targets[..., None], axis=-1)[..., 0]


def candidate_token_log_probs(
    lm: DecoderLM,
    params,
    prompt_tokens: jax.Array,
    prompt_valid: jax.Array,
    cand_tokens: jax.Array,
    cand_valid: jax.Array,
    cand_inputs: jax.Array | None = None,
) -> tuple[jax.Array, jax.Array]:
    """``log P(w_k^j | prompt, w_k^<j)`` for every candidate token, ``[N, K, C]`` (0 at
    padding), and the prompts' last hidden states ``[N, D]``, from one prefill plus one
    forward of all candidates against the tiled cache.

    Where ``lm`` is a decoder's top blocks, it reads the residual stream: ``prompt_tokens``
    is ``[N, T, D]`` and ``cand_inputs [N, K, C, D]`` replaces the candidates' tokens as
    its input (they stay the targets)."""
    n, k, c = cand_tokens.shape
    cand_in = cand_tokens if cand_inputs is None else cand_inputs
    last_hidden, cache = prefill_prompts(lm, params, prompt_tokens, prompt_valid, c)
    first_token_logits = lm.logits(params, last_hidden)  # [N, V]
    first = gather_log_probs(first_token_logits[:, None, :], cand_tokens[:, :, 0])  # [N, K]

    prompt_length = prompt_valid.sum(axis=-1)
    flat_tokens = cand_tokens.reshape(n * k, c)
    flat_in = cand_in.reshape(n * k, c, *cand_in.shape[3:])
    flat_valid = cand_valid.reshape(n * k, c)
    positions = positions_from_valid(flat_valid, jnp.repeat(prompt_length, k))
    hidden, _ = lm.hidden(params, flat_in, positions, flat_valid, tile_cache(cache, k))
    # The last candidate position predicts whatever follows the action: not needed.
    rest = gather_log_probs(lm.logits(params, hidden[:, :-1]), flat_tokens[:, 1:])
    token_log_probs = jnp.concatenate([first[..., None], rest.reshape(n, k, c - 1)], axis=-1)
    return jnp.where(cand_valid, token_log_probs, 0.0), last_hidden


def action_scores(
    token_log_probs: jax.Array,
    cand_valid: jax.Array,
    normalization: Normalization = "none",
    word_counts: jax.Array | None = None,
) -> jax.Array:
    """Per-candidate scores ``[N, K]`` from token log-probs ``[N, K, C]``: the sum
    (``"none"``), or the sum over the token count (``"token"``) or word count (``"word"``,
    ``word_counts [N, K]`` from the candidates' text)."""
    total = jnp.sum(jnp.where(cand_valid, token_log_probs, 0.0), axis=-1)
    if normalization == "none":
        return total
    if normalization == "token":
        return total / jnp.maximum(cand_valid.sum(axis=-1), 1)
    if normalization == "word":
        if word_counts is None:
            raise ValueError('normalization="word" needs word_counts [N, K]')
        return total / jnp.maximum(word_counts, 1)
    raise ValueError(f"normalization must be one of {NORMALIZATIONS}, got {normalization!r}")


def masked_log_softmax(scores: jax.Array, avail: jax.Array) -> jax.Array:
    """``log pi`` over the available entries of each row; ``-inf`` elsewhere."""
    return jax.nn.log_softmax(jnp.where(avail, scores, -jnp.inf), axis=-1)


def action_log_probs(
    lm: DecoderLM,
    base_params,
    lora: LoraAdapter | None,
    prompt_tokens: jax.Array,
    prompt_valid: jax.Array,
    cand_tokens: jax.Array,
    cand_valid: jax.Array,
    avail: jax.Array,
    normalization: Normalization = "none",
    word_counts: jax.Array | None = None,
    cand_inputs: jax.Array | None = None,
) -> tuple[jax.Array, jax.Array]:
    """The action policy's ``log pi(u_k | prompt)`` ``[N, K]`` (``-inf`` where not
    available) and the adapted prompt's last hidden state ``[N, D]`` (gradient-stopped).

    Gradients flow to ``lora`` only (``None``: the base model). Jit with ``lm`` and
    ``normalization`` static. For a decoder's top blocks, ``prompt_tokens`` and
    ``cand_inputs`` are the trunk's states (``candidate_token_log_probs``).
    """
    params = base_params if lora is None else merge_lora(base_params, lora)
    token_log_probs, last_hidden = candidate_token_log_probs(
        lm, params, prompt_tokens, prompt_valid, cand_tokens, cand_valid, cand_inputs
    )
    scores = action_scores(token_log_probs, cand_valid, normalization, word_counts)
    return masked_log_softmax(scores, avail), jax.lax.stop_gradient(last_hidden)


def prompt_features(lm: DecoderLM, base_params, prompt_tokens, prompt_valid) -> jax.Array:
    """The frozen base model's final-norm hidden state at each prompt's last token
    ``[N, D]``: the critic's input (TWOSOME reads it with the adapters disabled)."""
    last_hidden, _ = prefill_prompts(
        lm, jax.lax.stop_gradient(base_params), prompt_tokens, prompt_valid, 0
    )
    return last_hidden


class ValueHead(nn.Module):
    """TWOSOME's critic MLP: bias-free Dense layers with ReLU between, to one value."""

    hidden_sizes: Sequence[int] = (1024, 512)

    @nn.compact
    def __call__(self, features: jax.Array) -> jax.Array:
        x = features.astype(jnp.float32)
        for size in self.hidden_sizes:
            x = nn.relu(nn.Dense(size, use_bias=False)(x))
        return nn.Dense(1, use_bias=False)(x)[..., 0]


def pack_prompts(token_lists: Sequence[Sequence[int]], length: int, pad_id: int = 0, left=True):
    """Host-side: token id lists as ``(tokens [N, length] int32, valid [N, length] bool)``,
    left-padded (``left=True``) or right-padded. Too-long prompts raise ``ValueError``."""
    tokens = np.full((len(token_lists), length), pad_id, np.int32)
    valid = np.zeros((len(token_lists), length), bool)
    for row, ids in enumerate(token_lists):
        if not 0 < len(ids) <= length:
            raise ValueError(f"prompt {row} has {len(ids)} tokens; 1..{length} fit")
        cols = slice(length - len(ids), length) if left else slice(0, len(ids))
        tokens[row, cols] = ids
        valid[row, cols] = True
    return tokens, valid


def pack_candidates(
    candidates: Sequence[Sequence[Sequence[int]]], actions: int, length: int, pad_id: int = 0
):
    """Host-side: per prompt, a list of candidate token id lists (index = action id) as
    right-padded ``(tokens [N, actions, length], valid [N, actions, length],
    avail [N, actions])``; a prompt's missing trailing actions are unavailable."""
    n = len(candidates)
    tokens = np.full((n, actions, length), pad_id, np.int32)
    valid = np.zeros((n, actions, length), bool)
    avail = np.zeros((n, actions), bool)
    for row, cands in enumerate(candidates):
        if len(cands) > actions:
            raise ValueError(f"prompt {row} has {len(cands)} candidates; {actions} fit")
        for k, ids in enumerate(cands):
            if not 0 < len(ids) <= length:
                raise ValueError(f"candidate {row},{k} has {len(ids)} tokens; 1..{length} fit")
            tokens[row, k, : len(ids)] = ids
            valid[row, k, : len(ids)] = True
            avail[row, k] = True
    return tokens, valid, avail

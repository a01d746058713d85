"""Verco's losses: PPO for the language-model action policy (Eq. 4-6) and SFT of the
message adapter on a teacher's messages (Eq. 1), plus the message length budget.

The PPO pieces reuse :mod:`jaxmarl_llm.learners.losses` (clipped surrogate, clipped
value loss); what is new here is the policy's shape: a categorical over the *available*
candidate actions, whose unavailable entries have ``-inf`` log-probability.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import NamedTuple

import distrax
import jax
import jax.numpy as jnp
import optax

from jaxmarl_llm.learners.losses import clipped_policy_loss, value_loss
from jaxmarl_llm.lm.lora import LoraAdapter, merge_lora
from jaxmarl_llm.methods.verco.policy import DecoderLM, positions_from_valid


def chosen_log_prob(log_probs: jax.Array, actions: jax.Array) -> jax.Array:
    """``log_probs[b, actions[b]]`` for ``log_probs [B, K]``, ``actions [B]``."""
    return jnp.take_along_axis(log_probs, actions[:, None].astype(jnp.int32), axis=-1)[:, 0]


def policy_entropy(log_probs: jax.Array) -> jax.Array:
    """Entropy ``[B]`` of each row's distribution over its available actions; entries
    with ``-inf`` log-probability add nothing, in value and in gradient."""
    return distrax.Categorical(logits=log_probs).entropy()


def ppo_loss(
    log_probs: jax.Array,
    actions: jax.Array,
    old_log_probs: jax.Array,
    advantages: jax.Array,
    values: jax.Array,
    old_values: jax.Array,
    value_targets: jax.Array,
    clip_eps: float = 0.2,
    value_coef: float = 0.5,
    entropy_coef: float = 0.01,
    clip_value: bool = True,
) -> tuple[jax.Array, dict]:
    """``L_clip + value_coef * L_value - entropy_coef * H`` (TWOSOME's signs and defaults).

    ``log_probs [B, K]``: the current policy over actions (``-inf`` where unavailable);
    ``actions``, ``old_log_probs`` (of the chosen actions), ``advantages``, ``values``,
    ``old_values``, ``value_targets``: ``[B]``. The value clip uses ``clip_eps`` as in
    Verco's Eq. 5.
    """
    new_log_prob = chosen_log_prob(log_probs, actions)
    policy_loss, stats = clipped_policy_loss(new_log_prob, old_log_probs, advantages, clip_eps)
    critic_loss = value_loss(values, old_values, value_targets, clip_eps, clip_value)
    entropy = policy_entropy(log_probs).mean()
    loss = policy_loss + value_coef * critic_loss - entropy_coef * entropy
    stats = {**stats, "policy_loss": policy_loss, "value_loss": critic_loss, "entropy": entropy}
    return loss, stats


def masked_token_cross_entropy(
    logits: jax.Array, tokens: jax.Array, target_mask: jax.Array
) -> jax.Array:
    """Mean next-token cross-entropy over the tokens ``target_mask`` marks.

    ``logits [B, T, V]`` at position ``t`` predict ``tokens[:, t + 1]``; ``target_mask
    [B, T]`` marks the tokens to learn (the message, never the prompt).
    """
    per_token = optax.softmax_cross_entropy_with_integer_labels(
        logits[:, :-1].astype(jnp.float32), tokens[:, 1:]
    )
    weight = target_mask[:, 1:].astype(jnp.float32)
    return jnp.sum(per_token * weight) / jnp.maximum(weight.sum(), 1.0)


def message_sft_loss(
    lm: DecoderLM,
    base_params,
    message_lora: LoraAdapter,
    tokens: jax.Array,
    valid: jax.Array,
    message_mask: jax.Array,
) -> jax.Array:
    """Cross-entropy of the message adapter on teacher messages (Verco's Eq. 1).

    ``tokens [B, T]``: prompt then message, left- or right-padded (``valid``);
    ``message_mask [B, T]``: True on the message tokens (and, if wanted, the end token),
    the only positions scored.
    """
    params = merge_lora(base_params, message_lora)
    cache = lm.empty_cache(*tokens.shape)
    hidden, _ = lm.hidden(params, tokens, positions_from_valid(valid), valid, cache)
    return masked_token_cross_entropy(lm.logits(params, hidden), tokens, message_mask & valid)


class MessageCut(NamedTuple):
    """A message after the length budget: what is kept and how much was dropped."""

    kept: str | list[int]
    dropped: int

    @property
    def was_cut(self) -> bool:
        return self.dropped > 0


def cut_message_words(text: str, max_words: int) -> MessageCut:
    """Keep a message's first ``max_words`` words (Verco's teacher is asked for messages
    "within 10 words"); whitespace inside the kept part is normalised to single spaces."""
    words = text.split()
    return MessageCut(" ".join(words[:max_words]), max(len(words) - max_words, 0))


def cut_message_tokens(token_ids: Sequence[int], max_tokens: int) -> MessageCut:
    """Keep a tokenized message's first ``max_tokens`` token ids."""
    ids = list(token_ids)
    return MessageCut(ids[:max_tokens], max(len(ids) - max_tokens, 0))


def message_budget_mask(valid: jax.Array, max_tokens: int) -> tuple[jax.Array, jax.Array]:
    """Device-side budget for padded messages ``valid [B, T]``: the mask of each row's
    first ``max_tokens`` real tokens, and how many real tokens each row drops ``[B]``."""
    kept = valid & (jnp.cumsum(valid, axis=-1) <= max_tokens)
    return kept, (valid.sum(axis=-1) - kept.sum(axis=-1)).astype(jnp.int32)

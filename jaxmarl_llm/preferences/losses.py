"""Bradley-Terry preference losses on model outputs (pure, jittable, numerically stable).

All losses take the model's scores (potentials or per-step rewards), the soft label
``y = P(a preferred)`` in [0, 1] and masks, and return a masked, weighted mean of the
cross-entropy between ``y`` and the Bradley-Terry probability

    P[a > b] = exp(s_a) / (exp(s_a) + exp(s_b)) = sigmoid(s_a - s_b),

computed with ``log_sigmoid`` so that extreme score gaps give finite values and
gradients. Masked-out entries are replaced by zeros *before* the loss, so a padded row
holding garbage (even inf/nan) contributes nothing to the value or the gradient.

- :func:`state_pair_loss`: LCA eq. 3, ``-[conf_a log P(a>b) + conf_b log P(b>a)]`` with
  ``conf_a = y`` (e.g. the multi-query confidence) and ``conf_b = 1 - y``;
- :func:`segment_pair_loss`: DPM eq. 4-5, segment score = sum of per-step (per-agent)
  predicted rewards; DPM's ``y`` (1 = second segment) is our ``1 - label``; ties are 0.5;
- :func:`agent_ranking_loss`: DPM eq. 6-8 as printed, the agents of a step compared in
  ordered pairs.
"""

from __future__ import annotations

import chex
import jax
import jax.numpy as jnp


def _masked_mean(x: jax.Array, weight: jax.Array) -> jax.Array:
    """``sum(w * x) / sum(w)``; 0 when every weight is 0."""
    total = weight.sum()
    return jnp.where(total > 0, (weight * x).sum() / jnp.where(total > 0, total, 1.0), 0.0)


def bradley_terry_logits(score_a: jax.Array, score_b: jax.Array) -> jax.Array:
    """``logit P[a > b] = s_a - s_b``."""
    return score_a - score_b


def preference_probability(score_a: jax.Array, score_b: jax.Array) -> jax.Array:
    """``P[a > b] = sigmoid(s_a - s_b)``."""
    return jax.nn.sigmoid(score_a - score_b)


def bradley_terry_cross_entropy(logits: jax.Array, label: jax.Array) -> jax.Array:
    """Elementwise ``-[y log sigmoid(z) + (1 - y) log sigmoid(-z)]``, stable at any ``z``."""
    return -(label * jax.nn.log_sigmoid(logits) + (1.0 - label) * jax.nn.log_sigmoid(-logits))


def state_pair_loss(
    score_a: jax.Array,
    score_b: jax.Array,
    label: jax.Array,
    valid: jax.Array | None = None,
    weight: jax.Array | None = None,
) -> jax.Array:
    """LCA eq. 3: confidence-weighted Bradley-Terry cross-entropy over state pairs ``[P]``.

    Returns ``sum(w * m * CE) / sum(w * m)`` with ``m = valid`` and ``w = weight``
    (default 1): the expectation over the dataset of eq. 3, with per-pair importance
    ``weight`` (e.g. the number of answers behind a multi-query confidence).
    """
    chex.assert_equal_shape([score_a, score_b, label])
    mask = jnp.ones(label.shape, bool) if valid is None else valid.astype(bool)
    w = jnp.ones(label.shape, jnp.float32) if weight is None else weight.astype(jnp.float32)
    chex.assert_equal_shape([mask, w, label])
    logits = jnp.where(mask, bradley_terry_logits(score_a, score_b), 0.0)
    label = jnp.where(mask, label, 0.5)
    ce = bradley_terry_cross_entropy(logits, label)
    return _masked_mean(ce, jnp.where(mask, w, 0.0))


def segment_scores(rewards: jax.Array, mask: jax.Array | None = None) -> jax.Array:
    """Segment score ``sum_t R_t`` with ``R_t = sum_n r_t^n`` (DPM eq. 4): per-step rewards
    ``[P, ...]`` summed over every axis but the first, masked entries dropped."""
    if mask is not None:
        chex.assert_equal_shape([rewards, mask])
        rewards = jnp.where(mask, rewards, 0.0)
    return rewards.reshape(rewards.shape[0], -1).sum(-1)


def segment_pair_loss(
    rewards_a: jax.Array,
    rewards_b: jax.Array,
    label: jax.Array,
    mask_a: jax.Array | None = None,
    mask_b: jax.Array | None = None,
    valid: jax.Array | None = None,
    weight: jax.Array | None = None,
) -> jax.Array:
    """DPM eq. 4-5: Bradley-Terry over segment returns; rewards ``[P, T, ...]``, label ``[P]``.

    ``label = P(segment a preferred)``: 1, 0, or 0.5 for "equally preferable".
    """
    score_a = segment_scores(rewards_a, mask_a)
    score_b = segment_scores(rewards_b, mask_b)
    return state_pair_loss(score_a, score_b, label, valid, weight)


def agent_ranking_loss(
    rewards: jax.Array,
    label: jax.Array,
    pair_valid: jax.Array,
    valid: jax.Array | None = None,
    weight: jax.Array | None = None,
) -> jax.Array:
    """DPM eq. 6-8: per-step agent rankings as pairwise Bradley-Terry comparisons.

    ``rewards`` ``[S, N]`` are the predicted rewards of each step's agents;
    ``label[s, i, j] = P(agent i ranked above j)`` (``beta_{i>j}``; 0.5 = equal rank) and
    ``pair_valid`` ``[S, N, N]`` marks the compared ordered pairs (diagonal ignored).

    Eq. 6 as printed: each valid ordered pair ``(i, j)`` contributes
    ``-b_ij log P(i>j)``, a step's loss is the mean over its valid pairs (``1/|M|``) and
    the result the weighted mean over valid steps. Over a mirrored matrix
    (``label[j, i] = 1 - label[i, j]``, as ``teachers.agent_rankings`` returns, both
    orders valid) the two orders of a pair make up one Bradley-Terry cross-entropy, so
    the loss is half the mean cross-entropy per unordered pair.
    """
    chex.assert_rank(rewards, 2)
    s, n = rewards.shape
    chex.assert_shape([label, pair_valid], (s, n, n))
    pmask = pair_valid.astype(bool) & ~jnp.eye(n, dtype=bool)
    if valid is not None:
        chex.assert_shape(valid, (s,))
        pmask = pmask & valid.astype(bool)[:, None, None]
    logits = jnp.where(pmask, rewards[:, :, None] - rewards[:, None, :], 0.0)
    ce = -jnp.where(pmask, label, 0.5) * jax.nn.log_sigmoid(logits)
    count = pmask.sum((-1, -2))
    per_step = jnp.where(pmask, ce, 0.0).sum((-1, -2)) / jnp.maximum(count, 1)
    w = jnp.ones((s,), jnp.float32) if weight is None else weight.astype(jnp.float32)
    return _masked_mean(per_step, jnp.where(count > 0, w, 0.0))

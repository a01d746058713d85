"""How good is a learned reward/potential model: label accuracy and rank correlations.

- :func:`preference_accuracy`: agreement with held-out labels. A soft label counts as
  its majority (``> 0.5``: a, ``< 0.5``: b). Labels at exactly 0.5 (ties, or split
  votes) are *excluded* by default (``ties="exclude"``); with ``ties="half"`` each one
  counts as half correct whatever the model says. A model score tie (``s_a == s_b``)
  on a decided label counts as half correct. With no label counted the agreement is
  undefined: NaN, not 0 (a team that never fights gives its teacher only ties).
- :func:`pairwise_ranking_accuracy`: fraction of item pairs with different true values
  whose predicted order is right (the pairwise accuracy against a ground-truth value).
- :func:`kendall_tau`: Kendall's tau-b (as ``scipy.stats.kendalltau``, ties included).
- :func:`spearman`: Spearman's rho (Pearson correlation of average ranks).

All take an optional ``valid`` mask over items, work on the last axis (any leading batch
shape) and are pure and jittable. Pairwise ones are ``O(M^2)`` in memory: fine for a few
thousand items.
"""

from __future__ import annotations

import jax
import jax.numpy as jnp


def _mask(x: jax.Array, valid: jax.Array | None) -> jax.Array:
    return jnp.ones(x.shape, bool) if valid is None else jnp.broadcast_to(valid, x.shape)


def preference_accuracy(
    score_a: jax.Array,
    score_b: jax.Array,
    label: jax.Array,
    valid: jax.Array | None = None,
    ties: str = "exclude",
) -> jax.Array:
    """Fraction of labelled pairs ``[..., P]`` whose preferred item the model scores higher."""
    if ties not in ("exclude", "half"):
        raise ValueError(f"ties must be 'exclude' or 'half', got {ties!r}")
    valid = _mask(label, valid)
    diff = score_a - score_b
    decided = label != 0.5
    correct = jnp.where(label > 0.5, diff > 0, diff < 0).astype(jnp.float32)
    correct = jnp.where(diff == 0, 0.5, correct)
    if ties == "exclude":
        counted = valid & decided
    else:
        counted = valid
        correct = jnp.where(decided, correct, 0.5)
    n = counted.sum(-1)
    total = jnp.where(counted, correct, 0.0).sum(-1)
    return jnp.where(n > 0, total / jnp.maximum(n, 1), jnp.nan)


def _pair_signs(x: jax.Array) -> jax.Array:
    """``sign(x_i - x_j)`` ``[..., M, M]``."""
    return jnp.sign(x[..., :, None] - x[..., None, :])


def _pair_mask(valid: jax.Array) -> jax.Array:
    return valid[..., :, None] & valid[..., None, :]


def pairwise_ranking_accuracy(
    predicted: jax.Array, true: jax.Array, valid: jax.Array | None = None
) -> jax.Array:
    """Over pairs ``i != j`` of valid items with ``true_i != true_j``: the fraction whose
    predicted order matches (a predicted tie counts as half correct)."""
    valid = _mask(true, valid)
    st, sp = _pair_signs(true), _pair_signs(predicted)
    counted = _pair_mask(valid) & (st != 0)
    correct = jnp.where(sp == 0, 0.5, (sp == st).astype(jnp.float32))
    n = counted.sum((-1, -2))
    return jnp.where(counted, correct, 0.0).sum((-1, -2)) / jnp.maximum(n, 1)


def kendall_tau(x: jax.Array, y: jax.Array, valid: jax.Array | None = None) -> jax.Array:
    """Kendall's tau-b over the last axis (equals ``scipy.stats.kendalltau``'s default).

    ``tau_b = (P - Q) / sqrt((P + Q + T) (P + Q + U))`` (P concordant, Q discordant, T
    pairs tied only in ``x``, U only in ``y``), computed as
    ``sum s_x s_y / sqrt(sum s_x^2 * sum s_y^2)`` over pairs with ``s`` the sign of the
    pair difference. NaN where either side is constant (as scipy).
    """
    pm = _pair_mask(_mask(x, valid))
    sx = jnp.where(pm, _pair_signs(x), 0.0)
    sy = jnp.where(pm, _pair_signs(y), 0.0)
    num = (sx * sy).sum((-1, -2))
    den = jnp.sqrt((sx * sx).sum((-1, -2)) * (sy * sy).sum((-1, -2)))
    return num / den


def average_ranks(x: jax.Array, valid: jax.Array | None = None) -> jax.Array:
    """1-based ranks among the valid entries, ties sharing their average rank
    (``scipy.stats.rankdata``); invalid entries get 0."""
    valid = _mask(x, valid)
    other = valid[..., None, :]
    less = ((x[..., None, :] < x[..., :, None]) & other).sum(-1)
    equal = ((x[..., None, :] == x[..., :, None]) & other).sum(-1)
    return jnp.where(valid, less + (equal + 1) / 2.0, 0.0)


def spearman(x: jax.Array, y: jax.Array, valid: jax.Array | None = None) -> jax.Array:
    """Spearman's rho over the last axis (``scipy.stats.spearmanr`` for 1-D inputs)."""
    valid = _mask(x, valid)
    rx, ry = average_ranks(x, valid), average_ranks(y, valid)
    n = jnp.maximum(valid.sum(-1, keepdims=True), 1)
    cx = jnp.where(valid, rx - rx.sum(-1, keepdims=True) / n, 0.0)
    cy = jnp.where(valid, ry - ry.sum(-1, keepdims=True) / n, 0.0)
    return (cx * cy).sum(-1) / jnp.sqrt((cx * cx).sum(-1) * (cy * cy).sum(-1))

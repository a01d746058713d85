"""Preference datasets as fixed-capacity arrays that a jitted training loop consumes.

Three kinds of labels, all with the Bradley-Terry convention ``label = P(a preferred)``
in [0, 1] (1: a, 0: b, 0.5: tie, anything between: a confidence from several queries):

- :class:`StatePairDataset` (LCA): pairs of single states/observations ``[C, D]``, with a
  confidence ``weight`` and an ``agent`` id per pair (per-agent datasets, shared or
  grouped models);
- :class:`SegmentPairDataset` (DPM eq. 4-5): pairs of trajectory segments
  ``[C, T, N, D]`` scored by the sum of per-step, per-agent predicted rewards;
- :class:`AgentRankingDataset` (DPM eq. 6-8): per-step agent rankings decomposed into
  pair matrices ``[C, N, N]`` over the step's agent features ``[C, N, D]``.

Every dataset has a capacity ``C`` fixed at construction and a ``valid`` mask ``[C]``;
padding rows are zeros with ``valid=False``. Adding labels (:func:`insert`) and splitting
(:func:`train_val_split`) keep the capacity, so a training loop compiled once serves a
dataset that grows during training. All functions are pure and jittable.
"""

from __future__ import annotations

from typing import Any

import chex
import jax
import jax.numpy as jnp
from flax import struct

from jaxmarl_llm.lm.teachers import PairLabels


@struct.dataclass
class StatePairDataset:
    """State pairs ``(a, b)``; ``label = P(a preferred)``, ``weight`` multiplies the loss."""

    features_a: jax.Array  # [C, D] float
    features_b: jax.Array  # [C, D] float
    label: jax.Array  # [C] float in [0, 1]
    weight: jax.Array  # [C] float >= 0
    agent: jax.Array  # [C] int32, which agent's perspective (0 for a shared dataset)
    valid: jax.Array  # [C] bool


@struct.dataclass
class SegmentPairDataset:
    """Trajectory-segment pairs; a segment's score is the sum of its masked step rewards."""

    features_a: jax.Array  # [C, T, N, D] float (agent n at step t of segment a)
    features_b: jax.Array  # [C, T, N, D] float
    mask_a: jax.Array  # [C, T, N] bool, steps/agents that count in segment a
    mask_b: jax.Array  # [C, T, N] bool
    label: jax.Array  # [C] float in [0, 1]
    weight: jax.Array  # [C] float >= 0
    valid: jax.Array  # [C] bool


@struct.dataclass
class AgentRankingDataset:
    """Per-step agent rankings: ``label[c, i, j] = P(agent i contributed more than j)``."""

    features: jax.Array  # [C, N, D] float, agent n's input at the ranked step
    label: jax.Array  # [C, N, N] float in [0, 1]
    pair_valid: jax.Array  # [C, N, N] bool (diagonal False)
    weight: jax.Array  # [C] float >= 0
    valid: jax.Array  # [C] bool


Dataset = StatePairDataset | SegmentPairDataset | AgentRankingDataset


# ----- builders --------------------------------------------------------------------------


def _f32(x) -> jax.Array:
    return jnp.asarray(x, jnp.float32)


def _pad_rows(x: jax.Array, capacity: int) -> jax.Array:
    n = x.shape[0]
    if capacity < n:
        raise ValueError(f"capacity {capacity} is smaller than the {n} items given")
    return jnp.pad(x, [(0, capacity - n)] + [(0, 0)] * (x.ndim - 1))


def pad_to_capacity(dataset: Any, capacity: int) -> Any:
    """Pad every leaf's leading axis with zeros up to ``capacity`` (padded rows invalid)."""
    return jax.tree.map(lambda x: _pad_rows(x, capacity), dataset)


def state_pairs(
    features_a: jax.Array,
    features_b: jax.Array,
    label: jax.Array,
    *,
    valid: jax.Array | None = None,
    weight: jax.Array | None = None,
    agent: jax.Array | int = 0,
    capacity: int | None = None,
) -> StatePairDataset:
    """A state-pair dataset from arrays ``[P, D]``, ``[P]``; padded to ``capacity``."""
    features_a, features_b = _f32(features_a), _f32(features_b)
    chex.assert_equal_shape([features_a, features_b])
    chex.assert_rank(features_a, 2)
    p = features_a.shape[0]
    label = _f32(label)
    chex.assert_shape(label, (p,))
    valid = jnp.ones((p,), bool) if valid is None else jnp.asarray(valid, bool)
    weight = jnp.ones((p,), jnp.float32) if weight is None else _f32(weight)
    agent = jnp.broadcast_to(jnp.asarray(agent, jnp.int32), (p,))
    chex.assert_shape([valid, weight], (p,))
    ds = StatePairDataset(features_a, features_b, label, weight, agent, valid)
    return ds if capacity is None else pad_to_capacity(ds, capacity)


def state_pairs_from_labels(
    features_a: jax.Array,
    features_b: jax.Array,
    labels: PairLabels,
    *,
    agent: jax.Array | int = 0,
    capacity: int | None = None,
) -> StatePairDataset:
    """From one teacher answer per pair (``pair_preferences``); skipped pairs are invalid."""
    return state_pairs(
        features_a,
        features_b,
        labels.label,
        valid=labels.valid,
        agent=agent,
        capacity=capacity,
    )


def state_pairs_from_confidence(
    features_a: jax.Array,
    features_b: jax.Array,
    confidence: jax.Array,
    num_answers: jax.Array,
    *,
    agent: jax.Array | int = 0,
    weight_by_answers: bool = False,
    capacity: int | None = None,
) -> StatePairDataset:
    """From ``repeated_pair_preferences`` (LCA eq. 3, multi-query).

    The confidence ``conf{y = a > b}`` (the fraction of answers preferring ``a``, ties as
    half votes) is the soft label; pairs with no answer are invalid. With
    ``weight_by_answers`` a pair's weight is its number of answers, so a pair answered
    four times counts four times as much as a pair answered once.
    """
    num_answers = jnp.asarray(num_answers)
    weight = _f32(num_answers) if weight_by_answers else None
    return state_pairs(
        features_a,
        features_b,
        confidence,
        valid=num_answers > 0,
        weight=weight,
        agent=agent,
        capacity=capacity,
    )


def per_agent_state_pairs(
    obs_a: jax.Array,
    obs_b: jax.Array,
    labels: PairLabels | jax.Array,
    *,
    valid: jax.Array | None = None,
    capacity: int | None = None,
) -> StatePairDataset:
    """Flatten per-agent pairs ``[P, N, D]`` with labels ``[P, N]`` into ``P * N`` pairs.

    Row ``p * N + n`` is agent ``n``'s view of pair ``p`` (LCA's agent-specific rankings),
    so ``agent`` carries ``n``. ``labels`` is a ``PairLabels`` or a confidence array.
    """
    obs_a, obs_b = _f32(obs_a), _f32(obs_b)
    chex.assert_equal_shape([obs_a, obs_b])
    chex.assert_rank(obs_a, 3)
    p, n, d = obs_a.shape
    if isinstance(labels, PairLabels):
        label, lvalid = labels.label, labels.valid
    else:
        label, lvalid = labels, jnp.ones(labels.shape, bool)
    chex.assert_shape([label, lvalid], (p, n))
    if valid is not None:
        lvalid = lvalid & jnp.asarray(valid, bool)
    agent = jnp.broadcast_to(jnp.arange(n, dtype=jnp.int32), (p, n))
    return state_pairs(
        obs_a.reshape(p * n, d),
        obs_b.reshape(p * n, d),
        label.reshape(-1),
        valid=lvalid.reshape(-1),
        agent=agent.reshape(-1),
        capacity=capacity,
    )


def segment_pairs(
    features_a: jax.Array,
    features_b: jax.Array,
    labels: PairLabels | jax.Array,
    *,
    mask_a: jax.Array | None = None,
    mask_b: jax.Array | None = None,
    weight: jax.Array | None = None,
    capacity: int | None = None,
) -> SegmentPairDataset:
    """Segment pairs ``[P, T, N, D]`` (``[P, T, D]`` is read as one agent, ``N = 1``)."""
    features_a, features_b = _f32(features_a), _f32(features_b)
    chex.assert_equal_shape([features_a, features_b])
    if features_a.ndim == 3:
        features_a, features_b = features_a[:, :, None], features_b[:, :, None]
        mask_a = None if mask_a is None else jnp.asarray(mask_a)[:, :, None]
        mask_b = None if mask_b is None else jnp.asarray(mask_b)[:, :, None]
    chex.assert_rank(features_a, 4)
    p = features_a.shape[0]
    mshape = features_a.shape[:3]
    mask_a = jnp.ones(mshape, bool) if mask_a is None else jnp.asarray(mask_a, bool)
    mask_b = jnp.ones(mshape, bool) if mask_b is None else jnp.asarray(mask_b, bool)
    chex.assert_shape([mask_a, mask_b], mshape)
    if isinstance(labels, PairLabels):
        label, valid = _f32(labels.label), jnp.asarray(labels.valid, bool)
    else:
        label, valid = _f32(labels), jnp.ones((p,), bool)
    weight = jnp.ones((p,), jnp.float32) if weight is None else _f32(weight)
    chex.assert_shape([label, valid, weight], (p,))
    ds = SegmentPairDataset(features_a, features_b, mask_a, mask_b, label, weight, valid)
    return ds if capacity is None else pad_to_capacity(ds, capacity)


def agent_ranking_dataset(
    features: jax.Array,
    pairs: PairLabels,
    *,
    valid: jax.Array | None = None,
    weight: jax.Array | None = None,
    capacity: int | None = None,
) -> AgentRankingDataset:
    """Per-step rankings: agent features ``[S, N, D]`` and ``teachers.agent_rankings``
    pair matrices ``[S, N, N]``. A step with no valid pair is invalid."""
    features = _f32(features)
    chex.assert_rank(features, 3)
    s, n, _ = features.shape
    label, pair_valid = _f32(pairs.label), jnp.asarray(pairs.valid, bool)
    chex.assert_shape([label, pair_valid], (s, n, n))
    pair_valid = pair_valid & ~jnp.eye(n, dtype=bool)
    step_valid = pair_valid.any((-1, -2))
    if valid is not None:
        step_valid = step_valid & jnp.asarray(valid, bool)
    weight = jnp.ones((s,), jnp.float32) if weight is None else _f32(weight)
    ds = AgentRankingDataset(features, label, pair_valid, weight, step_valid)
    return ds if capacity is None else pad_to_capacity(ds, capacity)


# ----- growing, selecting and splitting ----------------------------------------------------


def capacity(dataset: Any) -> int:
    return dataset.valid.shape[0]


def num_valid(dataset: Any) -> jax.Array:
    return dataset.valid.sum()


def insert(dataset: Any, items: Any, position: jax.Array | int) -> Any:
    """Write ``items`` (same kind, ``K`` rows) into rows ``position .. position + K - 1``
    (modulo the capacity: a ring buffer). Jittable with a traced ``position``."""
    cap = capacity(dataset)
    k = items.valid.shape[0]
    if k > cap:
        raise ValueError(f"cannot insert {k} items into a dataset of capacity {cap}")
    rows = (jnp.asarray(position, jnp.int32) + jnp.arange(k, dtype=jnp.int32)) % cap
    return jax.tree.map(lambda buf, new: buf.at[rows].set(new.astype(buf.dtype)), dataset, items)


def take(dataset: Any, index: jax.Array) -> Any:
    """Rows ``index`` of every leaf (a minibatch); ``index`` any integer shape ``[...]``."""
    return jax.tree.map(lambda x: x[index], dataset)


def with_valid(dataset: Any, valid: jax.Array) -> Any:
    return dataset.replace(valid=jnp.asarray(valid, bool))


def train_val_split(key: chex.PRNGKey, dataset: Any, val_fraction: float) -> tuple[Any, Any]:
    """Split the valid rows at random: ``floor(val_fraction * num_valid)`` go to validation.

    Both halves keep the full capacity; only their ``valid`` masks differ (disjoint, and
    their union is the input's mask), so neither triggers a recompile.
    """
    valid = dataset.valid
    u = jnp.where(valid, jax.random.uniform(key, valid.shape), 2.0)
    rank = jnp.argsort(jnp.argsort(u))
    n_val = jnp.floor(val_fraction * valid.sum()).astype(jnp.int32)
    is_val = valid & (rank < n_val)
    return with_valid(dataset, valid & ~is_val), with_valid(dataset, is_val)

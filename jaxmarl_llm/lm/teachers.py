"""Scripted teachers: the papers' heuristic labelers, vectorized in JAX, with noise.

A scripted teacher answers from the true state: each method supplies a value function
(a ranking heuristic such as LCA's "human ranking-heuristic function", or DPM's scripted
teacher scoring a segment by its return and each agent by its contribution). This module
turns those values into the answers a noisy labeler would give, with the B-Pref error
models (Lee et al., 2021):

- ``beta`` (Boltzmann rationality, "Stoc"): P(a > b) = sigmoid(beta * (v_a - v_b));
  ``beta=inf`` is a perfectly rational teacher;
- ``mistake`` ("Mistake"): a decided answer is flipped with this probability;
- ``tie`` ("Equal"): answers "equal" with this probability, and always when
  ``|v_a - v_b| <= equal_margin``;
- ``skip`` ("Skip"): abstains with this probability, and always when both values are
  below ``skip_below`` (neither item is informative);
- ``gamma`` ("Myopic", segments only): step ``t`` of a length-``T`` segment is weighted
  by ``gamma ** (T - 1 - t)`` so late steps count more.

Labels follow the Bradley-Terry convention: ``label = P(a preferred)`` in {1, 0.5, 0},
with ``valid=False`` where the teacher abstained. Every function is pure and jittable.
"""

from __future__ import annotations

import chex
import jax
import jax.numpy as jnp
from flax import struct


@struct.dataclass
class TeacherNoise:
    """B-Pref error model. The default is a perfect teacher."""

    mistake: float = 0.0
    skip: float = 0.0
    tie: float = 0.0
    beta: float = float("inf")
    equal_margin: float = 0.0
    skip_below: float = float("-inf")
    gamma: float = 1.0

    def validate(self) -> TeacherNoise:
        for name in ("mistake", "skip", "tie"):
            p = getattr(self, name)
            if not 0.0 <= float(p) <= 1.0:
                raise ValueError(f"TeacherNoise.{name} must be a probability in [0, 1], got {p}")
        if float(self.skip) + float(self.tie) > 1.0:
            raise ValueError(f"TeacherNoise.skip + tie must be <= 1, got {self.skip} + {self.tie}")
        if not float(self.beta) > 0.0:
            raise ValueError(f"TeacherNoise.beta must be > 0 (inf = rational), got {self.beta}")
        if float(self.equal_margin) < 0.0:
            raise ValueError(f"TeacherNoise.equal_margin must be >= 0, got {self.equal_margin}")
        if not 0.0 < float(self.gamma) <= 1.0:
            raise ValueError(f"TeacherNoise.gamma must be in (0, 1], got {self.gamma}")
        return self

    @classmethod
    def with_accuracy(cls, accuracy: float, **kwargs) -> TeacherNoise:
        """A teacher that answers correctly with probability ``accuracy`` (flip otherwise)."""
        return cls(mistake=1.0 - accuracy, **kwargs).validate()


@struct.dataclass
class PairLabels:
    """Answers to pairwise queries: ``label = P(a preferred)`` and whether one was given."""

    label: jax.Array  # [...] float32 in {0, 0.5, 1}
    valid: jax.Array  # [...] bool, False where the teacher skipped


def pair_preferences(
    key: chex.PRNGKey, value_a: jax.Array, value_b: jax.Array, noise: TeacherNoise
) -> PairLabels:
    """One noisy answer per pair ``(a, b)`` from the teacher's values of each item."""
    chex.assert_equal_shape([value_a, value_b])
    value_a = value_a.astype(jnp.float32)
    value_b = value_b.astype(jnp.float32)
    k_pref, k_flip, k_kind = jax.random.split(key, 3)
    diff = value_a - value_b
    # Rational teacher: a strict preference; Boltzmann: sampled with sigmoid odds.
    rational = jnp.isinf(noise.beta)
    boltzmann = jax.nn.sigmoid(jnp.where(rational, 1.0, noise.beta) * diff)
    p_a = jnp.where(rational, (diff > 0).astype(jnp.float32), boltzmann)
    prefers_a = jax.random.uniform(k_pref, diff.shape) < p_a
    flipped = jax.random.uniform(k_flip, diff.shape) < noise.mistake
    prefers_a = jnp.logical_xor(prefers_a, flipped)
    # One uniform draw decides skip / tie / answer so the rates are exact and exclusive.
    u = jax.random.uniform(k_kind, diff.shape)
    skipped = (u < noise.skip) | ((value_a < noise.skip_below) & (value_b < noise.skip_below))
    tied = ((u >= noise.skip) & (u < noise.skip + noise.tie)) | (
        jnp.abs(diff) <= noise.equal_margin
    )
    label = jnp.where(tied, 0.5, prefers_a.astype(jnp.float32))
    return PairLabels(label=label, valid=~skipped)


def repeated_pair_preferences(
    key: chex.PRNGKey,
    value_a: jax.Array,
    value_b: jax.Array,
    noise: TeacherNoise,
    num_queries: int,
) -> tuple[jax.Array, jax.Array]:
    """Ask each pair ``num_queries`` times; aggregate into a confidence (LCA section 4.3).

    Returns ``(confidence, num_answers)``: the mean label over the answers that were given
    (``P(a preferred)`` estimated by majority vote with ties as half votes; 0.5 where no
    answer was given) and how many answers were given, ``[...]`` each.
    """
    keys = jax.random.split(key, num_queries)
    answers = jax.vmap(lambda k: pair_preferences(k, value_a, value_b, noise))(keys)
    valid = answers.valid.astype(jnp.float32)
    count = valid.sum(0)
    confidence = jnp.where(count > 0, (answers.label * valid).sum(0) / jnp.maximum(count, 1.0), 0.5)
    return confidence, count.astype(jnp.int32)


def segment_values(rewards: jax.Array, noise: TeacherNoise) -> jax.Array:
    """A teacher's value of reward segments ``[..., T]``: (myopically) discounted sum."""
    length = rewards.shape[-1]
    weights = noise.gamma ** jnp.arange(length - 1, -1, -1, dtype=jnp.float32)
    return (rewards.astype(jnp.float32) * weights).sum(-1)


def segment_preferences(
    key: chex.PRNGKey, rewards_a: jax.Array, rewards_b: jax.Array, noise: TeacherNoise
) -> PairLabels:
    """Trajectory-segment comparisons (DPM's scripted teacher) from per-step rewards."""
    return pair_preferences(
        key, segment_values(rewards_a, noise), segment_values(rewards_b, noise), noise
    )


def agent_rankings(key: chex.PRNGKey, scores: jax.Array, noise: TeacherNoise) -> PairLabels:
    """Rank the agents ``[..., N]`` of each step by score, as the teacher would.

    The ranking is returned decomposed into its ordered pairs (DPM eq. 6-8): entry
    ``[..., i, j]`` answers "does agent i contribute more than agent j" with the same noise
    model as :func:`pair_preferences`. The diagonal is invalid.
    """
    n = scores.shape[-1]
    s_i = scores[..., :, None]
    s_j = scores[..., None, :]
    s_i, s_j = jnp.broadcast_arrays(s_i, s_j)
    upper = jnp.triu(jnp.ones((n, n), bool), k=1)
    answers = pair_preferences(key, s_i, s_j, noise)
    # Ask each unordered pair once and mirror it, so the matrix is a consistent answer.
    label = jnp.where(upper, answers.label, 1.0 - jnp.swapaxes(answers.label, -1, -2))
    valid = jnp.where(upper, answers.valid, jnp.swapaxes(answers.valid, -1, -2))
    valid = valid & ~jnp.eye(n, dtype=bool)
    return PairLabels(label=label, valid=valid)


def ranks_from_pairs(pairs: PairLabels) -> jax.Array:
    """Dense ranks ``[..., N]`` (0 = best, ties share a rank) from a pair matrix.

    An agent's rank is the number of agents that beat it outright; with a consistent
    (noise-free) matrix this is the standard competition ranking.
    """
    beaten_by = ((pairs.label < 0.5) & pairs.valid).sum(-1)
    return beaten_by.astype(jnp.int32)

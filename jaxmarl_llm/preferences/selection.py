"""Which queries to send to the teacher: uniform, ensemble disagreement, Kendall-tau consensus.

Every selector returns ``(index [k], mask [k])``: ``k`` (static) candidate indices and
which of them are real picks (``False`` only when fewer than ``k`` candidates qualify),
so a jitted collection loop always asks a fixed number of queries.

- :func:`select_uniform`: ``k`` valid candidates uniformly without replacement.
- :func:`select_top_k`: the ``k`` highest-scoring valid candidates, e.g. scored by
  :func:`preference_disagreement` (std over the ensemble of ``P[a > b]``, the B-Pref /
  PEBBLE "disagreement" sampling) or by ``-consensus``.
- :func:`select_mixed`: ``round(greedy_fraction * k)`` by score, the rest uniform from
  the others; interpolates the two with a (traced) fraction, e.g. from
  :func:`linear_schedule`.
- DPM appendix C: :func:`ensemble_rank_consensus` is the mean over all member pairs of
  Kendall's tau between the members' rankings of a step's agents (rank by predicted
  reward); :func:`trajectory_consensus` averages it over a trajectory's steps; a
  trajectory (or step) is a candidate when its consensus is *below a threshold* that
  decreases over iterations (:func:`select_below_threshold` with
  :func:`linear_schedule`).
"""

from __future__ import annotations

import itertools

import chex
import jax
import jax.numpy as jnp

from jaxmarl_llm.preferences.evaluation import kendall_tau


def _pick(priority: jax.Array, eligible: jax.Array, k: int) -> tuple[jax.Array, jax.Array]:
    """Top-``k`` of ``priority`` (``-inf`` for ineligible) and whether each pick is eligible."""
    if k > priority.shape[-1]:
        raise ValueError(f"cannot select k={k} from {priority.shape[-1]} candidates")
    _, index = jax.lax.top_k(jnp.where(eligible, priority, -jnp.inf), k)
    return index, eligible[index]


def select_uniform(key: chex.PRNGKey, valid: jax.Array, k: int) -> tuple[jax.Array, jax.Array]:
    """``k`` distinct valid candidates ``[M]``, uniformly at random."""
    return _pick(jax.random.uniform(key, valid.shape), valid.astype(bool), k)


def select_top_k(score: jax.Array, valid: jax.Array, k: int) -> tuple[jax.Array, jax.Array]:
    """The ``k`` valid candidates with the highest ``score`` ``[M]``."""
    return _pick(score.astype(jnp.float32), valid.astype(bool), k)


def select_mixed(
    key: chex.PRNGKey,
    score: jax.Array,
    valid: jax.Array,
    k: int,
    greedy_fraction: jax.Array | float,
) -> tuple[jax.Array, jax.Array]:
    """``round(greedy_fraction * k)`` top-scoring candidates, the rest uniform among the
    remaining valid ones (``greedy_fraction`` may be traced: no recompile as it changes)."""
    valid = valid.astype(bool)
    m = valid.shape[-1]
    n_greedy = jnp.round(jnp.clip(greedy_fraction, 0.0, 1.0) * k).astype(jnp.int32)
    order = jnp.argsort(-jnp.where(valid, score, -jnp.inf))
    rank = jnp.zeros((m,), jnp.int32).at[order].set(jnp.arange(m, dtype=jnp.int32))
    greedy = valid & (rank < n_greedy)
    # Greedy picks outrank every uniform one; among them, higher score first.
    priority = jnp.where(greedy, 2.0 + (m - rank) / m, jax.random.uniform(key, (m,)))
    return _pick(priority, valid, k)


def preference_disagreement(scores_a: jax.Array, scores_b: jax.Array) -> jax.Array:
    """Std over the ensemble axis 0 of ``P[a > b] = sigmoid(s_a - s_b)``: ``[E, ...] -> [...]``."""
    chex.assert_equal_shape([scores_a, scores_b])
    return jax.nn.sigmoid(scores_a - scores_b).std(0)


def ensemble_rank_consensus(rewards: jax.Array, agent_valid: jax.Array | None = None) -> jax.Array:
    """DPM's consensus of a step: mean Kendall tau over member pairs ``[E, ..., N] -> [...]``.

    Each member ranks the step's agents by its predicted rewards; Kendall's tau-b is taken
    for every unordered pair of members and averaged. A pair in which a member ranks all
    agents equal (tau undefined) counts as agreement (1): no agent order is in doubt.
    With one member the consensus is 1.
    """
    e = rewards.shape[0]
    pairs = list(itertools.combinations(range(e), 2))
    if not pairs:
        return jnp.ones(rewards.shape[1:-1], jnp.float32)
    i, j = (jnp.asarray(ix) for ix in zip(*pairs, strict=True))
    taus = kendall_tau(rewards[i], rewards[j], agent_valid)  # [pairs, ...]
    return jnp.nan_to_num(taus, nan=1.0).mean(0)


def trajectory_consensus(step_consensus: jax.Array, step_mask: jax.Array | None = None):
    """Mean consensus over a trajectory's steps: ``[..., T] -> [...]`` (masked)."""
    if step_mask is None:
        return step_consensus.mean(-1)
    w = step_mask.astype(jnp.float32)
    return (step_consensus * w).sum(-1) / jnp.maximum(w.sum(-1), 1.0)


def select_below_threshold(
    key: chex.PRNGKey,
    consensus: jax.Array,
    valid: jax.Array,
    k: int,
    threshold: jax.Array | float,
    fill: bool = False,
) -> tuple[jax.Array, jax.Array]:
    """DPM appendix C: candidates with ``consensus < threshold`` qualify; ``k`` of them are
    drawn uniformly. With fewer than ``k`` qualifying, the remaining slots are masked
    out, or with ``fill`` filled by the lowest-consensus valid candidates (mask True)."""
    valid = valid.astype(bool)
    below = valid & (consensus < threshold)
    u = jax.random.uniform(key, consensus.shape)
    if fill:
        # Qualifying candidates first (priority in [2, 3)), then by lowest consensus.
        priority = jnp.where(below, 2.0 + u, -jnp.clip(consensus, -1.0, 1.0))
        return _pick(priority, valid, k)
    return _pick(u, below, k)


def linear_schedule(step: jax.Array | int, start: float, end: float, horizon: int) -> jax.Array:
    """``start`` at ``step = 0`` moving linearly to ``end`` at ``step >= horizon``; for a
    decreasing consensus threshold or an increasing greedy fraction (traced ``step``)."""
    frac = jnp.clip(jnp.asarray(step, jnp.float32) / max(horizon, 1), 0.0, 1.0)
    return start + frac * (end - start)

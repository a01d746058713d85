"""Fit a reward-model ensemble to preference datasets in one jitted ``lax.scan``.

    model = RewardModel(hidden=(64, 64), ensemble_size=3)
    params = model.init(key, feature_dim)
    params, losses = fit(model, params, dataset, key, FitConfig(num_steps=500))

``dataset`` is one of the datasets of :mod:`jaxmarl_llm.preferences.datasets` or a tuple
of them; with several, the per-step loss is their sum (DPM eq. 3: L = L^T + L^A). Every
ensemble member trains on its own bootstrap resample (Poisson(1) weights over the valid
rows, drawn once per call) and draws its own minibatches (with replacement) each step,
so members differ in data as well as in initialisation. ``model`` and ``config`` are
static: a second call with the same shapes (any number of valid rows up to the
capacity, new labels, new key) reuses the compiled loop.
"""

from __future__ import annotations

import dataclasses
import functools
import math
from typing import Any

import jax
import jax.numpy as jnp
import optax

from jaxmarl_llm.preferences import losses
from jaxmarl_llm.preferences.datasets import (
    AgentRankingDataset,
    SegmentPairDataset,
    StatePairDataset,
    take,
)
from jaxmarl_llm.preferences.models import RewardModel


@dataclasses.dataclass(frozen=True)
class FitConfig:
    """Static training settings (hashable)."""

    num_steps: int = 1000
    batch_size: int = 256
    learning_rate: float = 1e-3
    weight_decay: float = 0.0
    max_grad_norm: float | None = None
    bootstrap: bool = True  # each member trains on its own Poisson bootstrap of the rows

    def optimizer(self) -> optax.GradientTransformation:
        opt = optax.adamw(self.learning_rate, weight_decay=self.weight_decay)
        if self.max_grad_norm is not None:
            opt = optax.chain(optax.clip_by_global_norm(self.max_grad_norm), opt)
        return opt


# ----- per-dataset losses for one ensemble member ---------------------------------------


def dataset_loss(model: RewardModel, member_params: Any, batch: Any) -> jax.Array:
    """The Bradley-Terry loss of one member (params leaves ``[G, ...]``) on ``batch``."""
    if isinstance(batch, StatePairDataset):
        s_a = model.apply_member(member_params, batch.features_a, batch.agent)
        s_b = model.apply_member(member_params, batch.features_b, batch.agent)
        return losses.state_pair_loss(s_a, s_b, batch.label, batch.valid, batch.weight)
    if isinstance(batch, SegmentPairDataset):
        agent = jnp.arange(batch.features_a.shape[-2], dtype=jnp.int32)
        r_a = model.apply_member(member_params, batch.features_a, agent)  # [B, T, N]
        r_b = model.apply_member(member_params, batch.features_b, agent)
        return losses.segment_pair_loss(
            r_a, r_b, batch.label, batch.mask_a, batch.mask_b, batch.valid, batch.weight
        )
    if isinstance(batch, AgentRankingDataset):
        agent = jnp.arange(batch.features.shape[-2], dtype=jnp.int32)
        r = model.apply_member(member_params, batch.features, agent)  # [B, N]
        return losses.agent_ranking_loss(
            r, batch.label, batch.pair_valid, batch.valid, batch.weight
        )
    raise TypeError(f"not a preference dataset: {type(batch).__name__}")


def _as_tuple(datasets) -> tuple:
    return tuple(datasets) if isinstance(datasets, tuple | list) else (datasets,)


@functools.partial(jax.jit, static_argnames=("model",))
def ensemble_loss(model: RewardModel, params: Any, datasets: Any) -> jax.Array:
    """Full-dataset loss of every member ``[E]`` (summed over datasets; no bootstrap)."""
    datasets = _as_tuple(datasets)
    per_member = lambda p: sum(dataset_loss(model, p, d) for d in datasets)
    return jax.vmap(per_member)(params)


# ----- the training loop ---------------------------------------------------------------


# CDF of Poisson(1) at 0..9 (the tail beyond 10 has probability 1e-8).
_POISSON1_CDF = tuple(
    sum(math.exp(-1.0) / math.factorial(j) for j in range(i + 1)) for i in range(10)
)


def _poisson1(key: jax.Array, shape: tuple[int, ...]) -> jax.Array:
    """Poisson(1) counts by inverting the CDF (``jax.random.poisson`` compiles slowly)."""
    u = jax.random.uniform(key, shape)
    return jnp.searchsorted(jnp.asarray(_POISSON1_CDF, jnp.float32), u).astype(jnp.float32)


def _sampling_cdf(key: jax.Array, valid: jax.Array, num_members: int, bootstrap: bool):
    """Per-member cumulative sampling weights ``[E, C]`` over the rows."""
    w = jnp.broadcast_to(valid.astype(jnp.float32), (num_members, valid.shape[0]))
    if bootstrap:
        counts = _poisson1(key, w.shape)
        boot = w * counts
        # A member whose resample came out empty (tiny datasets) falls back to every row.
        w = jnp.where(boot.sum(-1, keepdims=True) > 0, boot, w)
    return jnp.cumsum(w, -1)


def _sample_rows(u: jax.Array, cdf: jax.Array) -> jax.Array:
    """Rows drawn with probability proportional to the weights, from uniforms ``u`` [B]."""
    r = cdf[-1] * (1.0 - u)  # in (0, total]
    return jnp.minimum(jnp.searchsorted(cdf, r, side="left"), cdf.shape[0] - 1)


@functools.partial(jax.jit, static_argnames=("model", "config"))
def fit(
    model: RewardModel,
    params: Any,
    datasets: Any,
    key: jax.Array,
    config: FitConfig = FitConfig(),
) -> tuple[Any, jax.Array]:
    """Train every ensemble member with Adam(W) for ``config.num_steps`` minibatch steps.

    Returns ``(params, losses)``: the trained parameters (same structure as ``params``)
    and the minibatch loss of every step and member ``[num_steps, E]``.
    """
    datasets = _as_tuple(datasets)
    num_members = jax.tree.leaves(params)[0].shape[0]
    opt = config.optimizer()
    opt_state = jax.vmap(opt.init)(params)
    key_boot, key_steps = jax.random.split(key)
    boot_keys = jax.random.split(key_boot, len(datasets))
    cdfs = tuple(
        _sampling_cdf(k, d.valid, num_members, config.bootstrap)
        for k, d in zip(boot_keys, datasets, strict=True)
    )

    def member_step(member_params, member_opt_state, member_u, member_cdfs):
        batches = tuple(
            take(d, _sample_rows(u, c))
            for d, u, c in zip(datasets, member_u, member_cdfs, strict=True)
        )

        def loss_fn(p):
            return sum(dataset_loss(model, p, b) for b in batches)

        loss, grads = jax.value_and_grad(loss_fn)(member_params)
        updates, member_opt_state = opt.update(grads, member_opt_state, member_params)
        return optax.apply_updates(member_params, updates), member_opt_state, loss

    def step(carry, step_key):
        params, opt_state = carry
        # One draw per step for every member and dataset (a single RNG call in the loop
        # body keeps XLA:CPU compile time down).
        u = jax.random.uniform(step_key, (num_members, len(datasets), config.batch_size))
        params, opt_state, loss = jax.vmap(member_step)(params, opt_state, u, cdfs)
        return (params, opt_state), loss

    step_keys = jax.random.split(key_steps, config.num_steps)
    (params, _), loss_history = jax.lax.scan(step, (params, opt_state), step_keys)
    return params, loss_history

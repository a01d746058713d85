"""Policy-gradient pieces as small pure functions: GAE and the PPO losses."""

from __future__ import annotations

import jax
import jax.numpy as jnp


def gae(
    rewards: jax.Array,
    values: jax.Array,
    dones: jax.Array,
    last_value: jax.Array,
    gamma: float,
    gae_lambda: float,
) -> tuple[jax.Array, jax.Array]:
    """Generalised advantage estimation over time-major arrays.

    ``rewards``, ``values``: ``[T, ...]``; ``dones[t]`` says the episode ended after
    the action at ``t`` (no bootstrap through it); ``last_value``: ``[...]``, the value
    of the observation after the last step. Returns ``(advantages, value targets)``.
    """
    dones = jnp.broadcast_to(dones, rewards.shape).astype(rewards.dtype)
    next_values = jnp.concatenate([values[1:], last_value[None]], axis=0)
    not_done = 1.0 - dones
    deltas = rewards + gamma * next_values * not_done - values

    def backward(carry, x):
        delta, nd = x
        carry = delta + gamma * gae_lambda * nd * carry
        return carry, carry

    _, adv = jax.lax.scan(
        backward, jnp.zeros_like(last_value), (deltas, not_done), reverse=True, unroll=16
    )
    return adv, adv + values


def clipped_policy_loss(
    log_prob: jax.Array, old_log_prob: jax.Array, advantages: jax.Array, clip_eps: float
) -> tuple[jax.Array, dict]:
    """PPO's clipped surrogate, negated for minimisation, with KL/clip-fraction stats."""
    log_ratio = log_prob - old_log_prob
    ratio = jnp.exp(log_ratio)
    unclipped = ratio * advantages
    clipped = jnp.clip(ratio, 1.0 - clip_eps, 1.0 + clip_eps) * advantages
    loss = -jnp.minimum(unclipped, clipped).mean()
    stats = {
        "approx_kl": ((ratio - 1.0) - log_ratio).mean(),
        "clip_frac": (jnp.abs(ratio - 1.0) > clip_eps).mean(),
    }
    return loss, stats


def value_loss(
    value: jax.Array, old_value: jax.Array, targets: jax.Array, clip_eps: float, clip: bool = True
) -> jax.Array:
    """Half squared error to ``targets``; with ``clip`` the PPO2 pessimistic clipped form."""
    err = jnp.square(value - targets)
    if clip:
        clipped = old_value + jnp.clip(value - old_value, -clip_eps, clip_eps)
        err = jnp.maximum(err, jnp.square(clipped - targets))
    return 0.5 * err.mean()


def normalize(x: jax.Array, eps: float = 1e-8) -> jax.Array:
    return (x - x.mean()) / (x.std() + eps)

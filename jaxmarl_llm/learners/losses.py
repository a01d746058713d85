"""Policy-gradient pieces as small pure functions: GAE, n-step returns and the PPO
losses."""

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


def nstep_returns(
    rewards: jax.Array,
    dones: jax.Array,
    values: jax.Array,
    last_value: jax.Array,
    gamma: float,
    n: int,
) -> jax.Array:
    """``n``-step returns over time-major arrays (EPyMARL's ``q_nstep``):
    ``G_t = sum_{k<h} gamma^k r_{t+k} + gamma^h V_{t+h}`` with ``h = min(n, T - t)``, the
    sum stopped (no bootstrap) after a step that ends its episode.

    ``rewards``, ``values``: ``[T, ...]`` (``values``: the bootstrap critic's, e.g. a
    target critic); ``dones[t]``: the episode ended after the action at ``t``;
    ``last_value``: ``[...]``, the value of the observation after the last step.
    """
    if n < 1:
        raise ValueError(f"n-step returns need n >= 1, got {n}")
    T = rewards.shape[0]
    dones = jnp.broadcast_to(dones, rewards.shape).astype(rewards.dtype)
    pad = lambda x: jnp.concatenate([x, jnp.zeros((n, *x.shape[1:]), x.dtype)], axis=0)
    r, d = pad(rewards), pad(dones)
    v = pad(jnp.concatenate([values, last_value[None]], axis=0))  # V_0 .. V_T, then zeros
    t = jnp.arange(T).reshape(T, *([1] * (rewards.ndim - 1)))
    out = jnp.zeros_like(rewards)
    alive = jnp.ones_like(rewards)
    for k in range(n):
        within = t + k < T
        out = out + jnp.where(within, gamma**k * alive * r[k : k + T], 0.0)
        alive = alive * (1.0 - d[k : k + T])
        # the window of t ends after this step: n steps taken, or the rollout's end reached
        ends = within & ((k + 1 == n) | (t + k + 1 == T))
        out = out + jnp.where(ends, gamma ** (k + 1) * alive * v[k + 1 : k + 1 + T], 0.0)
    return out


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

"""TD targets and losses for value-based learners, as small pure functions.

Sequences are time-major ``[T, ...]``. ``next_values[t]`` is the bootstrap value of
the state reached after step ``t``; ``dones[t]`` says step ``t`` ended its episode,
in which case nothing is bootstrapped and step ``t + 1`` (if any) belongs to the next
episode of the same stored sequence.
"""

from __future__ import annotations

import chex
import jax
import jax.numpy as jnp

MASKED_Q = -1e9  # finite, so a masked max/argmax never produces inf - inf


def masked_argmax(q: jax.Array, avail: jax.Array) -> jax.Array:
    """Greedy legal action ``[...]`` from ``q`` [..., A] and a legal-action mask [..., A]."""
    chex.assert_equal_shape([q, avail])
    return jnp.argmax(jnp.where(avail, q, MASKED_Q), axis=-1).astype(jnp.int32)


def masked_max(q: jax.Array, avail: jax.Array) -> jax.Array:
    """Largest legal value ``[...]``."""
    chex.assert_equal_shape([q, avail])
    return jnp.max(jnp.where(avail, q, MASKED_Q), axis=-1)


def next_agent_values(
    q_target: jax.Array, q_online: jax.Array, avail: jax.Array, double_q: bool
) -> jax.Array:
    """Per-agent bootstrap utilities ``[...]`` at the next state, from ``[..., A]`` inputs.

    Double-Q: the online network picks the legal greedy action and the target network
    values it; otherwise the target network's legal max.
    """
    if double_q:
        a = masked_argmax(q_online, avail)
        return jnp.take_along_axis(q_target, a[..., None], axis=-1)[..., 0]
    return masked_max(q_target, avail)


def one_step_targets(
    rewards: jax.Array, dones: jax.Array, next_values: jax.Array, gamma: float
) -> jax.Array:
    """``y_t = r_t + gamma * (1 - done_t) * next_values[t]``, all ``[T, ...]``."""
    chex.assert_equal_shape([rewards, dones, next_values])
    return rewards + gamma * (1.0 - dones.astype(rewards.dtype)) * next_values


def lambda_returns(
    rewards: jax.Array, dones: jax.Array, next_values: jax.Array, gamma: float, lam: float
) -> jax.Array:
    """TD(lambda) returns ``[T, ...]``, truncated at the end of the sequence:

    ``G_{T-1} = r_{T-1} + gamma (1 - d_{T-1}) v_{T-1}`` and
    ``G_t = r_t + gamma (1 - d_t) ((1 - lam) v_t + lam G_{t+1})``, with ``v = next_values``.
    ``lam = 0`` gives the one-step targets.
    """
    chex.assert_equal_shape([rewards, dones, next_values])
    if rewards.shape[0] == 0:
        return rewards
    cont = gamma * (1.0 - dones.astype(rewards.dtype))

    def step(g_next, xs):
        r, c, v = xs
        g = r + c * ((1.0 - lam) * v + lam * g_next)
        return g, g

    # The last step has no G_{T}: seeding with v_{T-1} makes its mix collapse to v_{T-1}.
    _, g = jax.lax.scan(step, next_values[-1], (rewards, cont, next_values), reverse=True)
    return g


def sequence_targets(
    rewards: jax.Array,
    dones: jax.Array,
    next_values: jax.Array,
    gamma: float,
    lam: float | None = None,
) -> tuple[jax.Array, jax.Array]:
    """Targets and validity ``[T, ...]`` for a stored sequence of ``T`` steps.

    ``next_values`` [T - 1, ...] holds the bootstrap value of steps ``1..T-1`` (the
    sequence does not store what follows its last step). Steps ``0..T-2`` get one-step
    (``lam`` None) or TD(lambda) targets truncated at step ``T - 1``; the last step is
    valid only if it ended its episode, with target ``r_{T-1}``.
    """
    chex.assert_equal_shape([rewards, dones])
    chex.assert_axis_dimension(next_values, 0, rewards.shape[0] - 1)
    head_r, head_d = rewards[:-1], dones[:-1]
    if lam is None:
        head = one_step_targets(head_r, head_d, next_values, gamma)
    else:
        head = lambda_returns(head_r, head_d, next_values, gamma, lam)
    targets = jnp.concatenate([head, rewards[-1:]], axis=0)
    valid = jnp.concatenate([jnp.ones_like(head_d, bool), dones[-1:].astype(bool)], axis=0)
    return targets, valid


def masked_td_loss(
    q: jax.Array, targets: jax.Array, valid: jax.Array, count: jax.Array | None = None
) -> jax.Array:
    """Mean squared TD error over valid entries (targets are not differentiated); 0 if
    none. ``count`` replaces the number of valid entries as the divisor (a batch split
    over devices divides each part's sum by the whole batch's count)."""
    chex.assert_equal_shape([q, targets, valid])
    m = valid.astype(q.dtype)
    err = q - jax.lax.stop_gradient(targets)
    count = m.sum() if count is None else count
    return (m * err**2).sum() / jnp.maximum(count, 1.0)

"""The shaper a learner is given, and how its output becomes the training reward.

A shaper is a pure function ``apply(params, batch) -> [..., N]`` of a batch of
transitions. It runs inside the rollout scan (on-policy learners) or when a batch is
sampled from the replay buffer (off-policy learners), so a reward model whose
parameters change during training re-scores old transitions without a relabel pass.
Labels, trained reward-model parameters, lookup tables and embeddings all travel in
``params``; the function itself is fixed at trace time.

It sits below the learners and ``shaping/`` (which builds shapers by name and re-exports
these names): a learner reads only this contract.
"""

from __future__ import annotations

from collections.abc import Callable
from enum import Enum
from typing import Any

import chex
import jax
import jax.numpy as jnp
from flax import struct

from jaxmarl_llm.transitions import ALL_FIELDS, TransitionBatch


class CombineMode(str, Enum):
    """How the shaper's output meets the env reward."""

    add = "add"  # env_reward + coef * shaped
    replace = "replace"  # coef * shaped


@struct.dataclass
class Shaper:
    """A pure shaping function plus how its output combines with the env reward.

    ``apply``, ``fields``, ``mode`` and ``coef`` are static; ``params`` is a pytree
    that may change between training chunks (the learner carries it in its state).
    """

    apply: Callable[[Any, TransitionBatch], jax.Array] = struct.field(pytree_node=False)
    params: Any = None
    fields: tuple[str, ...] = struct.field(pytree_node=False, default=())
    mode: CombineMode = struct.field(pytree_node=False, default=CombineMode.add)
    coef: float = struct.field(pytree_node=False, default=1.0)
    name: str = struct.field(pytree_node=False, default="shaper")
    # host-side refit of ``params`` between chunks (shaping/feedback.py); None: fixed
    feedback: Any = struct.field(pytree_node=False, default=None)
    # Potential-based shapers whose ``apply`` is ``gamma * phi(s') - phi(s)`` (phi(s') = 0
    # where the episode ended), the same for every agent, may also give
    # ``potential(params, env_states) -> [...]`` (jaxmarl env states with leading shape
    # ``[...]``) and its ``gamma``. An on-policy rollout then carries phi of each step's
    # next state to the step after (``potential_shaping``): one phi per env step instead
    # of two, the same rewards.
    potential: Callable[[Any, Any], jax.Array] | None = struct.field(
        pytree_node=False, default=None
    )
    gamma: float = struct.field(pytree_node=False, default=1.0)

    def __post_init__(self):
        unknown = set(self.fields) - set(ALL_FIELDS)
        if unknown:
            raise ValueError(
                f"shaper {self.name!r} asks for unknown transition fields {sorted(unknown)}; "
                f"valid fields: {list(ALL_FIELDS)}"
            )


def shaped_reward(shaper: Shaper, params: Any, batch: TransitionBatch) -> jax.Array:
    """Per-agent training reward ``[..., N]`` for ``batch`` under ``shaper``."""
    bonus = shaper.apply(params, batch)
    chex.assert_equal_shape([bonus, batch.reward])
    return combine(shaper, batch.reward, bonus)


def combine(shaper: Shaper, reward: jax.Array, bonus: jax.Array) -> jax.Array:
    """The training reward from the env reward and the shaper's output (same shape)."""
    bonus = bonus.astype(jnp.float32)
    if shaper.mode == CombineMode.replace:
        return shaper.coef * bonus
    return reward + shaper.coef * bonus


def potential_shaping(
    shaper: Shaper, reward: jax.Array, done: jax.Array, phi: jax.Array, phi_after: jax.Array
) -> jax.Array:
    """Training reward ``[..., N]`` of a potential-based ``shaper`` from the potentials a
    rollout carries: ``phi`` of the step's state and ``phi_after`` of the state the env
    moved on to (the reset state where ``done``, whose phi the terminal state's 0
    replaces): ``F = gamma * phi(s') - phi(s)``, as ``shaper.apply`` computes it."""
    return combine(shaper, reward, potential_difference(shaper.gamma, done, phi, phi_after, reward))


def potential_difference(
    gamma: float, done: jax.Array, phi: jax.Array, phi_next: jax.Array, reward: jax.Array
) -> jax.Array:
    """Potential-based shaping ``F = gamma * phi(s') - phi(s)`` ``[..., N]`` (the same for
    every agent of ``reward [..., N]``), with ``phi(s') = 0`` where the episode ended."""
    f = gamma * jnp.where(done, 0.0, phi_next) - phi
    return jnp.broadcast_to(f[..., None], reward.shape)


def team_reward(reward: jax.Array, how: str = "sum") -> jax.Array:
    """Per-agent rewards ``[..., N]`` -> team reward ``[...]`` for value-decomposition learners."""
    if how == "sum":
        return reward.sum(-1)
    if how == "mean":
        return reward.mean(-1)
    if how == "first":  # env already gives every agent the same team reward
        return reward[..., 0]
    raise ValueError(f"unknown team reward reduction {how!r}; valid: sum, mean, first")

"""Running mean and variance of a stream of batches (Chan et al.'s parallel merge).

What EPyMARL's ``standardise_rewards`` keeps: each training batch's rewards update the
moments, then the rewards are standardized with the updated ones. Pure and jittable;
the state lives in the learner's train state.
"""

from __future__ import annotations

import jax
import jax.numpy as jnp
from flax import struct

from jaxmarl_llm.learners.shards import SINGLE, DataShards

EPSILON = 1e-8


class RunningMeanStd(struct.PyTreeNode):
    mean: jax.Array  # []
    var: jax.Array  # []
    count: jax.Array  # [] float, starts at a tiny positive value (no division by 0)

    @classmethod
    def create(cls) -> RunningMeanStd:
        return cls(jnp.zeros(()), jnp.ones(()), jnp.asarray(1e-4))


def update_running_stats(
    stats: RunningMeanStd, x: jax.Array, shards: DataShards = SINGLE
) -> RunningMeanStd:
    """The moments of everything seen so far plus every element of ``x`` (of every
    shard's ``x``)."""
    batch_mean, batch_var = shards.moments(x)
    batch_count = jnp.asarray(x.size * shards.count, jnp.float32)
    delta = batch_mean - stats.mean
    total = stats.count + batch_count
    mean = stats.mean + delta * batch_count / total
    m2 = (
        stats.var * stats.count
        + batch_var * batch_count
        + delta**2 * stats.count * batch_count / total
    )
    return RunningMeanStd(mean, m2 / total, total)


def standardize(stats: RunningMeanStd, x: jax.Array) -> jax.Array:
    return (x - stats.mean) / jnp.sqrt(stats.var + EPSILON)

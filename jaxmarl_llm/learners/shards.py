"""Data shards: a learner's envs split over the devices of a mesh's ``data`` axis.

A learner built with ``DataShards(count)`` is the program one shard runs, under
``shard_map`` over the ``data`` axis (or ``vmap`` with that axis name, for tests on one
device): it steps ``num_envs / count`` envs, keeps its share of any replay buffer, and
joins the others through the collectives below: gradients, advantage and reward
statistics and metrics are averaged or summed over shards, so parameters and optimiser
states stay identical on every shard. Random draws that must differ between shards
(env steps, actions, minibatch shuffles, replay samples) take ``key``'s per-shard key.

With ``count == 1`` every method is the identity, so a learner built without shards
computes exactly what it did before sharding existed.
"""

from __future__ import annotations

from dataclasses import dataclass

import jax
import jax.numpy as jnp

from jaxmarl_llm.errors import ConfigError
from jaxmarl_llm.learners.losses import normalize

DATA_AXIS = "data"


@dataclass(frozen=True)
class DataShards:
    count: int = 1

    @property
    def active(self) -> bool:
        return self.count > 1

    def local(self, total: int, key: str) -> int:
        """This shard's part of ``total`` (the config value ``algo.<key>``), or a
        ConfigError where ``total`` does not split evenly."""
        if total % self.count:
            raise ConfigError(
                f"bad value for config key 'algo.{key}': {total} does not split over the "
                f"mesh's {self.count} data shards (devices on the data axis); make it a "
                "multiple, or set mesh.devices / mesh.seeds"
            )
        return total // self.count

    def key(self, key: jax.Array) -> jax.Array:
        """A key of this shard's own: ``key`` folded with the shard's index."""
        if not self.active:
            return key
        return jax.random.fold_in(key, jax.lax.axis_index(DATA_AXIS))

    def mean(self, tree):
        """The mean over shards of every leaf (gradients, equal-size batch means)."""
        return jax.lax.pmean(tree, DATA_AXIS) if self.active else tree

    def sum(self, tree):
        """The sum over shards of every leaf (counts, weighted sums)."""
        return jax.lax.psum(tree, DATA_AXIS) if self.active else tree

    def moments(self, x: jax.Array) -> tuple[jax.Array, jax.Array]:
        """Mean and (population) variance of every element of ``x`` on every shard
        (each shard's ``x`` has the same size)."""
        if not self.active:
            return x.mean(), x.var()
        mean = self.mean(x.mean())
        return mean, self.mean(jnp.mean(jnp.square(x - mean)))

    def std(self, x: jax.Array) -> jax.Array:
        """The standard deviation of every element of ``x`` on every shard."""
        return x.std() if not self.active else jnp.sqrt(self.moments(x)[1])

    def normalize(self, x: jax.Array, eps: float = 1e-8) -> jax.Array:
        """``x`` standardised by the moments of all shards' ``x`` (``losses.normalize``
        on one shard)."""
        if not self.active:
            return normalize(x, eps)
        mean, var = self.moments(x)
        return (x - mean) / (jnp.sqrt(var) + eps)


SINGLE = DataShards(1)

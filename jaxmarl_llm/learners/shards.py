"""Data shards: a learner's envs split over the devices of a mesh's ``data`` axis.

A learner built with ``DataShards(count)`` is the program one shard runs, under
``shard_map`` over the ``data`` axis (or ``vmap`` with that axis name, for tests on one
device): it steps ``num_envs / count`` envs, keeps its share of any replay buffer, and
joins the others through the collectives below: gradients, advantage and reward
statistics and metrics are averaged or summed over shards, so parameters and optimiser
states stay identical on every shard. Random draws that must differ between shards
(env steps, actions, minibatch shuffles, replay samples) take ``key``'s per-shard key.

Shards are stratified by default: each shard draws its own env keys and shuffles only
its own envs into minibatches, which needs no more than the collectives above. With
``exact`` they compute what one device computes for all their envs: every shard draws the
same keys, takes its slice of the env keys and of the action noise drawn for all envs
(``env_keys``, ``sample_and_log_prob``), and the learner gathers each rollout so that
every global minibatch's units split over the shards (``gather``, ``local_part``). The
results then differ from one device's only in float summation order.

With ``count == 1`` every method is the identity, so a learner built without shards
computes exactly what it did before sharding existed.
"""

from __future__ import annotations

from dataclasses import dataclass

import distrax
import jax
import jax.numpy as jnp

from jaxmarl_llm.errors import ConfigError
from jaxmarl_llm.learners.losses import normalize

DATA_AXIS = "data"


@dataclass(frozen=True)
class DataShards:
    count: int = 1
    exact: bool = False  # compute what one device computes (see the module docstring)

    @property
    def active(self) -> bool:
        return self.count > 1

    @property
    def is_exact(self) -> bool:
        return self.exact and self.active

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
        """A key of this shard's own: ``key`` folded with the shard's index (``key``
        itself where exact: every shard then draws what one device draws)."""
        if not self.active or self.exact:
            return key
        return jax.random.fold_in(key, jax.lax.axis_index(DATA_AXIS))

    def local_part(self, x: jax.Array, axis: int) -> jax.Array:
        """This shard's run of ``count`` equal runs of ``x`` along ``axis``."""
        if not self.active:
            return x
        size = x.shape[axis] // self.count
        start = jax.lax.axis_index(DATA_AXIS) * size
        return jax.lax.dynamic_slice_in_dim(x, start, size, axis)

    def gather(self, x: jax.Array, axis: int) -> jax.Array:
        """Every shard's ``x`` joined along ``axis``, in shard order."""
        if not self.active:
            return x
        return jax.lax.all_gather(x, DATA_AXIS, axis=axis, tiled=True)

    # The draws below take this shard's key (what ``key`` returns) and give rows of this
    # shard's envs (axis 0): a stratified shard draws them from its own key; an exact one,
    # whose key every shard holds, takes its slice of one device's draw for all envs.
    def _draw(self, sample, key: jax.Array, shape: tuple[int, ...], axis: int = 0) -> jax.Array:
        """``sample(key, shape)``, ``shape[axis]`` this shard's rows."""
        if not self.is_exact:
            return sample(key, shape)
        whole = (*shape[:axis], shape[axis] * self.count, *shape[axis + 1 :])
        return self.local_part(sample(key, whole), axis)

    def env_keys(self, key: jax.Array, num_envs: int) -> jax.Array:
        """``jax.random.split(key, num_envs)`` for this shard's envs."""
        if not self.is_exact:
            return jax.random.split(key, num_envs)
        return self.local_part(jax.random.split(key, num_envs * self.count), 0)

    def uniform(self, key: jax.Array, shape: tuple[int, ...]) -> jax.Array:
        """``jax.random.uniform(key, shape)`` for this shard's rows (axis 0)."""
        return self._draw(jax.random.uniform, key, shape)

    def _gumbel_max(self, key: jax.Array, logits: jax.Array, axis: int) -> jax.Array:
        """``jax.random.categorical``'s draw (Gumbel noise, argmax over the last axis),
        ``logits.shape[axis]`` this shard's rows."""
        gumbel = lambda k, shape: jax.random.gumbel(k, shape, logits.dtype)
        return jnp.argmax(self._draw(gumbel, key, logits.shape, axis) + logits, axis=-1)

    def categorical(self, key: jax.Array, logits: jax.Array) -> jax.Array:
        """``jax.random.categorical(key, logits)`` (last axis) for this shard's rows
        (axis 0)."""
        if not self.is_exact:
            return jax.random.categorical(key, logits)
        return self._gumbel_max(key, logits, 0)

    def sample_and_log_prob(self, key: jax.Array, pi: distrax.Categorical):
        """``pi.sample_and_log_prob(seed=key)`` for this shard's rows (distrax's draw is
        ``jax.random.categorical``'s, with a leading sample axis)."""
        if not self.is_exact:
            return pi.sample_and_log_prob(seed=key)
        action = self._gumbel_max(key, pi.logits[None], 1)[0]
        valid = jnp.all(jnp.isfinite(pi.probs), axis=-1) & jnp.all(pi.probs >= 0, axis=-1)
        action = jnp.where(valid, action, -1).astype(pi.dtype)
        return action, pi.log_prob(action)

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

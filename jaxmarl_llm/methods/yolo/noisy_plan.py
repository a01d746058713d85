"""A planning function that is right with a set probability: the scripted rungs of the
label-source ladder (``planner: scripted_noisy``).

Each agent's task from the reference planning function is kept with probability
``accuracy`` and otherwise replaced by a uniformly drawn *other* task. The draw is keyed
on the env state itself (every leaf, the step counter included) and the agent's index,
so the noisy plan is a pure function of the state: the same state always gets the same
tasks, as a model's fixed planning function would, whether it is scored inside the
rollout scan or when a replay buffer samples the transition again later.
"""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np


def state_key(seed: int, state) -> jax.Array:
    """A PRNG key that is a function of ``seed`` and every value in the env ``state``
    (one state, no batch dimension): two polynomial hashes of its values, folded in."""
    words = []
    for leaf in jax.tree.leaves(state):
        leaf = jnp.asarray(leaf)
        if jnp.issubdtype(leaf.dtype, jnp.floating):
            leaf = jax.lax.bitcast_convert_type(leaf.astype(jnp.float32), jnp.uint32)
        words.append(leaf.astype(jnp.uint32).reshape(-1))
    words = jnp.concatenate(words)
    key = jax.random.PRNGKey(seed)
    for multiplier in _MULTIPLIERS:  # uint32 arithmetic wraps: a hash modulo 2**32
        powers = np.cumprod(np.full(words.shape[0], multiplier, np.uint64)) % 2**32
        key = jax.random.fold_in(key, (words * jnp.asarray(powers, jnp.uint32)).sum())
    return key


_MULTIPLIERS = (0x9E3779B1, 0x85EBCA77)  # odd: every power is invertible modulo 2**32


def corrupt_tasks(key: jax.Array, tasks: jax.Array, num_tasks: int, accuracy) -> jax.Array:
    """``tasks [N]`` with each entry kept with probability ``accuracy``, else replaced by
    one of the other ``num_tasks - 1`` tasks, uniformly; agent ``i`` draws from
    ``fold_in(key, i)``."""
    if num_tasks < 2:
        raise ValueError(f"a wrong task needs at least 2 tasks to choose from, got {num_tasks}")

    def one(i, task):
        k_keep, k_other = jax.random.split(jax.random.fold_in(key, i))
        keep = jax.random.uniform(k_keep) < accuracy
        # 1 .. num_tasks-1 steps around the circle of tasks: every other task equally likely
        other = (task + jax.random.randint(k_other, (), 1, num_tasks)) % num_tasks
        return jnp.where(keep, task, other).astype(tasks.dtype)

    return jax.vmap(one)(jnp.arange(tasks.shape[0]), tasks)


def noisy_planning(planning, num_tasks: int, accuracy: float, seed: int):
    """``state -> tasks [N]``: ``planning(state)`` corrupted as in :func:`corrupt_tasks`,
    keyed by :func:`state_key`."""
    if not 0.0 <= accuracy <= 1.0:
        raise ValueError(f"plan accuracy must be in [0, 1], got {accuracy}")

    def tasks(state) -> jax.Array:
        return corrupt_tasks(state_key(seed, state), planning(state), num_tasks, accuracy)

    return tasks

"""What every learner is: ``init`` a train state, ``update`` it once, repeat.

``make_train(config, env, shaper)`` in each algorithm module returns ``train(rng)``
(PureJaxRL style: all updates under one ``lax.scan``, vmappable over seeds). The
chunked runner uses the same ``init``/``update`` pair to run K updates per jitted
call and log, checkpoint and show progress between chunks.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from typing import Any, NamedTuple

import jax
import jax.numpy as jnp
from flax import struct

from jaxmarl_llm.learners.evaluation import GreedyPolicy
from jaxmarl_llm.learners.shards import SINGLE, DataShards


class TrainState(struct.PyTreeNode):
    """What every learner's train state holds for the layers above it; each learner's
    state extends it with its own fields (parameters, optimiser, buffers, carries).

    The runner vmaps ``Learner.init`` over seeds, jits ``Learner.update`` over chunks,
    checkpoints the whole state, and between chunks replaces ``shaper_params`` (a feedback
    round's refit) with ``state.replace(shaper_params=...)``; ``Learner.collect`` plays
    from ``env_state``. Nothing else of a state is read outside its learner.
    """

    env_state: Any  # ArrayEnvState [E]: the parallel envs, auto-resetting
    shaper_params: Any  # the shaper's parameters (Shaper.params), replaced between chunks
    rng: jax.Array  # the learner's key, split every update
    update_step: jax.Array  # [] int32, updates done


TRAIN_STATE_FIELDS = tuple(f.name for f in dataclasses.fields(TrainState))


def check_train_state(state: Any, algo: str) -> None:
    """A TypeError naming the learner whose state breaks the contract above."""
    if not isinstance(state, TrainState):
        missing = [f for f in TRAIN_STATE_FIELDS if not hasattr(state, f)]
        raise TypeError(
            f"algo {algo!r}: Learner.init returned a {type(state).__name__}, not a "
            f"learners.base.TrainState{f' (missing {missing})' if missing else ''}"
        )


class Learner(NamedTuple):
    init: Callable[[jax.Array], Any]  # rng -> train state (a pytree of arrays)
    update: Callable[[Any], tuple[Any, dict]]  # train state -> (train state, scalar metrics)
    num_updates: int
    env_steps_per_update: int  # summed over parallel envs, not agents
    # (state, key, steps) -> TransitionBatch [steps, E, ...] (``transitions.py``) of the
    # current policy from the learner's env states, state and next_state filled; the
    # train state is not changed. Online feedback (rewards refit during training) needs
    # it; None where not provided.
    collect: Callable[[Any, jax.Array, int], Any] | None = None
    # the deterministic policy, for greedy evaluation (``evaluation.make_evaluate``)
    policy: GreedyPolicy | None = None
    # built on data shards, each shard's state holds data of its own beyond its envs (a
    # replay buffer it alone fills), so a checkpoint resumes on the same shard count only
    shard_local_state: bool = False

    def train(self, rng: jax.Array) -> tuple[Any, dict]:
        """All updates in one scan: ``(final state, metrics stacked over updates)``."""

        def step(state, _):
            return self.update(state)

        return jax.lax.scan(step, self.init(rng), None, self.num_updates)


class LearnerParts:
    """What a learner class provides (every algorithm is one): ``init``, ``update``,
    ``collect`` and the greedy policy's ``greedy_carry`` / ``greedy_act`` (and, for a
    stochastic policy, ``sample_act``) as methods,
    ``num_updates`` and ``env_steps_per_update`` as attributes; ``learner()`` assembles
    them into the ``Learner`` the runner drives."""

    num_updates: int
    env_steps_per_update: int

    def learner(self) -> Learner:
        return Learner(
            init=self.init,
            update=self.update,
            num_updates=self.num_updates,
            env_steps_per_update=self.env_steps_per_update,
            collect=getattr(self, "collect", None),
            policy=GreedyPolicy(
                self.greedy_carry, self.greedy_act, getattr(self, "sample_act", None)
            ),
            shard_local_state=getattr(self, "shard_local_state", False),
        )


def run_chunk(learner: Learner, state: Any, num_updates: int) -> tuple[Any, dict]:
    """``num_updates`` updates in one scan, metrics stacked: what the runner jits."""
    return jax.lax.scan(lambda s, _: learner.update(s), state, None, num_updates)


def episode_metrics(
    done: jax.Array,
    info: dict,
    has_won: bool,
    return_reduction: str = "mean",
    shards: DataShards = SINGLE,
) -> dict:
    """Mean over the episodes that ended in a rollout (on every data shard).

    ``done`` [T, E]; ``info['episode_return']`` [T, E, N] (per agent, env reward);
    ``info['episode_length']`` [T, E]; ``info['won']`` [T, E]; the env's episode
    statistics ``info['stats']`` {name: [T, E]} where it has them (logged as
    ``stat_<name>``). The episode return is
    the mean (or, with ``return_reduction='sum'``, the sum) over agents of each
    agent's return; ``ArrayEnv.return_reduction`` says which convention the env's
    published numbers use. Metrics are NaN when no episode ended.
    """
    d = done.astype(jnp.float32)
    reduce = {"mean": jnp.mean, "sum": jnp.sum}[return_reduction]
    per_episode = reduce(info["episode_return"], axis=-1)
    n = shards.sum(d.sum())
    safe = jnp.maximum(n, 1.0)
    mean = lambda x: jnp.where(n > 0, shards.sum((x * d).sum()) / safe, jnp.nan)
    out = {
        "episode_return": mean(per_episode),
        "episode_length": mean(info["episode_length"]),
        "episodes": n,
    }
    if has_won:
        out["win_rate"] = mean(info["won"].astype(jnp.float32))
    for name, value in info.get("stats", {}).items():
        out[f"stat_{name}"] = mean(value)
    return out

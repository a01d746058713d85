"""Evaluation on fresh episodes: the learner's greedy policy, or its sampled one.

Training curves show the *exploring* policy (sampled PPO actions, epsilon-greedy QMIX,
Gumbel-sampled MADDPG); papers report test episodes of the greedy policy (PyMARL's
``test_nepisode``, EPyMARL's evaluation returns). ``make_evaluate`` plays
``num_episodes`` parallel envs from fresh resets until each has finished its first
episode, so every episode counts once and short episodes are not over-represented
(counting every episode that ends within a fixed window would favour them, e.g. quick
SMAX wins). It runs under ``jit`` and ``vmap`` (over seeds) and leaves the train state
as it was. ``sampled=True`` plays the stochastic policy instead, as EPyMARL's
actor-critic test episodes do (its action selector samples in test mode): the figure that
EPyMARL-based papers report for MAPPO and IPPO.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, NamedTuple

import jax
import jax.numpy as jnp
from flax import struct

from envs.array_env import ArrayEnv, ArrayEnvState
from jaxmarl_llm.learners.acting import step_envs

EVAL_METRICS = ("eval_return", "eval_length", "eval_win_rate", "eval_episodes")


class GreedyPolicy(NamedTuple):
    """A learner's deterministic policy, and its stochastic one where it has one.

    ``init_carry(train_state, num_envs)`` gives the recurrent carry for fresh episodes
    (``None`` for feed-forward policies); ``act(train_state, carry, obs [E, N, D],
    avail [E, N, A], first [E]) -> (carry, actions [E, N])`` picks the most likely
    legal action of every agent (``first`` marks observations that start an episode);
    ``sample`` takes the same arguments and a key last, and draws every agent's action
    from its policy (None for value-based learners, whose test policy is greedy).
    """

    init_carry: Callable[[Any, int], Any]
    act: Callable[[Any, Any, jax.Array, jax.Array, jax.Array], tuple[Any, jax.Array]]
    sample: Callable[..., tuple[Any, jax.Array]] | None = None


@struct.dataclass
class _Episodes:
    obs: jax.Array  # [E, N, D]
    env_state: ArrayEnvState
    avail: jax.Array  # [E, N, A]
    carry: Any
    first: jax.Array  # [E]
    finished: jax.Array  # [E] the env's first episode has ended
    episode_return: jax.Array  # [E] of the first episode, reduced over agents
    length: jax.Array  # [E]
    won: jax.Array  # [E]
    stats: dict  # {name: [E]} the env's episode statistics ({} where it has none)
    t: jax.Array  # [] steps taken
    key: jax.Array


class EpisodeEnds(NamedTuple):
    """The first episode of each of ``E`` parallel envs, as it ended."""

    episode_return: jax.Array  # [E] env reward, reduced over agents
    length: jax.Array  # [E]
    won: jax.Array  # [E] bool (False where the env reports no wins)
    finished: jax.Array  # [E] bool: the episode ended within ``max_steps`` steps
    stats: dict | None = None  # {name: [E]} the env's episode statistics, where it has them


def make_play_episodes(
    env: ArrayEnv, policy: GreedyPolicy, num_episodes: int, max_steps: int, sampled: bool = False
) -> Callable[[Any, jax.Array], EpisodeEnds]:
    """``play(train_state, key) -> EpisodeEnds`` of ``num_episodes`` greedy episodes (of
    the sampled policy with ``sampled``)."""
    if num_episodes <= 0 or max_steps <= 0:
        raise ValueError(
            f"evaluation needs num_episodes > 0 and max_steps > 0, got {num_episodes}, {max_steps}"
        )
    if sampled and policy.sample is None:
        raise ValueError("sampled evaluation needs a policy that samples (policy.sample)")
    E = int(num_episodes)
    reduce = {"mean": jnp.mean, "sum": jnp.sum}[env.return_reduction]

    def play(train_state, key: jax.Array) -> EpisodeEnds:
        r_reset, r_steps = jax.random.split(key)
        obs, env_state = jax.vmap(env.reset)(jax.random.split(r_reset, E))
        start = _Episodes(
            obs=obs,
            env_state=env_state,
            avail=jax.vmap(env.avail_actions)(env_state),
            carry=policy.init_carry(train_state, E),
            first=jnp.ones((E,), bool),
            finished=jnp.zeros((E,), bool),
            episode_return=jnp.zeros((E,), jnp.float32),
            length=jnp.zeros((E,), jnp.int32),
            won=jnp.zeros((E,), bool),
            stats={
                k: jnp.zeros((E,), jnp.float32)
                for k in jax.eval_shape(
                    lambda s: env.episode_stats(jax.tree.map(lambda x: x[0], s)),
                    env_state.env_state,
                )
            },
            t=jnp.zeros((), jnp.int32),
            key=r_steps,
        )

        def running(c: _Episodes):
            return jnp.any(~c.finished) & (c.t < max_steps)

        def step(c: _Episodes) -> _Episodes:
            if sampled:
                key, r_env, r_act = jax.random.split(c.key, 3)
                carry, actions = policy.sample(train_state, c.carry, c.obs, c.avail, c.first, r_act)
            else:  # the greedy path keeps its key stream: its numbers do not move
                key, r_env = jax.random.split(c.key)
                carry, actions = policy.act(train_state, c.carry, c.obs, c.avail, c.first)
            res = step_envs(env, c.env_state, actions, r_env)
            ends = res.done & ~c.finished
            return c.replace(
                obs=res.obs,
                env_state=res.state,
                avail=res.avail_actions,
                carry=carry,
                first=res.done,
                finished=c.finished | res.done,
                episode_return=jnp.where(
                    ends, jax.vmap(reduce)(res.info["episode_return"]), c.episode_return
                ),
                length=jnp.where(ends, res.info["episode_length"], c.length),
                won=jnp.where(ends, res.info["won"], c.won),
                stats={k: jnp.where(ends, res.info["stats"][k], v) for k, v in c.stats.items()},
                t=c.t + 1,
                key=key,
            )

        end = jax.lax.while_loop(running, step, start)
        return EpisodeEnds(end.episode_return, end.length, end.won, end.finished, end.stats)

    return play


def summarize_episodes(env: ArrayEnv, ends: EpisodeEnds, prefix: str = "eval") -> dict:
    """The evaluation metrics of ``make_evaluate`` from the episodes that finished, named
    ``<prefix>_return`` and so on."""
    done = ends.finished.astype(jnp.float32)
    n = done.sum()
    mean = lambda x: jnp.where(n > 0, (x * done).sum() / jnp.maximum(n, 1.0), jnp.nan)
    metrics = {
        f"{prefix}_return": mean(ends.episode_return),
        f"{prefix}_length": mean(ends.length.astype(jnp.float32)),
        f"{prefix}_episodes": n,
    }
    if env.has_won:
        metrics[f"{prefix}_win_rate"] = mean(ends.won.astype(jnp.float32))
    for name, value in (ends.stats or {}).items():
        metrics[f"{prefix}_stat_{name}"] = mean(value)
    return metrics


def make_evaluate(
    env: ArrayEnv, policy: GreedyPolicy, num_episodes: int, max_steps: int, sampled: bool = False
) -> Callable[[Any, jax.Array], dict]:
    """``evaluate(train_state, key) -> metrics`` of ``num_episodes`` greedy episodes.

    Metrics (scalars): ``eval_return`` (env reward, reduced over agents as the env's
    published numbers are: ``ArrayEnv.return_reduction``), ``eval_length``,
    ``eval_win_rate`` (where the env reports wins) and ``eval_episodes``, the number of
    episodes that ended within ``max_steps`` steps; only those are averaged (NaN where
    none ended). With ``sampled`` the episodes are the sampled policy's, named
    ``eval_sampled_return`` and so on.
    """
    play = make_play_episodes(env, policy, num_episodes, max_steps, sampled)
    prefix = "eval_sampled" if sampled else "eval"
    return lambda train_state, key: summarize_episodes(env, play(train_state, key), prefix)

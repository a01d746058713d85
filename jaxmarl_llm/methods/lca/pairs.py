"""Sequential state pairs ``(s, a, s')`` for LCA's rankings.

The paper samples sequential state pairs at random. Random play rarely reaches the late
stages of a task (both switches on, the blocked victim freed), so besides pairs from
random-policy rollouts (``rollout``) we can start from the env's ``random_state`` and
take one random step (``uniform``), or mix both halves (``mixed``, the default), so the
state-scoring model sees every stage of the task. Random states still cover the states a
competent team walks through thinly; ``scripted`` plays the env's scripted policy
(``greedy_actions``) with a random action with probability ``epsilon``, like pairs taken
from demonstrations (prior knowledge an LLM-labelled task may not have).

``completion`` reads the paper's sampling literally (sec. 4.1: "a trajectory randomly
sampled without a limit of max steps - which means it ends when the team task is
completed"): random play from reset with no step limit, each env restarting once the
task is completed, and pairs drawn uniformly from the steps of the trajectories that
completed within ``completion_horizon`` steps. Every stage of the task is then on every
trajectory, in the proportion random play spends in it.
"""

from __future__ import annotations

import functools
from typing import Any

import chex
import jax
import jax.numpy as jnp

from envs.array_env import ArrayEnv, ArrayEnvState
from envs.capabilities import ScriptedPolicy, require
from envs.credit import map_states
from jaxmarl_llm.learners.acting import random_actions, step_envs, unroll
from jaxmarl_llm.transitions import TransitionBatch


def both_states(fn, t: TransitionBatch) -> tuple[Any, Any]:
    """``(fn(s), fn(s'))`` of every transition (``fn`` of one state, e.g. the env's
    ``heuristic_potential`` or ``agent_features``), leaves ``[M, ...]``."""
    m = t.actions.shape[0]
    return map_states(fn, t.state, (m,)), map_states(fn, t.next_state, (m,))


def _concat(a: TransitionBatch, b: TransitionBatch) -> TransitionBatch:
    return jax.tree.map(lambda x, y: jnp.concatenate([x, y]), a, b)


def _take(t: TransitionBatch, index: jax.Array) -> TransitionBatch:
    return jax.tree.map(lambda x: x[index], t)


def rollout_transitions(
    env: ArrayEnv, key: chex.PRNGKey, num_envs: int, steps: int, epsilon: float | None = None
) -> TransitionBatch:
    """Every step of ``num_envs`` rollouts of ``steps`` steps ([steps * num_envs]): random
    play, or with ``epsilon`` the env's scripted policy (``greedy_actions``), each agent
    taking a random legal action with probability ``epsilon``."""
    k_reset, k_run = jax.random.split(key)
    _, state = jax.vmap(env.reset)(jax.random.split(k_reset, num_envs))
    if epsilon is not None:
        policy = require(env, ScriptedPolicy, needed_by="scripted rollouts")

    def step(state, t, k_act, k_env):
        actions = random_actions(env, state, k_act)
        if epsilon is not None:
            greedy = jax.vmap(policy.greedy_actions)(state.env_state).astype(actions.dtype)
            explore = jax.random.uniform(jax.random.fold_in(k_act, 1), actions.shape) < epsilon
            actions = jnp.where(explore, actions, greedy)
        res = step_envs(env, state, actions, k_env)
        record = TransitionBatch(
            actions=actions, state=state.env_state, next_state=res.terminal_env_state
        )
        return res.state, record

    traj = unroll(step, state, k_run, steps)[2]
    return jax.tree.map(lambda x: x.reshape((steps * num_envs, *x.shape[2:])), traj)


def _random_actions(env: ArrayEnv, key: chex.PRNGKey, env_state: Any) -> jax.Array:
    """``[N]`` random legal actions in a raw env state (outside the wrapper's episode)."""
    zeros = jnp.zeros((env.num_agents,), jnp.float32)
    wrapped = ArrayEnvState(env_state=env_state, episode_return=zeros, episode_length=jnp.int32(0))
    return env.random_actions(key, env.avail_actions(wrapped))


def uniform_transitions(env: ArrayEnv, key: chex.PRNGKey, num: int) -> TransitionBatch:
    """``num`` random states (``env.env.random_state``), each followed by one random step."""
    raw = env.env
    k_state, k_act, k_step = jax.random.split(key, 3)
    states = jax.vmap(raw.random_state)(jax.random.split(k_state, num))

    actions = jax.vmap(lambda k, s: _random_actions(env, k, s))(
        jax.random.split(k_act, num), states
    )

    def one(k, s, a):
        _, s2, _, _, _ = raw.step_env(k, s, env.unstack_actions(a))
        return s2

    next_states = jax.vmap(one)(jax.random.split(k_step, num), states, actions)
    return TransitionBatch(actions=actions, state=states, next_state=next_states)


def completion_transitions(
    env: ArrayEnv, key: chex.PRNGKey, num_envs: int, horizon: int
) -> tuple[TransitionBatch, jax.Array]:
    """Random play of ``num_envs`` envs for ``horizon`` steps with no step limit, each env
    reset only when the task is completed: ``(transitions [horizon * num_envs], completed
    [horizon * num_envs] bool)``, ``completed`` marking the steps of trajectories that
    reached completion within the horizon."""
    raw = env.env
    k_reset, k_run = jax.random.split(key)
    _, state = jax.vmap(raw.reset)(jax.random.split(k_reset, num_envs))

    def one(k, s):
        k_act, k_env, k_reset = jax.random.split(k, 3)
        a = _random_actions(env, k_act, s)
        _, s2, _, _, _ = raw.step_env(k_env, s, env.unstack_actions(a))
        won = env.won(s2)
        _, fresh = raw.reset(k_reset)
        nxt = jax.tree.map(lambda x, y: jnp.where(won, x, y), fresh, s2)
        return nxt, (TransitionBatch(actions=a, state=s, next_state=s2), won)

    def step(state, k):
        return jax.vmap(one)(jax.random.split(k, num_envs), state)

    _, (traj, won) = jax.lax.scan(step, state, jax.random.split(k_run, horizon))
    # a step belongs to a completed trajectory iff a completion follows it in its env
    completed = jnp.flip(jnp.cumsum(jnp.flip(won, 0), 0), 0) > 0
    flat = lambda x: x.reshape((horizon * num_envs, *x.shape[2:]))
    return jax.tree.map(flat, traj), flat(completed)


def sample_transitions(
    env: ArrayEnv,
    key: chex.PRNGKey,
    num: int,
    source: str = "mixed",
    num_envs: int = 64,
    epsilon: float = 0.3,
    horizon: int = 4096,
) -> TransitionBatch:
    """``num`` sequential state pairs drawn without replacement from ``source``
    (``horizon``: the steps each env plays for ``completion``)."""
    if source == "scripted":
        require(env, ScriptedPolicy, "pair_source=scripted", hint="Use rollout, uniform or mixed")
    if source != "completion":
        return _sample(env, key, num, source, num_envs, epsilon)
    if not env.has_won:
        raise ValueError(
            f"pair_source=completion needs an env whose task can be completed (a won "
            f"predicate); {type(env.env).__name__} has none. Use rollout, uniform or mixed"
        )
    t, available = _sample_completed(env, key, num, num_envs, horizon)
    if int(available) < num:
        raise ValueError(
            f"pair_source=completion: random play completed the task on only "
            f"{int(available)} steps' worth of trajectories within completion_horizon="
            f"{horizon} steps of {num_envs} envs, fewer than the {num} transitions asked "
            "for; raise completion_horizon or rollout_envs"
        )
    return t


@functools.partial(jax.jit, static_argnames=("env", "num", "num_envs", "horizon"))
def _sample_completed(
    env: ArrayEnv, key: chex.PRNGKey, num: int, num_envs: int, horizon: int
) -> tuple[TransitionBatch, jax.Array]:
    k_roll, k_pick = jax.random.split(key)
    pool, completed = completion_transitions(env, k_roll, num_envs, horizon)
    p = completed / jnp.maximum(completed.sum(), 1)
    index = jax.random.choice(k_pick, completed.shape[0], (num,), replace=False, p=p)
    return _take(pool, index), completed.sum()


@functools.partial(jax.jit, static_argnames=("env", "num", "source", "num_envs", "epsilon"))
def _sample(
    env: ArrayEnv, key: chex.PRNGKey, num: int, source: str, num_envs: int, epsilon: float
) -> TransitionBatch:
    k_roll, k_uni, k_pick = jax.random.split(key, 3)
    num_rollout = {"rollout": num, "scripted": num, "uniform": 0, "mixed": num // 2}[source]
    parts = []
    if num_rollout:
        # Twice as many steps as needed, so the picked ones spread over whole episodes.
        steps = max(2 * num_rollout // num_envs, 1) + 1
        eps = epsilon if source == "scripted" else None
        pool = rollout_transitions(env, k_roll, num_envs, steps, eps)
        index = jax.random.choice(k_pick, steps * num_envs, (num_rollout,), replace=False)
        parts.append(_take(pool, index))
    if num - num_rollout:
        parts.append(uniform_transitions(env, k_uni, num - num_rollout))
    return parts[0] if len(parts) == 1 else _concat(*parts)

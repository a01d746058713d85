"""Acting in parallel auto-resetting envs: the one unroll of every fixed-length
env-stepping loop (PPO's and the off-policy rollouts, ``Learner.collect``, random play,
LCA's pair rollouts). Greedy evaluation, which runs until every env's first episode has
ended, steps its envs with the same ``step_envs``.

A loop is ``unroll(step, carry, key, num_steps)``: a ``lax.scan`` of ``step(carry, t,
act_key, env_key) -> (carry, record)``, where the step picks actions with the acting key,
moves every env with ``step_envs`` (``ArrayEnv.step`` resets an env whose episode ended:
``res.done`` marks it, ``res.avail_actions`` are the masks of the next obs) and records
what its caller reads, a ``TransitionBatch`` of ``step_transitions`` or its own record.

The keys follow one of two schedules, chosen by the caller (each keeps the key stream its
results were produced with): ``key`` split into one key per step, each split into (acting
key, env key); or ``carried_key``, one key carried through the steps and split at each
into (next key, acting key, env key), the key left returned.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING, Any, TypeVar

import jax
import jax.numpy as jnp

from jaxmarl_llm.learners.shards import SINGLE, DataShards
from jaxmarl_llm.transitions import ALL_FIELDS, TransitionBatch

if TYPE_CHECKING:
    from envs.array_env import ArrayEnv, StepResult

Carry = TypeVar("Carry")
Record = TypeVar("Record")


def unroll(
    step: Callable[[Carry, jax.Array, jax.Array, jax.Array], tuple[Carry, Record]],
    carry: Carry,
    key: jax.Array,
    num_steps: int,
    carried_key: bool = False,
) -> tuple[Carry, jax.Array | None, Record]:
    """``num_steps`` steps of ``step(carry, t, act_key, env_key) -> (carry, record)``:
    ``(carry after them, key left (None unless carried_key), records [T, ...])``."""
    ts = jnp.arange(num_steps)
    if carried_key:

        def carried(c, t):
            inner, rng = c
            rng, r_act, r_env = jax.random.split(rng, 3)
            inner, record = step(inner, t, r_act, r_env)
            return (inner, rng), record

        (carry, key), records = jax.lax.scan(carried, (carry, key), ts)
        return carry, key, records

    def per_step(c, x):
        t, k = x
        r_act, r_env = jax.random.split(k)
        return step(c, t, r_act, r_env)

    carry, records = jax.lax.scan(per_step, carry, (ts, jax.random.split(key, num_steps)))
    return carry, None, records


def step_envs(
    env: ArrayEnv, env_state: Any, actions: jax.Array, key: jax.Array, shards: DataShards = SINGLE
) -> StepResult:
    """Every env of ``env_state`` (an ``ArrayEnvState [E]``) one step with ``actions [E,
    N]``, each with its own key of ``key``: the vmapped ``StepResult``."""
    return jax.vmap(env.step)(shards.env_keys(key, actions.shape[0]), env_state, actions)


def random_actions(env: ArrayEnv, env_state: Any, key: jax.Array) -> jax.Array:
    """Uniformly random legal actions ``[E, N]`` in every env of ``env_state``."""
    avail = jax.vmap(env.avail_actions)(env_state)
    num_envs = avail.shape[0]
    return jax.vmap(env.random_actions)(jax.random.split(key, num_envs), avail)


def step_transitions(
    env: ArrayEnv,
    obs: jax.Array | None,
    actions: jax.Array,
    env_state: Any,
    res: StepResult,
    fields=ALL_FIELDS,
) -> TransitionBatch:
    """The ``TransitionBatch`` of one vectorized env step of ``env`` from ``env_state``
    (an ``ArrayEnvState``) with observations ``obs``; ``res`` is the env's ``StepResult``.
    Env states and world-state vectors are filled only when ``fields`` names them (a
    shaper's ``fields``); the masks are left to the caller."""
    vec = jax.vmap(env.state_vector)
    return TransitionBatch(
        obs=obs,
        actions=actions,
        next_obs=res.terminal_obs,
        reward=res.reward,
        done=res.done,
        state=env_state.env_state if "state" in fields else None,
        next_state=res.terminal_env_state if "next_state" in fields else None,
        world_state=vec(env_state.env_state, obs) if "world_state" in fields else None,
        next_world_state=(
            vec(res.terminal_env_state, res.terminal_obs) if "next_world_state" in fields else None
        ),
    )


def collect_steps(
    env: ArrayEnv, policy_step, state: Any, key: jax.Array, steps: int
) -> TransitionBatch:
    """``steps`` steps of ``policy_step(state, act_key, env_key) -> (next state, actions,
    result)`` from ``state`` (an env-holding train state with ``obs`` and ``env_state``),
    every field filled, leaves ``[steps, E, ...]``; what ``Learner.collect`` returns."""

    def one(s, t, r_act, r_env):
        s_next, actions, res = policy_step(s, r_act, r_env)
        return s_next, step_transitions(env, s.obs, actions, s.env_state, res)

    return unroll(one, state, key, steps)[2]


def random_play(
    env: ArrayEnv, key: jax.Array, num_envs: int, steps: int, start: Any = None
) -> TransitionBatch:
    """``steps`` steps of uniformly random legal actions in ``num_envs`` auto-resetting
    envs, from resets or from the raw env state ``start`` (one state, copied to every
    env); every field filled, leaves ``[steps, E, ...]``. Data for checking a reward model
    or timing a shaper without a policy."""
    _, state = jax.vmap(env.reset)(jax.random.split(key, num_envs))
    if start is not None:
        copies = jax.tree.map(lambda x: jnp.broadcast_to(x, (num_envs, *x.shape)), start)
        state = state.replace(env_state=copies)

    def one(state, t, k_act, k_env):
        actions = random_actions(env, state, k_act)
        obs = jax.vmap(lambda s: env.stack_obs(env.env.get_obs(s.env_state)))(state)
        res = step_envs(env, state, actions, k_env)
        return res.state, step_transitions(env, obs, actions, state, res)

    return unroll(one, state, key, steps)[2]

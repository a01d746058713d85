"""DPM's per-agent intrinsic reward: an ensemble of reward nets over ``(s, s', o_i, a_i)``.

``r_hat_i = weight * scale * (mean_m f_m(s, s', o_i, onehot(a_i)) - shift)`` (appendix
A.4: one linear encoder per input, a hidden layer, one output; the members' average,
less ``DPMConfig.pessimism`` times their std where that is set;
``shift`` and ``scale`` are set after each refit, ``DPMConfig.centering``; ``weight``
is 1 unless ``DPMConfig.fade`` fades it out after the last round; with
``center_on_batch`` the shaper also subtracts the mean over the batch it scores). As a
shaper it is applied when the off-policy learner samples a batch, with the current
parameters, so a refitted ensemble re-scores the whole replay buffer without a relabel
pass; with the default ``team_reward: sum`` the learner trains on ``R + sum_i r_hat_i``.
"""

from __future__ import annotations

from typing import Any

import jax
import jax.numpy as jnp
from flax import struct

from envs.array_env import ArrayEnv
from jaxmarl_llm.methods.dpm.config import DPMConfig
from jaxmarl_llm.preferences.models import RewardModel
from jaxmarl_llm.shaper import CombineMode, Shaper
from jaxmarl_llm.transitions import TransitionBatch


@struct.dataclass
class DPMParams:
    model: Any  # RewardModel parameters, leaves [E, 1, ...]
    scale: jax.Array  # [] float32; 0 until the first feedback round
    # [] float32: subtracted from the raw output. Both Bradley-Terry losses are blind to a
    # constant offset, so the fit leaves it arbitrary; uncentered, it pays (or charges)
    # every step an episode lasts.
    shift: jax.Array
    # [] float32: 1, falling to 0 after the last round with DPMConfig.fade
    weight: jax.Array = struct.field(default_factory=lambda: jnp.ones((), jnp.float32))


def reward_model(env: ArrayEnv, cfg: DPMConfig) -> RewardModel:
    s, o, a = env.world_state_dim, env.obs_dim, env.num_actions
    return RewardModel(
        hidden=(cfg.hidden,),
        ensemble_size=cfg.ensemble_size,
        num_agents=env.num_agents,
        blocks=(s, s, o, a),
        encoder_width=cfg.encoder_width,
        agent_shared_blocks=2,  # state and next state: the same for every agent
    )


def initial_params(model: RewardModel, env: ArrayEnv, key: jax.Array) -> DPMParams:
    """Untrained ensemble parameters; scale 0 keeps the intrinsic reward off until the first
    refit (an untrained net's output is noise)."""
    feature_dim = 2 * env.world_state_dim + env.obs_dim + env.num_actions
    zero = jnp.zeros((), jnp.float32)
    return DPMParams(model.init(key, feature_dim), scale=zero, shift=zero)


def vector_features(
    env: ArrayEnv,
    world_state: jax.Array,
    obs: jax.Array,
    actions: jax.Array,
    next_world_state: jax.Array,
) -> jax.Array:
    """Per-agent inputs ``[..., N, 2S + D + A]`` from state vectors ``[..., S]`` (the
    state before and after each step), observations ``[..., N, D]`` and actions ``[..., N]``."""
    lead, n = actions.shape[:-1], actions.shape[-1]
    bcast = lambda x: jnp.broadcast_to(x[..., None, :], (*lead, n, x.shape[-1]))
    one_hot = jax.nn.one_hot(actions, env.num_actions, dtype=jnp.float32)
    return jnp.concatenate(
        [bcast(world_state), bcast(next_world_state), obs.astype(jnp.float32), one_hot], -1
    )


def agent_features(
    env: ArrayEnv,
    state: Any,
    obs: jax.Array,
    actions: jax.Array,
    next_state: Any,
    next_obs: jax.Array | None,
) -> jax.Array:
    """``vector_features`` of transitions given as env states, leaves with leading shape
    ``actions.shape[:-1]``. ``next_obs`` may be ``None`` where the env's world state does
    not read observations (SMAX)."""
    lead = actions.shape[:-1]
    flat = lambda x: x.reshape((-1, *x.shape[len(lead) :]))
    vec = jax.vmap(env.state_vector)
    # tree.map passes a None next_obs through, and vmap maps over its (no) leaves
    world = lambda st, o: vec(jax.tree.map(flat, st), jax.tree.map(flat, o)).reshape((*lead, -1))
    return vector_features(env, world(state, obs), obs, actions, world(next_state, next_obs))


def batch_features(env: ArrayEnv, batch: TransitionBatch) -> jax.Array:
    """Features of a batch: from its state vectors where it has them (what the learners
    store for the shaper), else from its env states."""
    if batch.world_state is not None and batch.next_world_state is not None:
        return vector_features(
            env, batch.world_state, batch.obs, batch.actions, batch.next_world_state
        )
    return agent_features(
        env, batch.state, batch.obs, batch.actions, batch.next_state, batch.next_obs
    )


def ensemble_reward(
    model: RewardModel, model_params: Any, features: jax.Array, pessimism: float = 0.0
) -> jax.Array:
    """``[..., N]`` raw rewards of per-agent features: the members' mean, less
    ``pessimism`` times their std (a lower confidence bound: the members were fitted to
    the same labels, so they agree where labels constrained them and drift apart on
    states no round saw, which a policy can otherwise learn to seek)."""
    agents = jnp.arange(features.shape[-2], dtype=jnp.int32)
    members = model.apply_members(model_params, features, agents)  # [M, ..., N]
    mean = members.mean(0)  # what apply_agents computes
    return mean - pessimism * members.std(0) if pessimism else mean


def intrinsic_rewards(
    model: RewardModel, params: DPMParams, features: jax.Array, pessimism: float = 0.0
) -> jax.Array:
    """``[..., N]`` rewards of per-agent features, shifted and scaled."""
    raw = ensemble_reward(model, params.model, features, pessimism)
    return (raw - params.shift) * (params.scale * params.weight)


def dpm_fields(env: ArrayEnv) -> tuple[str, ...]:
    """The transition fields the reward reads: the state vectors, not the env states.
    The learners compute them once per collected step (QMIX and MADDPG store the state
    vector for their mixer or critic anyway), so a sampled batch is scored without
    rebuilding them from env states, and the replay buffer holds two ``[S]`` vectors per
    step instead of two env states (and, where the world state is built from
    observations, the next observations)."""
    return ("obs", "actions", "world_state", "next_world_state")


def dpm_shaper(
    env: ArrayEnv,
    model: RewardModel,
    params: DPMParams,
    mode: CombineMode = CombineMode.add,
    coef: float = 1.0,
    feedback: Any = None,
    center_on_batch: bool = False,
    pessimism: float = 0.0,
) -> Shaper:
    def apply(p: DPMParams, batch: TransitionBatch) -> jax.Array:
        r = intrinsic_rewards(model, p, batch_features(env, batch), pessimism)
        return r - r.mean() if center_on_batch else r

    return Shaper(
        apply=apply,
        params=params,
        fields=dpm_fields(env),
        mode=mode,
        coef=coef,
        name="dpm",
        feedback=feedback,
    )

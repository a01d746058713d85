"""QMIX, VDN and QPLEX as one off-policy learner: GRU agents, a mixer by name.

The rollout, replay buffer, shaping at sample time and learn-or-skip switch are the
off-policy skeleton's (``offpolicy``). Each update plays epsilon-greedy legal actions
and stores every env's ``num_steps`` steps as one buffer item. The GRU is unrolled over
each sampled sequence from a zero carry and reset at episode starts (as in JaxMARL's
QMIX); with ``stored_hidden`` it starts from the acting GRU's carry stored with the item
(R2D2's stored state), so the item's first, partial episode is not read with a cold
memory. An item does not store what follows its last step, so that step is trained on
only when it ends an episode (see ``q_losses.sequence_targets``). Target networks are
hard copies every ``target_update_interval`` updates (``tau`` = 1).

A buffer item holds obs ``[T, N, D]`` (float32), actions and env rewards ``[T, N]``,
done ``[T]``, legal-action masks ``[T, N, A]`` and the mixer's world state ``[T, S]``,
plus only those of ``next_obs``/``state``/``next_state``/``next_world_state`` that the
shaper reads (about 1.2 KB per env step on SMAX 3m, 1.15 GiB per million stored steps).

Metrics per update: the episode metrics of the rollout (``episode_metrics``), the means
over the update's gradient steps of ``loss``, ``q_mean`` (mean ``Q_tot`` of the taken
actions over valid steps) and ``grad_norm`` (before clipping), NaN before learning
starts, then ``epsilon`` (at the start of the rollout).
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass
from enum import Enum

import chex
import flax.linen as nn
import jax
import jax.numpy as jnp
import numpy as np
import optax
from flax.linen.initializers import constant

from envs.array_env import ArrayEnv
from jaxmarl_llm.learners.base import Learner
from jaxmarl_llm.learners.initializers import orthogonal
from jaxmarl_llm.learners.mixers import MIXERS, make_mixer
from jaxmarl_llm.learners.networks import (
    AgentParams,
    ParamSharing,
    ResetGRU,
    apply_recurrent_flat,
    with_agent_ids,
)
from jaxmarl_llm.learners.offpolicy import (
    Nets,
    OffPolicyLearner,
    OffPolicyState,
    bad_value,
    check_offpolicy_config,
    option_name,
)
from jaxmarl_llm.learners.q_losses import (
    masked_argmax,
    masked_max,
    masked_td_loss,
    next_agent_values,
    sequence_targets,
)
from jaxmarl_llm.learners.registry import algo_spec, algorithms
from jaxmarl_llm.learners.shards import SINGLE, DataShards
from jaxmarl_llm.shaper import Shaper, team_reward
from jaxmarl_llm.transitions import TransitionBatch

OPTIMIZERS = ("adam", "rmsprop")
TEAM_REWARDS = ("sum", "mean", "first")
LEARN_METRICS = ("loss", "q_mean", "grad_norm")


class TeamReward(str, Enum):
    """How the agents' rewards become the one reward the mixer learns."""

    sum = "sum"
    mean = "mean"
    first = "first"


@dataclass
class QLearningConfig:
    """QMIX / VDN / QPLEX (one learner, the algorithm's mixer: ``AlgoSpec.mixer``) with GRU
    agents."""

    name: str = "qmix"
    total_timesteps: int = 1_000_000
    num_envs: int = 8
    num_steps: int = 128  # env steps per env collected per update (one buffer item)
    buffer_size: int = 5_000  # buffer capacity in items of num_steps transitions
    batch_size: int = 32  # items per gradient step
    learning_starts: int = 10_000  # env steps before the first gradient step
    updates_per_rollout: int = 4  # gradient steps per update
    lr: float = 5e-3
    lr_linear_decay: bool = False
    optimizer: str = "adam"
    max_grad_norm: float = 10.0
    gamma: float = 0.99
    td_lambda: float | None = None  # None: one-step targets; a float: TD(lambda) targets
    double_q: bool = True
    # store each item's GRU carry at its first step and unroll the learner from it (R2D2's
    # stored state); False: from zeros, so an item's first, partial episode starts cold
    stored_hidden: bool = False
    eps_start: float = 1.0
    eps_finish: float = 0.05
    eps_decay: float = 0.1  # fraction of total_timesteps over which epsilon anneals
    # the budget eps_decay is a fraction of; None: total_timesteps. Set by extending a
    # finished run (resume=RUN_DIR algo.total_timesteps=MORE), so that the run keeps the
    # epsilon schedule it started with, and by configs whose schedule must not change with
    # the budget (a shorter run anneals over the same env steps; a longer one than this
    # budget need not end its annealing)
    schedule_timesteps: int | None = None
    target_update_interval: int = 10  # updates between hard target copies (tau = 1)
    tau: float = 1.0
    hidden_dim: int = 64
    mixer_embed_dim: int = 32
    mixer_hypernet_dim: int = 64
    # gain of the QMIX hypernetworks' orthogonal init (JaxMARL's MIXER_INIT_SCALE): small, so
    # Q_tot starts near 0 even on unnormalised world states (SMAX positions run to 32)
    mixer_init_scale: float = 0.001
    param_sharing: ParamSharing = ParamSharing.shared
    agent_ids: bool = True
    team_reward: TeamReward = TeamReward.sum


class RecurrentQNetwork(nn.Module):
    """Dense -> GRU -> Dense Q head over sequences ``[T, B..., D]``; returns (carry, q)."""

    num_actions: int
    hidden_dim: int = 64

    @nn.compact
    def __call__(self, carry, x, resets):
        dense = nn.Dense(
            self.hidden_dim, kernel_init=orthogonal(np.sqrt(2)), bias_init=constant(0.0)
        )
        x = nn.relu(dense(x))
        carry, y = ResetGRU(self.hidden_dim, name="gru")(carry, x, resets)
        q = nn.Dense(self.num_actions, kernel_init=orthogonal(1.0), bias_init=constant(0.0))(y)
        return carry, q


class QLearningState(OffPolicyState):
    """QLearning's train state: ``params``/``target_params`` hold ``{"agent": ...,
    "mixer": ...}``; the acting GRU's carry rides along."""

    hidden: jax.Array  # [E, N, H] the acting GRU carry
    first: jax.Array  # [E] the current obs starts an episode (GRU carry cleared)


def epsilon_schedule(cfg) -> Callable[[jax.Array], jax.Array]:
    """``env_steps -> epsilon``: linear from ``eps_start`` to ``eps_finish`` over
    ``eps_decay * total_timesteps`` env steps (``schedule_timesteps`` in place of the
    total where set), then constant."""
    start, finish = float(cfg.eps_start), float(cfg.eps_finish)
    budget = getattr(cfg, "schedule_timesteps", None) or cfg.total_timesteps
    span = max(float(cfg.eps_decay) * float(budget), 1.0)

    def epsilon(env_steps):
        frac = jnp.clip(jnp.asarray(env_steps, jnp.float32) / span, 0.0, 1.0)
        return start + frac * (finish - start)

    return epsilon


def check_config(cfg) -> None:
    if algo_spec(cfg.name).mixer not in MIXERS:
        mixing = [name for name, spec in algorithms().items() if spec.mixer in MIXERS]
        bad_value("name", option_name(cfg.name), f"valid: {', '.join(mixing)}")
    check_offpolicy_config(cfg, TEAM_REWARDS, sequence_items=True)
    if option_name(cfg.optimizer) not in OPTIMIZERS:
        bad_value("optimizer", cfg.optimizer, f"valid: {', '.join(OPTIMIZERS)}")
    for key in (
        "target_update_interval", "hidden_dim", "mixer_embed_dim", "mixer_hypernet_dim",
        "mixer_init_scale", "lr",
    ):  # fmt: skip
        if getattr(cfg, key) <= 0:
            bad_value(key, getattr(cfg, key), "must be > 0")
    if cfg.td_lambda is not None and not 0.0 <= cfg.td_lambda <= 1.0:
        bad_value("td_lambda", cfg.td_lambda, "must be null (one-step targets) or in [0, 1]")
    if not 0.0 <= cfg.eps_finish <= cfg.eps_start <= 1.0:
        bad_value(
            "eps_start", (cfg.eps_start, cfg.eps_finish), "need 0 <= eps_finish <= eps_start <= 1"
        )
    if not 0.0 <= cfg.eps_decay <= 1.0:
        bad_value("eps_decay", cfg.eps_decay, "must be in [0, 1] (a fraction of total_timesteps)")
    schedule = getattr(cfg, "schedule_timesteps", None)
    if schedule is not None and not schedule > 0:
        bad_value("schedule_timesteps", schedule, "must be null (total_timesteps) or > 0")


class QLearning(OffPolicyLearner):
    """QMIX/VDN/QPLEX on the off-policy skeleton: sequence items, epsilon-greedy GRU
    agents, hard target copies every ``target_update_interval`` updates. ``act``,
    ``loss`` and ``team_rewards`` are exposed for evaluation and tests."""

    state_cls = QLearningState
    sequence_items = True
    learn_metrics = LEARN_METRICS

    def __init__(self, cfg, env: ArrayEnv, shaper: Shaper, shards: DataShards = SINGLE):
        super().__init__(cfg, env, shaper, shards)
        self.hidden_dim = int(cfg.hidden_dim)
        self.td_lambda = None if cfg.td_lambda is None else float(cfg.td_lambda)
        self.double_q = bool(cfg.double_q)
        self.stored_hidden = bool(cfg.stored_hidden)
        self.epsilon = epsilon_schedule(cfg)

        n = env.num_agents
        self.in_dim = env.obs_dim + (n if cfg.agent_ids else 0)
        self.agent = AgentParams(
            RecurrentQNetwork(env.num_actions, self.hidden_dim),
            env.agent_groups,
            option_name(cfg.param_sharing),
        )
        self.mixer = make_mixer(algo_spec(cfg.name).mixer, cfg)

        first_learning_update = math.ceil(cfg.learning_starts / self.env_steps_per_update)
        grad_steps = max(1, (self.num_updates - first_learning_update) * cfg.updates_per_rollout)
        lr = optax.linear_schedule(cfg.lr, 0.0, grad_steps) if cfg.lr_linear_decay else cfg.lr
        adam = option_name(cfg.optimizer) == "adam"
        opt = optax.adam(lr) if adam else optax.rmsprop(lr, 0.99, 1e-5)
        self.tx = optax.chain(optax.clip_by_global_norm(cfg.max_grad_norm), opt)

    # ----- networks ------------------------------------------------------------------
    def agent_q(self, agent_params, carry, obs, resets):
        """Unroll the agents: carry ``[B, N, H]``, obs ``[T, B, N, D]``, resets ``[T, B]``
        -> (carry, q ``[T, B, N, A]``)."""
        x = with_agent_ids(obs) if self.cfg.agent_ids else obs
        resets = jnp.broadcast_to(resets[..., None], obs.shape[:-1])
        return apply_recurrent_flat(self.agent, agent_params, carry, x, resets)

    def init_params(self, rng) -> dict:
        r_agent, r_mixer = jax.random.split(rng)
        n = self.env.num_agents
        agent = self.agent.init(
            r_agent,
            jnp.zeros((1, self.hidden_dim)),
            jnp.zeros((1, 1, self.in_dim)),
            jnp.zeros((1, 1), bool),
        )
        mixer = self.mixer.init(
            r_mixer,
            jnp.zeros((n,)),
            jnp.zeros((self.env.world_state_dim,)),
            jnp.zeros((n,)),
            jnp.zeros((n, self.env.num_actions)),
        )
        return {"agent": agent, "mixer": mixer}

    def init_opt_state(self, params):
        return self.tx.init(params)

    # ----- acting --------------------------------------------------------------------
    def act(self, params, hidden, obs, avail, first, rng, epsilon):
        """Epsilon-greedy legal actions for one step: hidden ``[B, N, H]``, obs ``[B, N, D]``,
        avail ``[B, N, A]``, first ``[B]`` -> (hidden, actions ``[B, N]``, q ``[B, N, A]``)."""
        hidden, q = self.agent_q(params["agent"], hidden, obs[None], first[None])
        q = q[0]
        greedy = masked_argmax(q, avail)
        r_explore, r_random = jax.random.split(rng)
        random = self.shards.categorical(r_random, jnp.where(avail, 0.0, -jnp.inf))
        explore = self.shards.uniform(r_explore, greedy.shape) < epsilon
        random = random.astype(jnp.int32)
        return hidden, jnp.where(explore, random, greedy), q

    def exploration(self, env_steps):
        return self.epsilon(env_steps)

    def behaviour(self, state: QLearningState, rng, epsilon):
        hidden, actions, _ = self.act(
            state.params, state.hidden, state.obs, state.avail, state.first, rng, epsilon
        )
        return actions, hidden

    def init_policy_state(self, num_envs: int) -> dict:
        return {
            "hidden": jnp.zeros((num_envs, self.env.num_agents, self.hidden_dim)),
            "first": jnp.ones((num_envs,), bool),
        }

    def advance(self, state: QLearningState, hidden, res) -> QLearningState:
        return super().advance(state, hidden, res).replace(hidden=hidden, first=res.done)

    def rollout_metrics(self, start: QLearningState) -> dict:
        return {"epsilon": self.epsilon(start.env_steps)}

    def greedy_act(self, state: QLearningState, hidden, obs, avail, first):
        """The legal action of highest Q (epsilon 0): ``(hidden, actions [B, N])``."""
        hidden, q = self.agent_q(state.params["agent"], hidden, obs[None], first[None])
        return hidden, masked_argmax(q[0], avail)

    def greedy_carry(self, state: QLearningState, num_envs: int):
        return jnp.zeros((num_envs, self.env.num_agents, self.hidden_dim))

    # ----- buffer --------------------------------------------------------------------
    def item_spec(self) -> TransitionBatch:
        hidden0 = jnp.zeros((self.env.num_agents, self.hidden_dim)) if self.stored_hidden else None
        return super().item_spec().replace(hidden0=hidden0)

    def rollout_items(self, start: QLearningState, steps: TransitionBatch) -> TransitionBatch:
        items = super().rollout_items(start, steps)  # [E, T, ...]
        if not self.stored_hidden:
            return items
        # the carry each item starts from, zero where its first obs starts an episode
        return items.replace(hidden0=jnp.where(start.first[:, None, None], 0.0, start.hidden))

    def team_rewards(self, shaper_params, items: TransitionBatch) -> jax.Array:
        """Shaped team reward ``[B, T]`` of sampled items under ``shaper_params``."""
        return team_reward(self.shaped_rewards(shaper_params, items), self.team)

    # ----- learning ------------------------------------------------------------------
    def loss(self, params, target_params, items: TransitionBatch, shaper_params):
        """Masked TD loss on items ``[B, T, ...]``; returns (loss, q_mean)."""
        return self.td_loss(params, target_params, items, self.team_rewards(shaper_params, items))

    def td_loss(self, params, target_params, items: TransitionBatch, rewards: jax.Array):
        """``loss`` with the items' shaped team rewards ``[B, T]`` given. On exact data
        shards ``items`` are this shard's part of the sampled batch, and the loss and
        ``q_mean`` are its part of the batch's (a sum over shards gives them)."""
        tm = jax.tree.map(lambda x: jnp.swapaxes(x, 0, 1), items)  # time-major [T, B, ...]
        B = items.done.shape[0]
        if self.stored_hidden:  # already zero where the item starts an episode
            carry, first = items.hidden0, jnp.zeros((1, B), bool)
        else:
            carry = jnp.zeros((B, self.env.num_agents, self.hidden_dim))
            first = jnp.ones((1, B), bool)
        resets = jnp.concatenate([first, tm.done[:-1]], axis=0)
        _, q = self.agent_q(params["agent"], carry, tm.obs, resets)
        _, q_target = self.agent_q(target_params["agent"], carry, tm.obs, resets)
        chosen = jnp.take_along_axis(q, tm.actions[..., None], axis=-1)[..., 0]  # [T, B, N]
        one_hot = jax.nn.one_hot(tm.actions, q.shape[-1])
        greedy = jax.lax.stop_gradient(masked_max(q, tm.avail))  # QPLEX V_i (pymarl2 detaches)
        q_tot = self.mixer.apply(params["mixer"], chosen, tm.world_state, greedy, one_hot)

        next_agent = next_agent_values(
            q_target[1:], jax.lax.stop_gradient(q[1:]), tm.avail[1:], self.double_q
        )
        # the bootstrap action is the greedy one: its advantages are 0 under QPLEX
        next_actions = jax.nn.one_hot(masked_argmax(q[1:], tm.avail[1:]), q.shape[-1])
        next_v = self.mixer.apply(
            target_params["mixer"], next_agent, tm.world_state[1:], next_agent, next_actions
        )
        targets, valid = sequence_targets(
            rewards.swapaxes(0, 1), tm.done, next_v, self.gamma, self.td_lambda
        )
        chex.assert_equal_shape([q_tot, targets, valid])
        m = valid.astype(jnp.float32)
        count = self.shards.sum(m.sum()) if self.shards.is_exact else m.sum()
        loss = masked_td_loss(q_tot, targets, valid, count)
        q_mean = (m * jax.lax.stop_gradient(q_tot)).sum() / jnp.maximum(count, 1.0)
        return loss, q_mean

    def grad_step(self, nets: Nets, buffer_state, shaper_params, key) -> tuple[Nets, dict]:
        items = self.sample_items(buffer_state, key)
        # a shaper may read the whole batch (DPM centres on it): rewards before the split
        rewards = self.team_rewards(shaper_params, items)
        if self.shards.is_exact:  # every shard sampled the same batch; each learns on its part
            items, rewards = jax.tree.map(lambda x: self.shards.local_part(x, 0), (items, rewards))
        (loss, q_mean), grads = jax.value_and_grad(self.td_loss, has_aux=True)(
            nets.params, nets.target_params, items, rewards
        )
        combine = self.shards.sum if self.shards.is_exact else self.shards.mean
        loss, q_mean, grads = combine((loss, q_mean, grads))
        updates, opt_state = self.tx.update(grads, nets.opt_state, nets.params)
        params = optax.apply_updates(nets.params, updates)
        grad_norm = jnp.sqrt(sum(jnp.sum(g**2) for g in jax.tree.leaves(grads)))
        out = {"loss": loss, "q_mean": q_mean, "grad_norm": grad_norm}
        return nets._replace(params=params, opt_state=opt_state), out

    def update_targets(self, nets: Nets, update_step: jax.Array):
        return jax.lax.cond(
            update_step % int(self.cfg.target_update_interval) == 0,
            lambda: optax.incremental_update(nets.params, nets.target_params, self.tau),
            lambda: nets.target_params,
        )


def make_learner(cfg, env: ArrayEnv, shaper: Shaper, shards: DataShards = SINGLE) -> Learner:
    """QMIX, VDN or QPLEX (``cfg.name`` names the mixer) for ``env`` with ``shaper``."""
    return QLearning(cfg, env, shaper, shards).learner()


def make_train(cfg, env: ArrayEnv, shaper: Shaper):
    """``train(rng) -> (final state, metrics stacked over updates)``."""
    return make_learner(cfg, env, shaper).train

"""QMIX and VDN as one off-policy learner: GRU agents, a replay buffer, a mixer by name.

Each update collects ``num_steps`` steps in each of ``num_envs`` auto-resetting envs
with epsilon-greedy (legal actions only), stores every env's ``num_steps`` steps as
one buffer item, then takes ``updates_per_rollout`` gradient steps on batches of
items. The GRU is unrolled over each sampled sequence from a zero carry and reset at
episode starts (as in JaxMARL's QMIX); with ``stored_hidden`` it starts from the acting
GRU's carry stored with the item (R2D2's stored state), so the item's first, partial
episode is not read with a cold memory. Rewards are shaped when a batch is sampled,
with the shaper parameters in the train state, so new shaper parameters re-score old
transitions; the buffer holds env rewards only. An item does not store what follows
its last step, so that step is trained on only when it ends an episode (see
``q_losses.sequence_targets``).

A buffer item holds obs ``[T, N, D]`` (float32), actions and env rewards ``[T, N]``,
done ``[T]``, legal-action masks ``[T, N, A]`` and the mixer's world state ``[T, S]``,
plus only those of ``next_obs``/``state``/``next_state``/``next_world_state`` that the
shaper reads (about 1.2 KB per env step on SMAX 3m, 1.15 GiB per million stored steps).

Metrics per update: the episode metrics of the rollout (``episode_metrics``), then
``epsilon`` (at the start of the rollout), and the means over the update's gradient
steps of ``loss``, ``q_mean`` (mean ``Q_tot`` of the taken actions over valid steps)
and ``grad_norm`` (before clipping). Before learning starts (``learning_starts`` env
steps and ``batch_size`` items stored) those three are NaN, like the episode metrics
of an update in which no episode ended.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass
from enum import Enum
from typing import Any

import chex
import flashbax as fbx
import flax.linen as nn
import jax
import jax.numpy as jnp
import numpy as np
import optax
from flax import struct
from flax.linen.initializers import constant

from envs.array_env import ArrayEnv
from jaxmarl_llm.errors import ConfigError
from jaxmarl_llm.learners.base import Learner, TrainState, collect_steps, episode_metrics
from jaxmarl_llm.learners.evaluation import GreedyPolicy
from jaxmarl_llm.learners.initializers import orthogonal
from jaxmarl_llm.learners.mixers import MIXER_NAMES, make_mixer
from jaxmarl_llm.learners.networks import AgentParams, ParamSharing, ResetGRU, with_agent_ids
from jaxmarl_llm.learners.q_losses import (
    masked_argmax,
    masked_max,
    masked_td_loss,
    next_agent_values,
    sequence_targets,
)
from jaxmarl_llm.shaping.base import Shaper, TransitionBatch, shaped_reward, team_reward

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
    """QMIX / VDN (one learner, the mixer is a parameter) with GRU agents."""

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


@struct.dataclass
class Transition:
    """One buffer item: ``num_steps`` consecutive steps of one env, leaves ``[T, ...]``.

    ``next_obs``, ``state``, ``next_state`` and ``next_world_state`` are stored only
    when the shaper reads them (``None`` otherwise); ``state``/``next_state`` are the
    jaxmarl env states before the step and after it (pre-reset), ``next_world_state``
    the latter's state vector.
    """

    obs: jax.Array  # [T, N, D]
    actions: jax.Array  # [T, N] int32
    reward: jax.Array  # [T, N] env reward
    done: jax.Array  # [T] bool
    avail: jax.Array  # [T, N, A] bool, legal actions at obs
    world_state: jax.Array  # [T, S] mixer input at obs
    next_obs: jax.Array | None = None  # [T, N, D]
    state: Any = None
    next_state: Any = None
    next_world_state: jax.Array | None = None  # [T, S]
    # [N, H] the acting GRU carry before step 0, zeros where obs[0] starts an episode
    # (stored with algo.stored_hidden only; the one leaf without a time axis)
    hidden0: jax.Array | None = None


class QLearningState(TrainState):
    params: Any  # {"agent": ..., "mixer": ...}
    target_params: Any
    opt_state: Any
    buffer: Any  # flashbax buffer state, items [1, buffer_size, T, ...]
    obs: jax.Array  # [E, N, D]
    avail: jax.Array  # [E, N, A]
    hidden: jax.Array  # [E, N, H]
    first: jax.Array  # [E] the current obs starts an episode (GRU carry cleared)
    env_steps: jax.Array  # [] int32, env steps summed over envs


def _name(x) -> str:
    return str(getattr(x, "value", x))


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


def training_rewards(shaper: Shaper, shaper_params: Any, items: Transition, how: str = "sum"):
    """Team reward ``[...]`` of stored transitions under the current shaper parameters."""
    batch = TransitionBatch(
        obs=items.obs,
        actions=items.actions,
        next_obs=items.next_obs,
        reward=items.reward,
        done=items.done,
        state=items.state,
        next_state=items.next_state,
        world_state=items.world_state,
        next_world_state=items.next_world_state,
    )
    return team_reward(shaped_reward(shaper, shaper_params, batch), how)


def check_config(cfg) -> None:
    def bad(key, value, why):
        raise ConfigError(f"bad value for config key 'algo.{key}': {value!r}; {why}")

    name = _name(cfg.name)
    if name not in MIXER_NAMES:
        bad("name", name, f"valid: {', '.join(MIXER_NAMES)}")
    if _name(cfg.optimizer) not in OPTIMIZERS:
        bad("optimizer", cfg.optimizer, f"valid: {', '.join(OPTIMIZERS)}")
    if _name(cfg.team_reward) not in TEAM_REWARDS:
        bad("team_reward", cfg.team_reward, f"valid: {', '.join(TEAM_REWARDS)}")
    try:
        ParamSharing(_name(cfg.param_sharing))
    except ValueError:
        valid = ", ".join(p.value for p in ParamSharing)
        bad("param_sharing", cfg.param_sharing, f"valid: {valid}")
    for key in (
        "total_timesteps", "num_envs", "num_steps", "buffer_size", "batch_size",
        "updates_per_rollout", "target_update_interval", "hidden_dim", "mixer_embed_dim",
        "mixer_hypernet_dim", "mixer_init_scale", "lr", "max_grad_norm",
    ):  # fmt: skip
        if getattr(cfg, key) <= 0:
            bad(key, getattr(cfg, key), "must be > 0")
    if cfg.learning_starts < 0:
        bad("learning_starts", cfg.learning_starts, "must be >= 0")
    if cfg.batch_size > cfg.buffer_size:
        bad("batch_size", cfg.batch_size, f"must be <= buffer_size ({cfg.buffer_size})")
    if cfg.num_envs > cfg.buffer_size:
        bad("num_envs", cfg.num_envs, f"must be <= buffer_size ({cfg.buffer_size}) items")
    if cfg.total_timesteps < cfg.num_envs * cfg.num_steps:
        bad(
            "total_timesteps",
            cfg.total_timesteps,
            f"must be >= num_envs * num_steps = {cfg.num_envs * cfg.num_steps} (one update)",
        )
    if not 0.0 <= cfg.gamma <= 1.0:
        bad("gamma", cfg.gamma, "must be in [0, 1]")
    if cfg.td_lambda is not None and not 0.0 <= cfg.td_lambda <= 1.0:
        bad("td_lambda", cfg.td_lambda, "must be null (one-step targets) or in [0, 1]")
    if not 0.0 < cfg.tau <= 1.0:
        bad("tau", cfg.tau, "must be in (0, 1]")
    if not 0.0 <= cfg.eps_finish <= cfg.eps_start <= 1.0:
        bad("eps_start", (cfg.eps_start, cfg.eps_finish), "need 0 <= eps_finish <= eps_start <= 1")
    if not 0.0 <= cfg.eps_decay <= 1.0:
        bad("eps_decay", cfg.eps_decay, "must be in [0, 1] (a fraction of total_timesteps)")
    schedule = getattr(cfg, "schedule_timesteps", None)
    if schedule is not None and not schedule > 0:
        bad("schedule_timesteps", schedule, "must be null (total_timesteps) or > 0")


class QLearning:
    """The pieces of the QMIX/VDN learner for one config, env and shaper.

    ``init``/``update`` make the ``Learner``; ``act``, ``sample``, ``loss`` and
    ``team_rewards`` are exposed for evaluation and tests. All are pure and jittable.
    """

    def __init__(self, cfg, env: ArrayEnv, shaper: Shaper):
        self.cfg, self.env, self.shaper = cfg, env, shaper
        self.num_envs, self.num_steps = int(cfg.num_envs), int(cfg.num_steps)
        self.env_steps_per_update = self.num_envs * self.num_steps
        self.num_updates = int(cfg.total_timesteps) // self.env_steps_per_update
        self.hidden_dim = int(cfg.hidden_dim)
        self.gamma = float(cfg.gamma)
        self.td_lambda = None if cfg.td_lambda is None else float(cfg.td_lambda)
        self.double_q = bool(cfg.double_q)
        self.stored_hidden = bool(cfg.stored_hidden)
        self.team = _name(cfg.team_reward)
        self.needs = set(shaper.fields)
        self.epsilon = epsilon_schedule(cfg)

        n = env.num_agents
        self.in_dim = env.obs_dim + (n if cfg.agent_ids else 0)
        self.agent = AgentParams(
            RecurrentQNetwork(env.num_actions, self.hidden_dim),
            env.agent_groups,
            _name(cfg.param_sharing),
        )
        self.mixer = make_mixer(_name(cfg.name), cfg)
        self.buffer = fbx.make_item_buffer(
            max_length=int(cfg.buffer_size),
            min_length=int(cfg.batch_size),
            sample_batch_size=int(cfg.batch_size),
            add_sequences=False,
            add_batches=True,
        )

        first_learning_update = math.ceil(cfg.learning_starts / self.env_steps_per_update)
        grad_steps = max(1, (self.num_updates - first_learning_update) * cfg.updates_per_rollout)
        lr = optax.linear_schedule(cfg.lr, 0.0, grad_steps) if cfg.lr_linear_decay else cfg.lr
        opt = optax.adam(lr) if _name(cfg.optimizer) == "adam" else optax.rmsprop(lr, 0.99, 1e-5)
        self.tx = optax.chain(optax.clip_by_global_norm(cfg.max_grad_norm), opt)

    # ----- networks ------------------------------------------------------------------
    def agent_q(self, agent_params, carry, obs, resets):
        """Unroll the agents: carry ``[B, N, H]``, obs ``[T, B, N, D]``, resets ``[T, B]``
        -> (carry, q ``[T, B, N, A]``)."""
        x = with_agent_ids(obs) if self.cfg.agent_ids else obs
        resets = jnp.broadcast_to(resets[..., None], obs.shape[:-1])
        return self.agent.apply(
            agent_params, carry, x, resets, agent_axes=(1, 2, 2), out_axes=(1, 2)
        )

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

    def act(self, params, hidden, obs, avail, first, rng, epsilon):
        """Epsilon-greedy legal actions for one step: hidden ``[B, N, H]``, obs ``[B, N, D]``,
        avail ``[B, N, A]``, first ``[B]`` -> (hidden, actions ``[B, N]``, q ``[B, N, A]``)."""
        hidden, q = self.agent_q(params["agent"], hidden, obs[None], first[None])
        q = q[0]
        greedy = masked_argmax(q, avail)
        r_explore, r_random = jax.random.split(rng)
        random = jax.random.categorical(r_random, jnp.where(avail, 0.0, -jnp.inf)).astype(jnp.int32)
        explore = jax.random.uniform(r_explore, greedy.shape) < epsilon
        return hidden, jnp.where(explore, random, greedy), q

    def greedy_act(self, state: QLearningState, hidden, obs, avail, first):
        """The legal action of highest Q (epsilon 0): ``(hidden, actions [B, N])``."""
        hidden, q = self.agent_q(state.params["agent"], hidden, obs[None], first[None])
        return hidden, masked_argmax(q[0], avail)

    def greedy_carry(self, state: QLearningState, num_envs: int):
        return jnp.zeros((num_envs, self.env.num_agents, self.hidden_dim))

    # ----- buffer --------------------------------------------------------------------
    def _item_spec(self) -> Transition:
        """Zeros with the layout of one stored item (flashbax infers storage from it)."""
        T, n, env = self.num_steps, self.env.num_agents, self.env
        env_state = jax.eval_shape(env.reset, jax.random.PRNGKey(0))[1].env_state
        state_zeros = jax.tree.map(lambda s: jnp.zeros((T, *s.shape), s.dtype), env_state)
        obs_zeros = jnp.zeros((T, n, env.obs_dim), jnp.float32)
        return Transition(
            obs=obs_zeros,
            actions=jnp.zeros((T, n), jnp.int32),
            reward=jnp.zeros((T, n), jnp.float32),
            done=jnp.zeros((T,), bool),
            avail=jnp.zeros((T, n, env.num_actions), bool),
            world_state=jnp.zeros((T, env.world_state_dim), jnp.float32),
            next_obs=obs_zeros if "next_obs" in self.needs else None,
            state=state_zeros if "state" in self.needs else None,
            next_state=state_zeros if "next_state" in self.needs else None,
            next_world_state=(
                jnp.zeros((T, env.world_state_dim), jnp.float32)
                if "next_world_state" in self.needs
                else None
            ),
            hidden0=jnp.zeros((n, self.hidden_dim)) if self.stored_hidden else None,
        )

    def buffer_nbytes(self) -> int:
        """Bytes the replay buffer state occupies (from shapes; nothing is allocated)."""
        shapes = jax.eval_shape(lambda: self.buffer.init(self._item_spec()))
        return int(sum(x.size * x.dtype.itemsize for x in jax.tree.leaves(shapes)))

    def sample(self, state: QLearningState, rng) -> Transition:
        """A batch of ``batch_size`` stored items, leaves ``[B, T, ...]``."""
        return self.buffer.sample(state.buffer, rng).experience

    def team_rewards(self, shaper_params, items: Transition) -> jax.Array:
        """Shaped team reward ``[B, T]`` of sampled items under ``shaper_params``."""
        return training_rewards(self.shaper, shaper_params, items, self.team)

    # ----- learning ------------------------------------------------------------------
    def loss(self, params, target_params, items: Transition, shaper_params):
        """Masked TD loss on items ``[B, T, ...]``; returns (loss, q_mean)."""
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
        rewards = self.team_rewards(shaper_params, items).swapaxes(0, 1)
        targets, valid = sequence_targets(rewards, tm.done, next_v, self.gamma, self.td_lambda)
        chex.assert_equal_shape([q_tot, targets, valid])
        loss = masked_td_loss(q_tot, targets, valid)
        m = valid.astype(jnp.float32)
        q_mean = (m * jax.lax.stop_gradient(q_tot)).sum() / jnp.maximum(m.sum(), 1.0)
        return loss, q_mean

    def _learn(self, state: QLearningState, buffer_state, rng):
        def grad_step(carry, key):
            params, opt_state = carry
            items = self.buffer.sample(buffer_state, key).experience
            (loss, q_mean), grads = jax.value_and_grad(self.loss, has_aux=True)(
                params, state.target_params, items, state.shaper_params
            )
            updates, opt_state = self.tx.update(grads, opt_state, params)
            params = optax.apply_updates(params, updates)
            grad_norm = jnp.sqrt(sum(jnp.sum(g**2) for g in jax.tree.leaves(grads)))
            out = {"loss": loss, "q_mean": q_mean, "grad_norm": grad_norm}
            return (params, opt_state), out

        keys = jax.random.split(rng, int(self.cfg.updates_per_rollout))
        (params, opt_state), out = jax.lax.scan(grad_step, (state.params, state.opt_state), keys)
        return params, opt_state, jax.tree.map(jnp.mean, out)

    def _skip(self, state: QLearningState, buffer_state, rng):
        nan = jnp.full((), jnp.nan, jnp.float32)
        return state.params, state.opt_state, {k: nan for k in LEARN_METRICS}

    # ----- the Learner ---------------------------------------------------------------
    def init(self, rng) -> QLearningState:
        rng, r_params, r_env = jax.random.split(rng, 3)
        params = self.init_params(r_params)
        E, n = self.num_envs, self.env.num_agents
        obs, env_state = jax.vmap(self.env.reset)(jax.random.split(r_env, E))
        return QLearningState(
            params=params,
            target_params=params,
            opt_state=self.tx.init(params),
            buffer=self.buffer.init(self._item_spec()),
            env_state=env_state,
            obs=obs,
            avail=jax.vmap(self.env.avail_actions)(env_state),
            hidden=jnp.zeros((E, n, self.hidden_dim)),
            first=jnp.ones((E,), bool),
            shaper_params=self.shaper.params,
            rng=rng,
            update_step=jnp.zeros((), jnp.int32),
            env_steps=jnp.zeros((), jnp.int32),
        )

    def _policy_step(self, state: QLearningState, r_act, r_env, eps):
        """One epsilon-greedy step of every env: ``(next state, buffer item, step result)``
        (the item holds only the fields the shaper reads)."""
        hidden, actions, _ = self.act(
            state.params, state.hidden, state.obs, state.avail, state.first, r_act, eps
        )
        world_state = jax.vmap(self.env.world_state)(state.env_state, state.obs)
        res = jax.vmap(self.env.step)(
            jax.random.split(r_env, self.num_envs), state.env_state, actions
        )
        item = Transition(
            obs=state.obs,
            actions=actions,
            reward=res.reward,
            done=res.done,
            avail=state.avail,
            world_state=world_state,
            next_obs=res.terminal_obs if "next_obs" in self.needs else None,
            state=state.env_state.env_state if "state" in self.needs else None,
            next_state=res.terminal_env_state if "next_state" in self.needs else None,
            next_world_state=(
                jax.vmap(self.env.state_vector)(res.terminal_env_state, res.terminal_obs)
                if "next_world_state" in self.needs
                else None
            ),
        )
        state = state.replace(
            env_state=res.state,
            obs=res.obs,
            avail=res.avail_actions,
            hidden=hidden,
            first=res.done,
        )
        return state, item, res

    def _rollout_step(self, state: QLearningState, t):
        rng, r_act, r_env = jax.random.split(state.rng, 3)
        eps = self.epsilon(state.env_steps + t * self.num_envs)
        state, item, res = self._policy_step(state, r_act, r_env, eps)
        return state.replace(rng=rng), (item, res.done, res.info)

    def collect(self, state: QLearningState, key: jax.Array, steps: int) -> TransitionBatch:
        """``steps`` epsilon-greedy steps (the current epsilon) from the learner's env
        states (leaves ``[steps, E, ...]``); ``state`` is unchanged."""
        eps = self.epsilon(state.env_steps)

        def act(s, k):
            s_next, item, res = self._policy_step(s, *jax.random.split(k), eps)
            return s_next, item.actions, res

        return collect_steps(self.env, act, state, key, steps)

    def update(self, state: QLearningState) -> tuple[QLearningState, dict]:
        eps = self.epsilon(state.env_steps)
        # the carry each item starts from, zero where its first obs starts an episode
        hidden0 = (
            jnp.where(state.first[:, None, None], 0.0, state.hidden) if self.stored_hidden else None
        )  # [E, N, H]
        state, (items, done, info) = jax.lax.scan(
            self._rollout_step, state, jnp.arange(self.num_steps)
        )
        items = jax.tree.map(lambda x: jnp.swapaxes(x, 0, 1), items)  # [E, T, ...]
        items = items.replace(hidden0=hidden0)
        buffer_state = self.buffer.add(state.buffer, items)
        env_steps = state.env_steps + self.env_steps_per_update
        rng, r_learn = jax.random.split(state.rng)
        can_learn = self.buffer.can_sample(buffer_state) & (env_steps >= self.cfg.learning_starts)
        params, opt_state, learn_metrics = jax.lax.cond(
            can_learn, self._learn, self._skip, state, buffer_state, r_learn
        )
        update_step = state.update_step + 1
        tau = float(self.cfg.tau)
        target_params = jax.lax.cond(
            update_step % int(self.cfg.target_update_interval) == 0,
            lambda: optax.incremental_update(params, state.target_params, tau),
            lambda: state.target_params,
        )
        state = state.replace(
            params=params,
            target_params=target_params,
            opt_state=opt_state,
            buffer=buffer_state,
            rng=rng,
            update_step=update_step,
            env_steps=env_steps,
        )
        metrics = episode_metrics(done, info, self.env.has_won, self.env.return_reduction)
        metrics.update(learn_metrics)
        metrics["epsilon"] = eps
        return state, metrics

    def learner(self) -> Learner:
        return Learner(
            init=self.init,
            update=self.update,
            num_updates=self.num_updates,
            env_steps_per_update=self.env_steps_per_update,
            collect=self.collect,
            policy=GreedyPolicy(self.greedy_carry, self.greedy_act),
        )


def make_learner(cfg, env: ArrayEnv, shaper: Shaper) -> Learner:
    """QMIX, VDN or QPLEX (``cfg.name`` names the mixer) for ``env`` with ``shaper``."""
    return QLearning(cfg, env, shaper).learner()


def make_train(cfg, env: ArrayEnv, shaper: Shaper):
    """``train(rng) -> (final state, metrics stacked over updates)``."""
    return make_learner(cfg, env, shaper).train

"""MADDPG (Lowe et al., 2017) for discrete actions, as EPyMARL runs it.

Decentralized actors map each agent's observation (plus its id) to action logits;
a centralized critic ``Q_i(s, a_1..a_N)`` per agent (one network with the agent id as
input, or one per agent) sees the world state and every agent's one-hot action.
Discrete actions go through the straight-through Gumbel-softmax: the forward pass uses
a one-hot sample, the gradient that of the relaxed sample.

Each update collects ``num_steps`` steps in each of ``num_envs`` envs, acting by
sampling the actors' (masked) categorical policies; every transition goes into a
replay buffer of single transitions. Then ``updates_per_rollout`` gradient steps, each
on ``batch_size`` sampled transitions:

- critic: ``y_i = r_i + gamma (1 - done) Q'_i(s', a')`` with ``a'`` a Gumbel-softmax
  sample of the target actors at ``s'``; squared TD error;
- actors: for each agent ``i``, the stored actions of the others and agent ``i``'s
  Gumbel-softmax sample, minimizing ``-Q_i`` plus ``actor_reg`` times the mean squared
  logit (EPyMARL's ``reg``);
- targets: Polyak averaging with ``tau`` after every gradient step.

Rewards are shaped when a batch is sampled, from the shaper parameters in the train
state (as in the QMIX learner), so the buffer holds env rewards only. ``team_reward``
``none`` trains critic ``i`` on agent ``i``'s reward; ``sum``/``mean`` on the team's.

Metrics per update: the episode metrics of the rollout, then the means over the
update's gradient steps of ``critic_loss``, ``actor_loss``, ``q_mean`` and
``grad_norm`` (NaN until ``learning_starts`` env steps and ``batch_size`` transitions
are stored).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from enum import Enum
from typing import Any

import flashbax as fbx
import flax.linen as nn
import jax
import jax.numpy as jnp
import optax
from flax import struct

from envs.array_env import ArrayEnv
from jaxmarl_llm.errors import ConfigError
from jaxmarl_llm.learners.base import Learner, TrainState, collect_steps, episode_metrics
from jaxmarl_llm.learners.evaluation import GreedyPolicy
from jaxmarl_llm.learners.networks import (
    MLP,
    Activation,
    AgentParams,
    ParamSharing,
    with_agent_ids,
)
from jaxmarl_llm.shaping.base import Shaper, TransitionBatch, shaped_reward, team_reward

MASKED_LOGIT = -1e9
TEAM_REWARDS = ("none", "sum", "mean")
LEARN_METRICS = ("critic_loss", "actor_loss", "q_mean", "grad_norm")


class CriticReward(str, Enum):
    """What MADDPG's critic ``i`` learns: agent ``i``'s own reward or the team's."""

    none = "none"
    sum = "sum"
    mean = "mean"


@dataclass
class MADDPGConfig:
    """MADDPG with Gumbel-softmax actors and centralized critics (EPyMARL's settings)."""

    name: str = "maddpg"
    total_timesteps: int = 1_000_000
    num_envs: int = 16
    num_steps: int = 8  # env steps per env collected per update
    buffer_size: int = 200_000  # transitions
    batch_size: int = 256  # transitions per gradient step
    learning_starts: int = 10_000  # env steps before the first gradient step
    updates_per_rollout: int = 1  # gradient steps per update
    actor_lr: float = 5e-4
    critic_lr: float = 5e-4
    max_grad_norm: float = 10.0
    gamma: float = 0.99
    tau: float = 0.01  # Polyak factor of the target networks, every gradient step
    temperature: float = 1.0  # Gumbel-softmax temperature
    actor_reg: float = 1e-3  # weight of the mean squared logit in the actor loss
    hidden_sizes: list[int] = field(default_factory=lambda: [128, 128])
    activation: Activation = Activation.relu
    param_sharing: ParamSharing = ParamSharing.shared
    agent_ids: bool = True
    team_reward: CriticReward = CriticReward.none  # none: agent i's own reward


def _name(x) -> str:
    return str(getattr(x, "value", x))


def masked_logits(logits: jax.Array, avail: jax.Array) -> jax.Array:
    return jnp.where(avail, logits, MASKED_LOGIT)


def gumbel_softmax_st(rng: jax.Array, logits: jax.Array, temperature: float) -> jax.Array:
    """Straight-through Gumbel-softmax: a one-hot sample of ``softmax(logits)`` in the
    forward pass, the gradient of the relaxed sample ``softmax((logits + g) / t)``."""
    g = jax.random.gumbel(rng, logits.shape, logits.dtype)
    soft = jax.nn.softmax((logits + g) / temperature, axis=-1)
    hard = jax.nn.one_hot(jnp.argmax(soft, -1), logits.shape[-1], dtype=soft.dtype)
    return soft + jax.lax.stop_gradient(hard - soft)


class CentralCritic(nn.Module):
    """``Q_i`` from ``[world state, all one-hot actions, (agent id)]``."""

    hidden: tuple[int, ...]
    activation: str

    @nn.compact
    def __call__(self, x):
        return MLP(self.hidden, 1, self.activation, out_scale=0.01)(x)[..., 0]


@struct.dataclass
class Transition:
    """One stored env step (single transitions, not sequences)."""

    obs: jax.Array  # [N, D]
    actions: jax.Array  # [N] int32
    reward: jax.Array  # [N] env reward
    done: jax.Array  # [] bool
    avail: jax.Array  # [N, A]
    world_state: jax.Array  # [S]
    next_obs: jax.Array  # [N, D] true next observation (pre-reset)
    next_avail: jax.Array  # [N, A]
    next_world_state: jax.Array  # [S]
    state: Any = None  # env state before the step, when the shaper reads it
    next_state: Any = None  # env state after it (pre-reset), when the shaper reads it


class MADDPGState(TrainState):
    params: Any  # {"actor": ..., "critic": ...}
    target_params: Any
    opt_state: Any  # {"actor": ..., "critic": ...}
    buffer: Any
    obs: jax.Array  # [E, N, D]
    avail: jax.Array  # [E, N, A]
    env_steps: jax.Array


def check_config(cfg) -> None:
    def bad(key, value, why):
        raise ConfigError(f"bad value for config key 'algo.{key}': {value!r}; {why}")

    if _name(cfg.name) != "maddpg":
        bad("name", cfg.name, "the MADDPG learner needs name: maddpg")
    if _name(cfg.team_reward) not in TEAM_REWARDS:
        bad("team_reward", cfg.team_reward, f"valid: {', '.join(TEAM_REWARDS)}")
    try:
        ParamSharing(_name(cfg.param_sharing))
    except ValueError:
        bad(
            "param_sharing", cfg.param_sharing, f"valid: {', '.join(p.value for p in ParamSharing)}"
        )
    for key in (
        "total_timesteps", "num_envs", "num_steps", "buffer_size", "batch_size",
        "updates_per_rollout", "actor_lr", "critic_lr", "max_grad_norm", "temperature",
    ):  # fmt: skip
        if getattr(cfg, key) <= 0:
            bad(key, getattr(cfg, key), "must be > 0")
    if cfg.learning_starts < 0 or cfg.actor_reg < 0:
        bad("learning_starts/actor_reg", (cfg.learning_starts, cfg.actor_reg), "must be >= 0")
    if cfg.batch_size > cfg.buffer_size:
        bad("batch_size", cfg.batch_size, f"must be <= buffer_size ({cfg.buffer_size})")
    if cfg.num_envs * cfg.num_steps > cfg.buffer_size:
        bad("buffer_size", cfg.buffer_size, "must hold at least one rollout (num_envs * num_steps)")
    if cfg.total_timesteps < cfg.num_envs * cfg.num_steps:
        bad("total_timesteps", cfg.total_timesteps, "must be >= num_envs * num_steps (one update)")
    if not 0.0 <= cfg.gamma <= 1.0:
        bad("gamma", cfg.gamma, "must be in [0, 1]")
    if not 0.0 < cfg.tau <= 1.0:
        bad("tau", cfg.tau, "must be in (0, 1]")


class MADDPG:
    """The pieces of the MADDPG learner; ``learner()`` makes the ``Learner``."""

    def __init__(self, cfg, env: ArrayEnv, shaper: Shaper):
        self.cfg, self.env, self.shaper = cfg, env, shaper
        self.num_envs, self.num_steps = int(cfg.num_envs), int(cfg.num_steps)
        self.env_steps_per_update = self.num_envs * self.num_steps
        self.num_updates = int(cfg.total_timesteps) // self.env_steps_per_update
        self.gamma, self.tau = float(cfg.gamma), float(cfg.tau)
        self.temperature = float(cfg.temperature)
        self.team = _name(cfg.team_reward)
        self.needs = set(shaper.fields)
        n, a = env.num_agents, env.num_actions
        hidden = tuple(int(h) for h in cfg.hidden_sizes)
        act, sharing = _name(cfg.activation), _name(cfg.param_sharing)
        self.actor = AgentParams(MLP(hidden, a, act, out_scale=0.01), env.agent_groups, sharing)
        self.critic = AgentParams(CentralCritic(hidden, act), env.agent_groups, sharing)
        self.actor_in = env.obs_dim + (n if cfg.agent_ids else 0)
        self.critic_in = env.world_state_dim + n * a + (n if cfg.agent_ids else 0)
        self.buffer = fbx.make_item_buffer(
            max_length=int(cfg.buffer_size),
            min_length=int(cfg.batch_size),
            sample_batch_size=int(cfg.batch_size),
            add_sequences=False,
            add_batches=True,
        )
        clip = optax.clip_by_global_norm(float(cfg.max_grad_norm))
        self.tx = {
            "actor": optax.chain(clip, optax.adam(float(cfg.actor_lr))),
            "critic": optax.chain(clip, optax.adam(float(cfg.critic_lr))),
        }

    # ----- networks ------------------------------------------------------------------
    def logits(self, actor_params, obs: jax.Array, avail: jax.Array) -> jax.Array:
        """Masked logits ``[..., N, A]`` from obs ``[..., N, D]``."""
        x = with_agent_ids(obs) if self.cfg.agent_ids else obs
        lead = x.shape[:-2]
        flat = x.reshape((-1, *x.shape[-2:]))
        out = self.actor.apply(actor_params, flat, agent_axes=(1,), out_axes=1)
        return masked_logits(out.reshape((*lead, *out.shape[-2:])), avail)

    def q_values(self, critic_params, world_state: jax.Array, joint: jax.Array) -> jax.Array:
        """``Q_i`` ``[..., N]`` from world state ``[..., S]`` and one-hot joint actions
        ``[..., N, A]`` (every agent's critic sees the same joint action)."""
        n = self.env.num_agents
        joints = jnp.broadcast_to(joint[..., None, :, :], (*joint.shape[:-2], n, *joint.shape[-2:]))
        return self.own_q_values(critic_params, world_state, joints)

    def own_q_values(self, critic_params, world_state: jax.Array, joints: jax.Array) -> jax.Array:
        """``Q_i`` ``[..., N]`` where critic ``i`` sees its own joint action
        ``joints[..., i, :, :]`` (``[..., N(i), N, A]``): one critic pass per agent, as the
        actor loss needs (agent ``i``'s sample, the others' stored actions)."""
        n = self.env.num_agents
        flat_joint = joints.reshape((*joints.shape[:-2], -1))  # [..., N(i), N * A]
        ws = jnp.broadcast_to(
            world_state[..., None, :], (*flat_joint.shape[:-1], world_state.shape[-1])
        )
        x = jnp.concatenate([ws, flat_joint], -1)
        x = with_agent_ids(x) if self.cfg.agent_ids else x
        lead = x.shape[:-2]
        flat = x.reshape((-1, n, x.shape[-1]))
        return self.critic.apply(critic_params, flat, agent_axes=(1,), out_axes=1).reshape(
            (*lead, n)
        )

    def init_params(self, rng) -> dict:
        r_actor, r_critic = jax.random.split(rng)
        return {
            "actor": self.actor.init(r_actor, jnp.zeros((1, 1, self.actor_in))),
            "critic": self.critic.init(r_critic, jnp.zeros((1, 1, self.critic_in))),
        }

    def act(self, params, obs, avail, rng) -> jax.Array:
        """Sampled legal actions ``[B, N]`` (the exploration policy)."""
        logits = self.logits(params["actor"], obs, avail)
        return jax.random.categorical(rng, logits).astype(jnp.int32)

    def greedy_act(self, state: MADDPGState, carry, obs, avail, first):
        """The most likely legal action of every actor: ``(None, actions [B, N])``."""
        logits = self.logits(state.params["actor"], obs, avail)
        return carry, jnp.argmax(logits, axis=-1).astype(jnp.int32)

    # ----- buffer --------------------------------------------------------------------
    def _item_spec(self) -> Transition:
        n, env = self.env.num_agents, self.env
        env_state = jax.eval_shape(env.reset, jax.random.PRNGKey(0))[1].env_state
        state_zeros = jax.tree.map(lambda s: jnp.zeros(s.shape, s.dtype), env_state)
        obs = jnp.zeros((n, env.obs_dim), jnp.float32)
        avail = jnp.zeros((n, env.num_actions), bool)
        ws = jnp.zeros((env.world_state_dim,), jnp.float32)
        return Transition(
            obs=obs,
            actions=jnp.zeros((n,), jnp.int32),
            reward=jnp.zeros((n,), jnp.float32),
            done=jnp.zeros((), bool),
            avail=avail,
            world_state=ws,
            next_obs=obs,
            next_avail=avail,
            next_world_state=ws,
            state=state_zeros if "state" in self.needs else None,
            next_state=state_zeros if "next_state" in self.needs else None,
        )

    def rewards(self, shaper_params, items: Transition) -> jax.Array:
        """Training reward ``[B, N]`` of sampled transitions under ``shaper_params``."""
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
        r = shaped_reward(self.shaper, shaper_params, batch)
        if self.team == "none":
            return r
        return jnp.broadcast_to(team_reward(r, self.team)[..., None], r.shape)

    # ----- losses --------------------------------------------------------------------
    def critic_loss(self, critic_params, target_params, items, shaper_params, rng):
        a = self.env.num_actions
        next_logits = self.logits(target_params["actor"], items.next_obs, items.next_avail)
        next_joint = gumbel_softmax_st(rng, next_logits, self.temperature)
        next_q = self.q_values(target_params["critic"], items.next_world_state, next_joint)
        r = self.rewards(shaper_params, items)
        not_done = 1.0 - items.done.astype(jnp.float32)[..., None]
        y = jax.lax.stop_gradient(r + self.gamma * not_done * next_q)
        q = self.q_values(critic_params, items.world_state, jax.nn.one_hot(items.actions, a))
        return jnp.mean((q - y) ** 2), q.mean()

    def actor_loss(self, actor_params, critic_params, items, rng):
        """Each agent's Gumbel-softmax action in turn, the others' stored ones."""
        n, a = self.env.num_agents, self.env.num_actions
        logits = self.logits(actor_params, items.obs, items.avail)  # [B, N, A]
        pi = gumbel_softmax_st(rng, logits, self.temperature)
        stored = jax.nn.one_hot(items.actions, a)
        own = jnp.eye(n, dtype=bool)[None, :, :, None]  # [1, N(i), N, 1]
        joints = jnp.where(own, pi[:, None], stored[:, None])  # [B, N(i), N, A]
        q_own = self.own_q_values(critic_params, items.world_state, joints)  # [B, N]
        legal = items.avail.astype(jnp.float32)
        reg = ((logits * legal) ** 2).sum() / jnp.maximum(legal.sum(), 1.0)
        return -q_own.mean() + float(self.cfg.actor_reg) * reg

    # ----- learning ------------------------------------------------------------------
    def _learn(self, state: MADDPGState, buffer_state, rng):
        def grad_step(carry, key):
            params, target, opt = carry
            k_sample, k_critic, k_actor = jax.random.split(key, 3)
            items = self.buffer.sample(buffer_state, k_sample).experience
            (c_loss, q_mean), c_grads = jax.value_and_grad(self.critic_loss, has_aux=True)(
                params["critic"], target, items, state.shaper_params, k_critic
            )
            c_upd, c_opt = self.tx["critic"].update(c_grads, opt["critic"], params["critic"])
            critic = optax.apply_updates(params["critic"], c_upd)
            a_loss, a_grads = jax.value_and_grad(self.actor_loss)(
                params["actor"], critic, items, k_actor
            )
            a_upd, a_opt = self.tx["actor"].update(a_grads, opt["actor"], params["actor"])
            params = {"actor": optax.apply_updates(params["actor"], a_upd), "critic": critic}
            target = optax.incremental_update(params, target, self.tau)
            grad_norm = optax.tree.norm((c_grads, a_grads))
            out = {"critic_loss": c_loss, "actor_loss": a_loss, "q_mean": q_mean}
            out["grad_norm"] = grad_norm
            return (params, target, {"actor": a_opt, "critic": c_opt}), out

        keys = jax.random.split(rng, int(self.cfg.updates_per_rollout))
        carry = (state.params, state.target_params, state.opt_state)
        (params, target, opt), out = jax.lax.scan(grad_step, carry, keys)
        return params, target, opt, jax.tree.map(jnp.mean, out)

    def _skip(self, state: MADDPGState, buffer_state, rng):
        nan = jnp.full((), jnp.nan, jnp.float32)
        return (
            state.params,
            state.target_params,
            state.opt_state,
            {k: nan for k in LEARN_METRICS},
        )

    # ----- the Learner ---------------------------------------------------------------
    def init(self, rng) -> MADDPGState:
        rng, r_params, r_env = jax.random.split(rng, 3)
        params = self.init_params(r_params)
        obs, env_state = jax.vmap(self.env.reset)(jax.random.split(r_env, self.num_envs))
        return MADDPGState(
            params=params,
            target_params=params,
            opt_state={k: self.tx[k].init(params[k]) for k in ("actor", "critic")},
            buffer=self.buffer.init(self._item_spec()),
            env_state=env_state,
            obs=obs,
            avail=jax.vmap(self.env.avail_actions)(env_state),
            shaper_params=self.shaper.params,
            rng=rng,
            update_step=jnp.zeros((), jnp.int32),
            env_steps=jnp.zeros((), jnp.int32),
        )

    def _policy_step(self, state: MADDPGState, r_act, r_env):
        actions = self.act(state.params, state.obs, state.avail, r_act)
        world_state = jax.vmap(self.env.world_state)(state.env_state, state.obs)
        res = jax.vmap(self.env.step)(
            jax.random.split(r_env, self.num_envs), state.env_state, actions
        )
        next_ws = jax.vmap(self.env.state_vector)(res.terminal_env_state, res.terminal_obs)
        item = Transition(
            obs=state.obs,
            actions=actions,
            reward=res.reward,
            done=res.done,
            avail=state.avail,
            world_state=world_state,
            next_obs=res.terminal_obs,
            next_avail=res.avail_actions,  # only read where the episode goes on
            next_world_state=next_ws,
            state=state.env_state.env_state if "state" in self.needs else None,
            next_state=res.terminal_env_state if "next_state" in self.needs else None,
        )
        state = state.replace(env_state=res.state, obs=res.obs, avail=res.avail_actions)
        return state, item, res

    def _rollout_step(self, state: MADDPGState, _):
        rng, r_act, r_env = jax.random.split(state.rng, 3)
        state, item, res = self._policy_step(state, r_act, r_env)
        return state.replace(rng=rng), (item, res.done, res.info)

    def collect(self, state: MADDPGState, key: jax.Array, steps: int) -> TransitionBatch:
        """``steps`` steps of the current policy (leaves ``[steps, E, ...]``); ``state``
        is unchanged."""

        def act(s, k):
            s_next, item, res = self._policy_step(s, *jax.random.split(k))
            return s_next, item.actions, res

        return collect_steps(self.env, act, state, key, steps)

    def update(self, state: MADDPGState) -> tuple[MADDPGState, dict]:
        state, (items, done, info) = jax.lax.scan(self._rollout_step, state, None, self.num_steps)
        flat = jax.tree.map(lambda x: x.reshape((-1, *x.shape[2:])), items)
        buffer_state = self.buffer.add(state.buffer, flat)
        env_steps = state.env_steps + self.env_steps_per_update
        rng, r_learn = jax.random.split(state.rng)
        can_learn = self.buffer.can_sample(buffer_state) & (env_steps >= self.cfg.learning_starts)
        params, target, opt, learn_metrics = jax.lax.cond(
            can_learn, self._learn, self._skip, state, buffer_state, r_learn
        )
        state = state.replace(
            params=params,
            target_params=target,
            opt_state=opt,
            buffer=buffer_state,
            rng=rng,
            update_step=state.update_step + 1,
            env_steps=env_steps,
        )
        metrics = episode_metrics(done, info, self.env.has_won, self.env.return_reduction)
        metrics.update(learn_metrics)
        return state, metrics

    def learner(self) -> Learner:
        return Learner(
            init=self.init,
            update=self.update,
            num_updates=self.num_updates,
            env_steps_per_update=self.env_steps_per_update,
            collect=self.collect,
            policy=GreedyPolicy(lambda state, num_envs: None, self.greedy_act),
        )


def make_learner(cfg, env: ArrayEnv, shaper: Shaper) -> Learner:
    return MADDPG(cfg, env, shaper).learner()


def make_train(cfg, env: ArrayEnv, shaper: Shaper):
    return make_learner(cfg, env, shaper).train

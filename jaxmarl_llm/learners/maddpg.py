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

The rollout, replay buffer, shaping at sample time and learn-or-skip switch are the
off-policy skeleton's (``offpolicy``); a buffer item is one env step, with its next
observation, legal actions and world state. ``team_reward`` ``none`` trains critic ``i``
on agent ``i``'s reward; ``sum``/``mean`` on the team's.

Metrics per update: the episode metrics of the rollout, then the means over the
update's gradient steps of ``critic_loss``, ``actor_loss``, ``q_mean`` and
``grad_norm`` (NaN until ``learning_starts`` env steps and ``batch_size`` transitions
are stored).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from enum import Enum

import flax.linen as nn
import jax
import jax.numpy as jnp
import optax

from envs.array_env import ArrayEnv
from jaxmarl_llm.learners.base import Learner
from jaxmarl_llm.learners.networks import (
    MLP,
    Activation,
    AgentParams,
    ParamSharing,
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
from jaxmarl_llm.learners.shards import SINGLE, DataShards
from jaxmarl_llm.shaper import Shaper, team_reward
from jaxmarl_llm.transitions import TransitionBatch

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


class MADDPGState(OffPolicyState):
    """MADDPG's train state: ``params``, ``target_params`` and ``opt_state`` hold
    ``{"actor": ..., "critic": ...}``."""


def check_config(cfg) -> None:
    check_offpolicy_config(cfg, TEAM_REWARDS, sequence_items=False)
    for key in ("actor_lr", "critic_lr", "temperature"):
        if getattr(cfg, key) <= 0:
            bad_value(key, getattr(cfg, key), "must be > 0")
    if cfg.actor_reg < 0:
        bad_value("actor_reg", cfg.actor_reg, "must be >= 0")


class MADDPG(OffPolicyLearner):
    """MADDPG on the off-policy skeleton: single-step items, sampled actors, Polyak
    targets after every gradient step."""

    state_cls = MADDPGState
    always_stored = frozenset({"next_obs", "next_avail", "next_world_state"})  # critic targets
    learn_metrics = LEARN_METRICS

    def __init__(self, cfg, env: ArrayEnv, shaper: Shaper, shards: DataShards = SINGLE):
        super().__init__(cfg, env, shaper, shards)
        self.temperature = float(cfg.temperature)
        n, a = env.num_agents, env.num_actions
        hidden = tuple(int(h) for h in cfg.hidden_sizes)
        act, sharing = option_name(cfg.activation), option_name(cfg.param_sharing)
        self.actor = AgentParams(MLP(hidden, a, act, out_scale=0.01), env.agent_groups, sharing)
        self.critic = AgentParams(CentralCritic(hidden, act), env.agent_groups, sharing)
        self.actor_in = env.obs_dim + (n if cfg.agent_ids else 0)
        self.critic_in = env.world_state_dim + n * a + (n if cfg.agent_ids else 0)
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

    def init_opt_state(self, params) -> dict:
        return {k: self.tx[k].init(params[k]) for k in ("actor", "critic")}

    # ----- acting --------------------------------------------------------------------
    def act(self, params, obs, avail, rng) -> jax.Array:
        """Sampled legal actions ``[B, N]`` (the exploration policy)."""
        logits = self.logits(params["actor"], obs, avail)
        return jax.random.categorical(rng, logits).astype(jnp.int32)

    def behaviour(self, state: MADDPGState, rng, explore):
        return self.act(state.params, state.obs, state.avail, rng), None

    def greedy_act(self, state: MADDPGState, carry, obs, avail, first):
        """The most likely legal action of every actor: ``(None, actions [B, N])``."""
        logits = self.logits(state.params["actor"], obs, avail)
        return carry, jnp.argmax(logits, axis=-1).astype(jnp.int32)

    def rewards(self, shaper_params, items: TransitionBatch) -> jax.Array:
        """Training reward ``[B, N]`` of sampled transitions under ``shaper_params``."""
        r = self.shaped_rewards(shaper_params, items)
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
    def grad_step(self, nets: Nets, buffer_state, shaper_params, key) -> tuple[Nets, dict]:
        """The critic, then the actors against the updated critic, then Polyak targets."""
        params, target, opt = nets
        k_sample, k_critic, k_actor = jax.random.split(key, 3)
        items = self.sample_items(buffer_state, k_sample)
        (c_loss, q_mean), c_grads = jax.value_and_grad(self.critic_loss, has_aux=True)(
            params["critic"], target, items, shaper_params, k_critic
        )
        c_loss, q_mean, c_grads = self.shards.mean((c_loss, q_mean, c_grads))
        c_upd, c_opt = self.tx["critic"].update(c_grads, opt["critic"], params["critic"])
        critic = optax.apply_updates(params["critic"], c_upd)
        a_loss, a_grads = jax.value_and_grad(self.actor_loss)(
            params["actor"], critic, items, k_actor
        )
        a_loss, a_grads = self.shards.mean((a_loss, a_grads))
        a_upd, a_opt = self.tx["actor"].update(a_grads, opt["actor"], params["actor"])
        params = {"actor": optax.apply_updates(params["actor"], a_upd), "critic": critic}
        target = optax.incremental_update(params, target, self.tau)
        out = {"critic_loss": c_loss, "actor_loss": a_loss, "q_mean": q_mean}
        out["grad_norm"] = optax.tree.norm((c_grads, a_grads))
        return Nets(params, target, {"actor": a_opt, "critic": c_opt}), out


def make_learner(cfg, env: ArrayEnv, shaper: Shaper, shards: DataShards = SINGLE) -> Learner:
    return MADDPG(cfg, env, shaper, shards).learner()


def make_train(cfg, env: ArrayEnv, shaper: Shaper):
    return make_learner(cfg, env, shaper).train

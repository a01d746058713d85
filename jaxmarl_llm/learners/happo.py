"""HAPPO (Kuba et al., 2022, "Trust Region Policy Optimisation in Multi-Agent
Reinforcement Learning"): heterogeneous-agent PPO with sequential actor updates.

Rollouts, GAE, the centralised critic and the greedy policy are MAPPO's (``ppo.PPO``).
What differs from MAPPO:

- every agent has its own actor parameters (stacked on a leading agent axis), never
  shared, and its own optimiser state; the critic is one network on the world state
  plus the agent id, with its own optimiser;
- each update draws a random order of the agents from the state's key and updates the
  actors one after another, each for ``update_epochs`` epochs of ``num_minibatches``
  minibatches. Agent ``i_m``'s clipped surrogate uses the advantage times
  ``M = prod_{j before i_m} pi_j_new(a_j | o_j) / pi_j_old(a_j | o_j)``, the ratios of
  the agents already updated in this update, evaluated with their new parameters on
  the whole rollout (HARL's ``factor``; not clipped, no gradient through it);
- advantages are normalised once over the whole rollout, before the factors multiply
  them (MAPPO normalises each minibatch);
- the critic is fitted after the actors, on the same epochs-by-minibatches schedule.

Feed-forward only. Everything is time-major ``[T, E, N, ...]`` (steps, envs, agents).
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field

import distrax
import jax
import jax.numpy as jnp
import optax
from flax import struct

from envs.array_env import ArrayEnv
from jaxmarl_llm.errors import ConfigError
from jaxmarl_llm.learners.base import Learner
from jaxmarl_llm.learners.losses import clipped_policy_loss, value_loss
from jaxmarl_llm.learners.networks import MLP, Activation
from jaxmarl_llm.learners.onpolicy import TEAM_REWARDS, OnPolicyConfig
from jaxmarl_llm.learners.ppo import PPO, Batch, PPOState, Rollout, minibatches
from jaxmarl_llm.learners.shards import SINGLE, DataShards
from jaxmarl_llm.shaper import Shaper


@dataclass
class HAPPOConfig(OnPolicyConfig):
    """HAPPO: the on-policy keys (``onpolicy.OnPolicyConfig``), with HARL's HAPPO defaults
    where the keys overlap, and HAPPO's own."""

    name: str = "happo"
    num_envs: int = 20
    num_steps: int = 200
    lr: float = 5e-4
    anneal_lr: bool = False
    update_epochs: int = 5
    num_minibatches: int = 1
    vf_coef: float = 1.0
    max_grad_norm: float = 10.0
    hidden_sizes: list[int] = field(default_factory=lambda: [128, 128])
    activation: Activation = Activation.relu
    agent_ids: bool = False  # own parameters per actor: redundant unless observations look alike
    critic_lr: float | None = None  # the critic's Adam step size, > 0; null: lr
    fixed_order: bool = False  # update the actors in index order instead of a random one


class HAPPOState(PPOState):
    agent_order: jax.Array  # [N] int32: the order the last update's actors were updated in


class ActorBatch(struct.PyTreeNode):
    """One agent's share of a rollout, time-major ``[T, E, ...]``; ``advantages`` is named
    as in ``ppo.Batch`` so that ``ppo.minibatches`` splits it."""

    inputs: jax.Array  # [T, E, D] the actor's inputs
    avail: jax.Array | None  # [T, E, A]
    action: jax.Array  # [T, E]
    log_prob: jax.Array  # [T, E] under the rollout's policy
    advantages: jax.Array  # [T, E] the advantage times the factor M of the earlier agents


def sequential_factors(log_ratios: jax.Array, order: jax.Array) -> jax.Array:
    """HAPPO's factor of every agent: ``log_ratios [..., N]`` holds each agent's
    ``log pi_new(a|o) - log pi_old(a|o)``; ``order [N]`` is the update order (a
    permutation of the agents). Returns ``[..., N]``: agent ``order[m]`` gets
    ``exp(sum_{k < m} log_ratios[..., order[k]])``, the product of the ratios of the
    agents updated before it (1 for the first). The ratios of agents not yet updated
    are never read, so a partly filled ``log_ratios`` gives the factors known so far."""
    in_order = jnp.take(log_ratios, order, axis=-1)
    before = jnp.cumsum(in_order, axis=-1) - in_order  # exclusive prefix sums
    return jnp.take(jnp.exp(before), jnp.argsort(order), axis=-1)


def check_config(cfg) -> None:
    def bad(key, value, why):
        raise ConfigError(f"bad value for config key 'algo.{key}': {value!r}; {why}")

    for key in ("total_timesteps", "num_envs", "num_steps", "lr", "update_epochs",
                "num_minibatches"):  # fmt: skip
        if getattr(cfg, key) <= 0:
            bad(key, getattr(cfg, key), "must be > 0")
    if cfg.critic_lr is not None and cfg.critic_lr <= 0:
        bad("critic_lr", cfg.critic_lr, "must be > 0 (null = algo.lr)")
    if cfg.team_reward not in TEAM_REWARDS:
        bad("team_reward", cfg.team_reward, f"one of {', '.join(TEAM_REWARDS)}")
    units = cfg.num_envs * cfg.num_steps
    if units % cfg.num_minibatches:
        raise ConfigError(
            f"bad value for config key 'algo.num_minibatches': {cfg.num_minibatches} does not "
            f"divide algo.num_envs * algo.num_steps = {units}"
        )
    if cfg.total_timesteps < units:
        bad("total_timesteps", cfg.total_timesteps,
            f"is less than one update (num_envs * num_steps = {units})")  # fmt: skip


class HAPPO(PPO):
    """The HAPPO learner for one config, env and shaper: ``PPO``'s rollout, GAE, acting
    and collection as MAPPO, with per-agent actors updated in sequence (``update``).

    ``params`` and ``opt_state`` are ``{"actor": ..., "critic": ...}``; the actors'
    leaves (parameters and optimiser state) are stacked over agents on axis 0. PPO's
    joint loss and gradient steps (``loss``, ``minibatch_grad``, ``sgd_step``) are not
    used: the actors and the critic have losses and optimisers of their own.
    """

    def __init__(self, cfg, env: ArrayEnv, shaper: Shaper, shards: DataShards = SINGLE):
        # MAPPO's, feed-forward
        self.init_rollout(cfg, env, shaper, centralized=True, recurrent=False, shards=shards)
        self.carry_dim = 1
        self.net = self.actor = self.critic = None

        hidden = tuple(cfg.hidden_sizes)
        activation = str(getattr(cfg.activation, "value", cfg.activation))
        self.actor_net = MLP(hidden, env.num_actions, activation, 0.01)
        self.critic_net = MLP(hidden, 1, activation, 1.0)

        # every agent's actor and the critic take this many optimiser steps
        grad_steps = self.num_updates * cfg.update_epochs * cfg.num_minibatches

        def adam(lr):
            lr = optax.linear_schedule(lr, 0.0, grad_steps) if cfg.anneal_lr else lr
            return optax.chain(
                optax.clip_by_global_norm(cfg.max_grad_norm), optax.adam(lr, eps=1e-5)
            )

        self.actor_tx = adam(cfg.lr)
        self.critic_tx = adam(cfg.critic_lr if cfg.critic_lr is not None else cfg.lr)

    # ----- networks --------------------------------------------------------------------
    def actor_logits(self, actor_params, inputs):
        """Every agent's own actor on its inputs ``[..., N, D]``: logits ``[..., N, A]``."""
        return jax.vmap(self.actor_net.apply, in_axes=(0, -2), out_axes=-2)(actor_params, inputs)

    def critic_value(self, critic_params, inputs):
        """The critic on inputs ``[..., C]``: values ``[...]`` (run on 2-D inputs, XLA:CPU's
        fast GEMM path)."""
        flat = self.critic_net.apply(critic_params, inputs.reshape(-1, inputs.shape[-1]))
        return flat.reshape(inputs.shape[:-1])

    def forward_ff(self, params, obs, avail, world_state):
        """Masked logits ``[..., N, A]`` of the agents' actors and the critic's values
        ``[..., N]`` on obs ``[..., N, D]``."""
        logits = self.actor_logits(params["actor"], self.actor_inputs(obs))
        value = self.critic_value(params["critic"], self.critic_inputs(obs, world_state))
        return self.masked(logits, avail), value

    def init_params(self, rng):
        n = self.env.num_agents
        obs0 = jnp.zeros((self.env.obs_dim + (n if self.cfg.agent_ids else 0),))
        crit0 = jnp.zeros((self.env.world_state_dim + n,))
        r_actor, r_critic = jax.random.split(rng)
        actor_keys = jax.random.split(r_actor, n)
        return {
            "actor": jax.vmap(lambda k: self.actor_net.init(k, obs0))(actor_keys),
            "critic": self.critic_net.init(r_critic, crit0),
        }

    def init_opt_state(self, params):
        return {
            "actor": jax.vmap(self.actor_tx.init)(params["actor"]),
            "critic": self.critic_tx.init(params["critic"]),
        }

    def init(self, rng) -> HAPPOState:
        s = super().init(rng)
        fields = {f.name: getattr(s, f.name) for f in dataclasses.fields(PPOState)}
        return HAPPOState(**fields, agent_order=jnp.arange(self.env.num_agents, dtype=jnp.int32))

    def eval_logits(self, s: HAPPOState, carry, obs, avail, first):
        """Every agent's own actor's masked logits ``[B, N, A]`` (PPO's ``greedy_act`` and
        ``sample_act`` act on them)."""
        logits = self.masked(self.actor_logits(s.params["actor"], self.actor_inputs(obs)), avail)
        return carry, logits

    # ----- losses and steps ------------------------------------------------------------
    def agent_policy(self, agent_params, batch: ActorBatch) -> distrax.Categorical:
        """One agent's policy on its share of a rollout (or a minibatch of it)."""
        return distrax.Categorical(
            logits=self.masked(self.actor_net.apply(agent_params, batch.inputs), batch.avail)
        )

    def actor_loss(self, agent_params, mb: ActorBatch):
        """The clipped surrogate of one agent on its factored advantages, minus entropy."""
        pi = self.agent_policy(agent_params, mb)
        pg_loss, stats = clipped_policy_loss(
            pi.log_prob(mb.action), mb.log_prob, mb.advantages, self.cfg.clip_eps
        )
        entropy = pi.entropy().mean()
        return pg_loss - self.cfg.ent_coef * entropy, {
            "policy_loss": pg_loss,
            "entropy": entropy,
            **stats,
        }

    def critic_loss(self, critic_params, mb: Batch):
        r = mb.rollout
        value = self.critic_value(critic_params, self.critic_inputs(r.obs, r.world_state))
        v_loss = value_loss(value, r.value, mb.targets, self.cfg.clip_eps, self.cfg.clip_value)
        return self.cfg.vf_coef * v_loss, {"value_loss": v_loss}

    def make_sgd_step(self, loss, tx, grad_norm_name: str):
        """``((params, opt_state), minibatch) -> ((params, opt_state), stats)``: one
        optimiser step of ``tx`` on ``loss(params, minibatch) -> (value, stats)``, its
        gradient averaged over data shards."""

        def step(carry, mb):
            params, opt_state = carry
            (_, stats), grads = jax.value_and_grad(loss, has_aux=True)(params, mb)
            grads, stats = self.shards.mean((grads, stats))
            updates, opt_state = tx.update(grads, opt_state, params)
            stats[grad_norm_name] = optax.tree.norm(grads)
            return (optax.apply_updates(params, updates), opt_state), stats

        return step

    def fit(self, step, carry, batch, key):
        """``update_epochs`` epochs of ``num_minibatches`` applications of ``step`` to
        ``batch`` (leaves ``[T, E, ...]``), each epoch on a fresh shuffle of its
        ``(t, e)`` cells: ``(carry, stats [epochs, minibatches])``. One minibatch is the
        whole batch, unshuffled (every loss is a mean, so order cannot matter)."""
        parts = self.cfg.num_minibatches

        def epoch(carry, k):
            if parts == 1:
                mbs = jax.tree.map(lambda x: x.reshape(1, -1, *x.shape[2:]), batch)
            else:
                mbs = minibatches(self.shards.key(k), batch, parts, sequences=False)
            return jax.lax.scan(step, carry, mbs)

        return jax.lax.scan(epoch, carry, jax.random.split(key, self.cfg.update_epochs))

    # ----- the update ------------------------------------------------------------------
    def agent_order(self, key) -> jax.Array:
        """The order ``[N]`` of this update's actor updates."""
        n = self.env.num_agents
        if self.cfg.fixed_order:
            return jnp.arange(n, dtype=jnp.int32)
        return jax.random.permutation(key, n).astype(jnp.int32)

    def update_actors(self, actor_params, actor_opt, traj: Rollout, advantages, order, key):
        """Each actor in turn in ``order``, on advantages ``[T, E, N]`` times the factor of
        the actors updated before it: ``((actor params, actor optimiser state,
        log-ratios [T, E, N] of every agent after its update), stats [N, epochs, mbs])``."""
        inputs = self.actor_inputs(traj.obs)
        step = self.make_sgd_step(self.actor_loss, self.actor_tx, "grad_norm")

        def one_agent(carry, agent_and_key):
            params, opt_state, log_ratios = carry
            agent, k = agent_and_key
            own = lambda tree: jax.tree.map(lambda x: x[agent], tree)
            column = lambda x: None if x is None else jnp.take(x, agent, axis=2)
            factor = sequential_factors(log_ratios, order)[..., agent]
            batch = ActorBatch(
                inputs=column(inputs),
                avail=column(traj.avail),
                action=column(traj.action),
                log_prob=column(traj.log_prob),
                advantages=column(advantages) * factor,
            )
            (agent_params, agent_opt), stats = self.fit(
                step, (own(params), own(opt_state)), batch, k
            )
            new_log_prob = self.agent_policy(agent_params, batch).log_prob(batch.action)
            log_ratios = log_ratios.at[..., agent].set(new_log_prob - batch.log_prob)
            put = lambda tree, new: jax.tree.map(lambda x, y: x.at[agent].set(y), tree, new)
            return (put(params, agent_params), put(opt_state, agent_opt), log_ratios), stats

        log_ratios = jnp.zeros_like(traj.log_prob)
        keys = jax.random.split(key, self.env.num_agents)
        return jax.lax.scan(one_agent, (actor_params, actor_opt, log_ratios), (order, keys))

    def update(self, s: HAPPOState) -> tuple[HAPPOState, dict]:
        """A rollout and its advantages, the actors one by one in a fresh random order,
        then the critic; metrics are means over the steps."""
        s, rng, traj, done, info = self.rollout(s)
        reward_stats, adv, targets = self.advantages(s, traj)
        rng, r_order, r_actors, r_critic = jax.random.split(rng, 4)
        order = self.agent_order(r_order)
        actor_adv = self.shards.normalize(adv) if self.cfg.normalize_advantages else adv
        (actor_params, actor_opt, log_ratios), actor_stats = self.update_actors(
            s.params["actor"], s.opt_state["actor"], traj, actor_adv, order, r_actors
        )
        critic_batch = Batch(rollout=traj, advantages=adv, targets=targets, carries=None)
        critic_step = self.make_sgd_step(self.critic_loss, self.critic_tx, "critic_grad_norm")
        (critic_params, critic_opt), critic_stats = self.fit(
            critic_step, (s.params["critic"], s.opt_state["critic"]), critic_batch, r_critic
        )

        metrics = self.update_metrics({**actor_stats, **critic_stats}, done, info, traj)
        metrics["factor_std"] = self.shards.std(sequential_factors(log_ratios, order))
        s = s.replace(
            params={"actor": actor_params, "critic": critic_params},
            opt_state={"actor": actor_opt, "critic": critic_opt},
            rng=rng,
            update_step=s.update_step + 1,
            reward_stats=reward_stats,
            agent_order=order,
        )
        return s, metrics


def make_learner(cfg, env: ArrayEnv, shaper: Shaper, shards: DataShards = SINGLE) -> Learner:
    """HAPPO for ``env`` with ``shaper``; with ``shards``, one data shard's program."""
    return HAPPO(cfg, env, shaper, shards).learner()


def make_train(cfg, env: ArrayEnv, shaper: Shaper):
    """``train(rng) -> (final state, metrics stacked over updates)``."""
    return make_learner(cfg, env, shaper).train

"""IPPO and MAPPO, feed-forward or GRU, as one learner.

IPPO's critic sees the agent's own observation; MAPPO's sees the centralized world
state plus the agent id. Everything is time-major ``[T, E, N, ...]`` (steps, envs,
agents). Feed-forward minibatches are drawn over ``(t, e)`` cells with all agents of a
cell kept together, which keeps per-group parameters exact and makes the shuffle N
times smaller; recurrent minibatches are drawn over environments, whole sequences.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Any

import chex
import distrax
import jax
import jax.numpy as jnp
import optax
from flax import struct

from envs.array_env import ArrayEnv
from jaxmarl_llm.errors import ConfigError
from jaxmarl_llm.learners.base import (
    Learner,
    TrainState,
    collect_steps,
    episode_metrics,
    step_transitions,
)
from jaxmarl_llm.learners.evaluation import GreedyPolicy
from jaxmarl_llm.learners.losses import clipped_policy_loss, gae, normalize, value_loss
from jaxmarl_llm.learners.networks import (
    Activation,
    ActorCritic,
    AgentParams,
    ParamSharing,
    RecurrentActor,
    RecurrentCritic,
    with_agent_ids,
)
from jaxmarl_llm.learners.permutation import feistel_permutation
from jaxmarl_llm.learners.running_stats import (
    RunningMeanStd,
    standardize,
    update_running_stats,
)
from jaxmarl_llm.shaping.base import Shaper, TransitionBatch, shaped_reward


@dataclass
class PPOConfig:
    """IPPO / MAPPO. Defaults are the common PPO setting (CleanRL/PureJaxRL/JaxMARL)."""

    name: str = "ippo"
    total_timesteps: int = 1_000_000
    num_envs: int = 16
    num_steps: int = 128
    lr: float = 2.5e-4
    anneal_lr: bool = True
    update_epochs: int = 4
    num_minibatches: int = 4
    gamma: float = 0.99
    gae_lambda: float = 0.95
    clip_eps: float = 0.2
    clip_value: bool = True
    ent_coef: float = 0.01
    vf_coef: float = 0.5
    max_grad_norm: float = 0.5
    hidden_sizes: list[int] = field(default_factory=lambda: [64, 64])
    activation: Activation = Activation.tanh
    recurrent: bool = False
    gru_hidden_dim: int = 128
    param_sharing: ParamSharing = ParamSharing.shared
    agent_ids: bool = True
    normalize_advantages: bool = True
    # EPyMARL's standardise_rewards: training rewards (env + shaping) minus their running
    # mean, over their running std, before GAE (its MAPPO/IPPO default on LBF)
    standardize_rewards: bool = False
    # Agent-rows per gradient chunk: each minibatch's gradient is accumulated over
    # chunks of about this size: the same gradient, but activations stay in cache (a
    # 98k-row forward+backward of the 64-64 actor-critic: 143 -> 73 ms on a 2-core CPU).
    # 0 = the whole minibatch at once. null = by backend: 8192 on CPU, 0 on GPU/TPU,
    # where chunking serializes the step (IPPO on MPE at 65,536 envs on an H200:
    # 5.0M env steps/s chunked vs 28.5M whole).
    grad_chunk_rows: int | None = None


MASKED_LOGIT = -1e9  # finite, so masked entries give exp() == 0 without NaN entropies


class PPOState(TrainState):
    params: Any
    opt_state: Any
    obs: jax.Array  # [E, N, D]
    avail: jax.Array | None  # [E, N, A]; None when the env has no action masks
    world_state: jax.Array | None  # [E, S]; None for IPPO (its critic sees the obs)
    last_done: jax.Array  # [E] the previous step ended an episode (GRU reset)
    actor_carry: jax.Array  # [E, N, H] (zeros of width 1 when feed-forward)
    critic_carry: jax.Array  # [E, N, H]
    reward_stats: RunningMeanStd  # of the shaped training reward (standardize_rewards)


class Rollout(struct.PyTreeNode):
    obs: jax.Array  # [T, E, N, D]
    world_state: jax.Array | None  # [T, E, S]
    avail: jax.Array | None  # [T, E, N, A]
    action: jax.Array  # [T, E, N]
    log_prob: jax.Array  # [T, E, N]
    value: jax.Array  # [T, E, N]
    reward: jax.Array  # [T, E, N] shaped training reward
    done: jax.Array  # [T, E]
    reset: jax.Array  # [T, E] the step starts a new episode (GRU carry cleared)


def num_grad_chunks(units: int, rows_per_unit: int, chunk_rows: int) -> int:
    """How many equal chunks to split ``units`` into so each holds about ``chunk_rows``
    rows: the divisor of ``units`` nearest (in ratio) to ``units * rows_per_unit / chunk_rows``."""
    if chunk_rows <= 0 or units * rows_per_unit <= chunk_rows:
        return 1
    target = units * rows_per_unit / chunk_rows
    divisors = [d for d in range(1, units + 1) if units % d == 0]
    return min(divisors, key=lambda d: (abs(math.log(d / target)), d))


CPU_GRAD_CHUNK_ROWS = 8192


def grad_chunk_rows(configured: int | None, backend: str | None = None) -> int:
    """``algo.grad_chunk_rows``, with ``None`` resolved by backend: chunks that fit a CPU's
    cache there, the whole minibatch on an accelerator (chunks would run one by one)."""
    if configured is not None:
        return int(configured)
    return CPU_GRAD_CHUNK_ROWS if (backend or jax.default_backend()) == "cpu" else 0


def check_config(cfg) -> None:
    def bad(key, value, why):
        raise ConfigError(f"bad value for config key 'algo.{key}': {value!r}; {why}")

    if cfg.name not in ("ippo", "mappo"):
        bad("name", cfg.name, "the PPO learner runs ippo or mappo")
    for key in ("total_timesteps", "num_envs", "num_steps", "lr", "update_epochs",
                "num_minibatches"):  # fmt: skip
        if getattr(cfg, key) <= 0:
            bad(key, getattr(cfg, key), "must be > 0")
    if cfg.grad_chunk_rows is not None and cfg.grad_chunk_rows < 0:
        bad(
            "grad_chunk_rows", cfg.grad_chunk_rows, "need >= 0 (0 = no chunking, null = by backend)"
        )
    units = cfg.num_envs if cfg.recurrent else cfg.num_envs * cfg.num_steps
    if units % cfg.num_minibatches:
        what = "algo.num_envs" if cfg.recurrent else "algo.num_envs * algo.num_steps"
        raise ConfigError(
            f"bad value for config key 'algo.num_minibatches': {cfg.num_minibatches} does not "
            f"divide {what} = {units}"
        )
    if cfg.total_timesteps < cfg.num_envs * cfg.num_steps:
        bad(
            "total_timesteps",
            cfg.total_timesteps,
            f"is less than one update (num_envs * num_steps = {cfg.num_envs * cfg.num_steps})",
        )


def make_learner(cfg, env: ArrayEnv, shaper: Shaper) -> Learner:
    centralized = cfg.name == "mappo"
    n, a = env.num_agents, env.num_actions
    T, E = cfg.num_steps, cfg.num_envs
    num_updates = int(cfg.total_timesteps) // (T * E)
    batch_units = E if cfg.recurrent else T * E
    mb_units = batch_units // cfg.num_minibatches
    grad_chunks = num_grad_chunks(
        mb_units, n * (T if cfg.recurrent else 1), grad_chunk_rows(cfg.grad_chunk_rows)
    )
    hidden = tuple(cfg.hidden_sizes)
    activation = str(getattr(cfg.activation, "value", cfg.activation))
    sharing = str(getattr(cfg.param_sharing, "value", cfg.param_sharing))
    needs = set(shaper.fields)

    if cfg.recurrent:
        actor = AgentParams(
            RecurrentActor(a, cfg.gru_hidden_dim, activation), env.agent_groups, sharing
        )
        critic = AgentParams(
            RecurrentCritic(cfg.gru_hidden_dim, activation), env.agent_groups, sharing
        )
        carry_dim = cfg.gru_hidden_dim
    else:
        net = AgentParams(ActorCritic(a, hidden, activation), env.agent_groups, sharing)
        carry_dim = 1

    def actor_inputs(obs):
        return with_agent_ids(obs) if cfg.agent_ids else obs

    def critic_inputs(obs, world_state):
        if not centralized:
            return actor_inputs(obs)
        ws = jnp.broadcast_to(world_state[..., None, :], (*obs.shape[:-1], world_state.shape[-1]))
        return with_agent_ids(ws)  # per-agent values need to know whose value it is

    # Feature widths that cost nothing when unused: IPPO stores no world state and envs
    # without action masks store no masks, so minibatch shuffles move less data.
    use_masks = env.has_action_masks

    def masked(logits, avail):
        return jnp.where(avail, logits, MASKED_LOGIT) if use_masks else logits

    def stored_avail(avail):
        return avail if use_masks else None

    def stored_world_state(env_state, obs):
        return jax.vmap(env.world_state)(env_state, obs) if centralized else None

    def add_time(x):
        return None if x is None else x[None]

    # ---- forward passes ----------------------------------------------------------
    def forward_ff(params, obs, avail, world_state):
        x, c = actor_inputs(obs), critic_inputs(obs, world_state)
        if net.num_groups == 1:
            # 2-D inputs keep XLA:CPU on its fast GEMM path (a [B, N, D] dot and its
            # gradient run markedly slower).
            lead = x.shape[:-1]
            logits, value = net.apply(
                params, x.reshape(-1, x.shape[-1]), c.reshape(-1, c.shape[-1])
            )
            logits, value = logits.reshape(*lead, -1), value.reshape(lead)
        else:
            logits, value = net.apply(params, x, c)
        return masked(logits, avail), value

    def forward_rnn(params, carries, obs, avail, world_state, resets):
        """Sequences ``[T, B, N, ...]`` from carries ``[B, N, H]``."""
        resets = jnp.broadcast_to(resets[..., None], obs.shape[:-1])
        x, c = actor_inputs(obs), critic_inputs(obs, world_state)
        axes = (1, 2, 2)
        a_carry, logits = actor.apply(
            params["actor"], carries[0], x, resets, agent_axes=axes, out_axes=(1, 2)
        )
        c_carry, value = critic.apply(
            params["critic"], carries[1], c, resets, agent_axes=axes, out_axes=(1, 2)
        )
        return (a_carry, c_carry), masked(logits, avail), value

    def init_params(rng):
        obs0 = jnp.zeros((env.obs_dim + (n if cfg.agent_ids else 0),))
        crit0 = jnp.zeros((env.world_state_dim + n,)) if centralized else obs0
        if not cfg.recurrent:
            return net.init(rng, obs0, crit0)
        ra, rc = jax.random.split(rng)
        h0 = jnp.zeros((1, cfg.gru_hidden_dim))
        return {
            "actor": actor.init(ra, h0, obs0[None, None], jnp.zeros((1, 1), bool)),
            "critic": critic.init(rc, h0, crit0[None, None], jnp.zeros((1, 1), bool)),
        }

    grad_steps = num_updates * cfg.update_epochs * cfg.num_minibatches
    lr = optax.linear_schedule(cfg.lr, 0.0, grad_steps) if cfg.anneal_lr else cfg.lr
    tx = optax.chain(optax.clip_by_global_norm(cfg.max_grad_norm), optax.adam(lr, eps=1e-5))

    # ---- init ----------------------------------------------------------------------
    def init(rng) -> PPOState:
        rng, r_params, r_env = jax.random.split(rng, 3)
        params = init_params(r_params)
        obs, env_state = jax.vmap(env.reset)(jax.random.split(r_env, E))
        return PPOState(
            params=params,
            opt_state=tx.init(params),
            env_state=env_state,
            obs=obs,
            avail=stored_avail(jax.vmap(env.avail_actions)(env_state)),
            world_state=stored_world_state(env_state, obs),
            last_done=jnp.ones((E,), bool),
            actor_carry=jnp.zeros((E, n, carry_dim)),
            critic_carry=jnp.zeros((E, n, carry_dim)),
            shaper_params=shaper.params,
            rng=rng,
            update_step=jnp.zeros((), jnp.int32),
            reward_stats=RunningMeanStd.create(),
        )

    # ---- rollout -------------------------------------------------------------------
    def policy_step(s: PPOState, r_act, r_env):
        """One step of every env under the current policy: ``(next state, rollout
        record, env step result)``."""
        if cfg.recurrent:
            (ac, cc), logits, value = forward_rnn(
                s.params,
                (s.actor_carry, s.critic_carry),
                s.obs[None],
                add_time(s.avail),
                add_time(s.world_state),
                s.last_done[None],
            )
            logits, value = logits[0], value[0]
        else:
            logits, value = forward_ff(s.params, s.obs, s.avail, s.world_state)
            ac, cc = s.actor_carry, s.critic_carry
        pi = distrax.Categorical(logits=logits)
        action, log_prob = pi.sample_and_log_prob(seed=r_act)
        res = jax.vmap(env.step)(jax.random.split(r_env, E), s.env_state, action)
        step = Rollout(
            obs=s.obs,
            world_state=s.world_state,
            avail=s.avail,
            action=action,
            log_prob=log_prob,
            value=value,
            reward=res.reward,
            done=res.done,
            reset=s.last_done,
        )
        s_next = s.replace(
            env_state=res.state,
            obs=res.obs,
            avail=stored_avail(res.avail_actions),
            world_state=stored_world_state(res.state, res.obs),
            last_done=res.done,
            actor_carry=ac,
            critic_carry=cc,
        )
        return s_next, step, res

    def rollout_step(carry, _):
        s, rng = carry
        rng, r_act, r_env = jax.random.split(rng, 3)
        s_next, step, res = policy_step(s, r_act, r_env)
        batch = step_transitions(env, s.obs, step.action, s.env_state, res, needs)
        step = step.replace(reward=shaped_reward(shaper, s.shaper_params, batch))
        return (s_next, rng), (step, res.done, res.info)

    def collect(s: PPOState, key: jax.Array, steps: int) -> TransitionBatch:
        """``steps`` steps of the current policy from the learner's env states (leaves
        ``[steps, E, ...]``, env reward); ``s`` is left as it was."""

        def act(s, k):
            s_next, step, res = policy_step(s, *jax.random.split(k))
            return s_next, step.action, res

        return collect_steps(env, act, s, key, steps)

    def greedy_act(s: PPOState, carry, obs, avail, first):
        """The most likely legal action of every agent (the actor alone)."""
        x = actor_inputs(obs)
        if cfg.recurrent:
            resets = jnp.broadcast_to(first[:, None], obs.shape[:-1])[None]
            carry, logits = actor.apply(
                s.params["actor"], carry, x[None], resets, agent_axes=(1, 2, 2), out_axes=(1, 2)
            )
            logits = logits[0]
        elif net.num_groups == 1:
            flat = net.apply(s.params, x.reshape(-1, x.shape[-1]), method="policy_logits")
            logits = flat.reshape(*x.shape[:-1], -1)
        else:
            logits = net.apply(s.params, x, method="policy_logits")
        return carry, jnp.argmax(masked(logits, avail), axis=-1).astype(jnp.int32)

    def greedy_carry(s: PPOState, num_envs: int):
        return jnp.zeros((num_envs, n, cfg.gru_hidden_dim)) if cfg.recurrent else None

    # ---- loss ----------------------------------------------------------------------
    def loss_fn(params, mb: Rollout, adv, targets, carries):
        if cfg.recurrent:
            _, logits, value = forward_rnn(
                params, carries, mb.obs, mb.avail, mb.world_state, mb.reset
            )
        else:
            logits, value = forward_ff(params, mb.obs, mb.avail, mb.world_state)
        pi = distrax.Categorical(logits=logits)
        log_prob = pi.log_prob(mb.action)
        pg_loss, stats = clipped_policy_loss(log_prob, mb.log_prob, adv, cfg.clip_eps)
        v_loss = value_loss(value, mb.value, targets, cfg.clip_eps, cfg.clip_value)
        entropy = pi.entropy().mean()
        total = pg_loss + cfg.vf_coef * v_loss - cfg.ent_coef * entropy
        return total, {"policy_loss": pg_loss, "value_loss": v_loss, "entropy": entropy, **stats}

    grad_fn = jax.value_and_grad(loss_fn, has_aux=True)

    def split_units(data, parts: int):
        """Split ``(rollout, adv, targets, carries)`` into ``parts`` equal pieces of
        units (env axis 1 of sequences and axis 0 of carries when recurrent, axis 0 of
        flat cells otherwise), stacked along a new axis 0."""
        if cfg.recurrent:
            rollout, adv, targets, carries = data
            seq = lambda x: x.reshape(x.shape[0], parts, -1, *x.shape[2:]).swapaxes(0, 1)
            flat = lambda x: x.reshape(parts, -1, *x.shape[1:])
            return (*jax.tree.map(seq, (rollout, adv, targets)), jax.tree.map(flat, carries))
        return jax.tree.map(lambda x: x.reshape(parts, -1, *x.shape[1:]), data)

    def minibatch_grad(params, mb):
        """Loss gradient over one minibatch, accumulated chunk by chunk. Every loss term
        is a mean over equal-size chunks, so the mean of chunk gradients is exact."""
        rollout, adv, targets, carries = mb
        if cfg.normalize_advantages:
            adv = normalize(adv)  # minibatch statistics, as without chunks
        if grad_chunks == 1:
            (_, stats), grads = grad_fn(params, rollout, adv, targets, carries)
            return grads, stats

        def one_chunk(_, part):
            (_, stats), grads = grad_fn(params, *part)
            return None, (grads, stats)

        _, (grads, stats) = jax.lax.scan(
            one_chunk, None, split_units((rollout, adv, targets, carries), grad_chunks)
        )
        return jax.tree.map(lambda x: x.mean(axis=0), (grads, stats))

    def sgd_step(carry, mb):
        params, opt_state = carry
        grads, stats = minibatch_grad(params, mb)
        updates, opt_state = tx.update(grads, opt_state, params)
        params = optax.apply_updates(params, updates)
        stats["grad_norm"] = optax.tree.norm(grads)
        return (params, opt_state), stats

    def minibatches(rng, data):
        """Shuffle the batch and split it into ``num_minibatches`` along a new axis 0."""
        perm = feistel_permutation(rng, batch_units)
        if cfg.recurrent:  # whole sequences: shuffle the env axis of [T, E, ...], carries [E, ...]
            rollout, adv, targets, carries = data
            shuffled = (
                *jax.tree.map(lambda x: jnp.take(x, perm, axis=1), (rollout, adv, targets)),
                jax.tree.map(lambda x: jnp.take(x, perm, axis=0), carries),
            )
        else:  # (t, e) cells of [T, E, ...], all agents of a cell together
            cells = lambda x: jnp.take(x.reshape(batch_units, *x.shape[2:]), perm, axis=0)
            shuffled = jax.tree.map(cells, data)
        return split_units(shuffled, cfg.num_minibatches)

    # ---- one update ------------------------------------------------------------------
    def update(s: PPOState) -> tuple[PPOState, dict]:
        carries0 = (s.actor_carry, s.critic_carry) if cfg.recurrent else None
        (s, rng), (traj, done, info) = jax.lax.scan(rollout_step, (s, s.rng), None, T)
        if cfg.recurrent:
            _, _, last_value = forward_rnn(
                s.params,
                (s.actor_carry, s.critic_carry),
                s.obs[None],
                add_time(s.avail),
                add_time(s.world_state),
                s.last_done[None],
            )
            last_value = last_value[0]
        else:
            _, last_value = forward_ff(s.params, s.obs, s.avail, s.world_state)
        reward_stats, train_reward = s.reward_stats, traj.reward
        if cfg.standardize_rewards:
            reward_stats = update_running_stats(reward_stats, traj.reward)
            train_reward = standardize(reward_stats, traj.reward)
        adv, targets = gae(
            train_reward, traj.value, traj.done[..., None], last_value, cfg.gamma, cfg.gae_lambda
        )
        data = (traj, adv, targets, carries0)

        def run_epoch(carry, r):
            return jax.lax.scan(sgd_step, carry, minibatches(r, data))

        rng, r_epochs = jax.random.split(rng)
        (params, opt_state), stats = jax.lax.scan(
            run_epoch, (s.params, s.opt_state), jax.random.split(r_epochs, cfg.update_epochs)
        )
        metrics = {k: v.mean() for k, v in stats.items()}
        metrics.update(episode_metrics(done, info, env.has_won, env.return_reduction))
        metrics["reward_mean"] = traj.reward.mean()
        s = s.replace(
            params=params,
            opt_state=opt_state,
            rng=rng,
            update_step=s.update_step + 1,
            reward_stats=reward_stats,
        )
        return s, metrics

    chex.assert_equal(mb_units * cfg.num_minibatches, batch_units)
    return Learner(
        init=init,
        update=update,
        num_updates=num_updates,
        env_steps_per_update=T * E,
        collect=collect,
        policy=GreedyPolicy(greedy_carry, greedy_act),
    )


def make_train(cfg, env: ArrayEnv, shaper: Shaper):
    return make_learner(cfg, env, shaper).train

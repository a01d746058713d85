"""IPPO and MAPPO, feed-forward or GRU, as one learner.

IPPO's critic sees the agent's own observation; MAPPO's (an algorithm with
``AlgoSpec.centralized_critic``) sees the centralized world state plus the agent id.
Everything is time-major ``[T, E, N, ...]`` (steps, envs, agents). Feed-forward
minibatches are drawn over ``(t, e)`` cells with all agents of a cell kept together,
which keeps per-group parameters exact and makes the shuffle N times smaller; recurrent
minibatches are drawn over environments, whole sequences.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

import distrax
import jax
import jax.numpy as jnp
import optax
from flax import struct

from envs.array_env import ArrayEnv
from jaxmarl_llm.errors import ConfigError
from jaxmarl_llm.learners.acting import collect_steps, step_envs, step_transitions, unroll
from jaxmarl_llm.learners.base import Learner, LearnerParts, TrainState, episode_metrics
from jaxmarl_llm.learners.losses import clipped_policy_loss, gae, nstep_returns, value_loss
from jaxmarl_llm.learners.networks import (
    ActorCritic,
    AgentParams,
    CommNetActorCritic,
    ParamSharing,
    RecurrentActor,
    RecurrentCritic,
    apply_recurrent_flat,
    with_agent_ids,
)
from jaxmarl_llm.learners.onpolicy import TEAM_REWARDS, OnPolicyConfig
from jaxmarl_llm.learners.permutation import feistel_permutation
from jaxmarl_llm.learners.registry import algo_spec
from jaxmarl_llm.learners.running_stats import (
    RunningMeanStd,
    standardize,
    update_running_stats,
)
from jaxmarl_llm.learners.shards import SINGLE, DataShards
from jaxmarl_llm.shaper import Shaper, potential_shaping, shaped_reward, team_reward
from jaxmarl_llm.transitions import TransitionBatch


@dataclass
class PPOConfig(OnPolicyConfig):
    """IPPO / MAPPO: the on-policy keys (``onpolicy.OnPolicyConfig``) and PPO's own."""

    name: str = "ippo"  # ippo (critic on the agent's obs) or mappo (on the world state)
    recurrent: bool = False  # GRU actor and critic, minibatches of whole env sequences
    gru_hidden_dim: int = 128  # the GRUs' width (recurrent only)
    param_sharing: ParamSharing = ParamSharing.shared  # shared, per_group or per_agent
    commnet_steps: int = 0  # CommNet rounds (teammates' mean hidden state) in the actor; 0: none
    returns: str = "gae"  # value targets: gae, or nstep (n_step returns: EPyMARL's q_nstep)
    n_step: int = 5  # steps of the n-step returns (returns=nstep), >= 1
    target_critic_tau: float = 0.0  # soft-update rate of the nstep target critic in [0, 1]; 0: none
    separate_optimizers: bool = False  # actor and critic each get their own Adam and clip
    grad_chunk_rows: int | None = None  # rows per gradient chunk; 0: unchunked; null: by backend


MASKED_LOGIT = -1e9  # finite, so masked entries give exp() == 0 without NaN entropies


def critic_or_actor_labels(params):
    """``"critic"`` for every parameter under a ``critic`` name in its path (the GRU
    critic's ``{"critic": ...}``, ``ActorCritic``'s ``critic`` MLP), else ``"actor"``."""

    def label(path, _):
        names = [str(getattr(k, "key", getattr(k, "name", k))) for k in path]
        return "critic" if any("critic" in n for n in names) else "actor"

    return jax.tree_util.tree_map_with_path(label, params)


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
    target_params: Any  # the target critic's copy of params (target_critic_tau > 0), or None


class Rollout(struct.PyTreeNode):
    """What the policy did at each step of a rollout, time-major."""

    obs: jax.Array  # [T, E, N, D]
    world_state: jax.Array | None  # [T, E, S]
    avail: jax.Array | None  # [T, E, N, A]
    action: jax.Array  # [T, E, N]
    log_prob: jax.Array  # [T, E, N]
    value: jax.Array  # [T, E, N]
    reward: jax.Array  # [T, E, N] shaped training reward
    done: jax.Array  # [T, E]
    reset: jax.Array  # [T, E] the step starts a new episode (GRU carry cleared)


class Batch(struct.PyTreeNode):
    """What the gradient steps read: a rollout with its advantages and value targets,
    time-major ``[T, E, ...]``, and the GRU carries before its first step (``None`` when
    feed-forward). ``shuffle_units`` and ``split_units`` lay it out by units."""

    rollout: Rollout  # [T, E, ...]
    advantages: jax.Array  # [T, E, N]
    targets: jax.Array  # [T, E, N] value targets
    carries: tuple[jax.Array, jax.Array] | None  # actor, critic: [E, N, H] each


def shuffle_units(batch: Batch, perm: jax.Array, sequences: bool) -> Batch:
    """Reorder ``batch`` by ``perm`` over its units. ``sequences``: the units are whole
    env sequences (env axis 1 of ``[T, E, ...]``, axis 0 of the carries), the layout
    stays. Otherwise the units are the ``(t, e)`` cells, with all agents of a cell kept
    together: every leaf ``[T, E, ...]`` becomes ``[T * E, ...]`` in ``perm`` order."""
    if sequences:
        env_axis = lambda x: jnp.take(x, perm, axis=1)
        return Batch(
            rollout=jax.tree.map(env_axis, batch.rollout),
            advantages=env_axis(batch.advantages),
            targets=env_axis(batch.targets),
            carries=jax.tree.map(lambda x: jnp.take(x, perm, axis=0), batch.carries),
        )
    cells = lambda x: jnp.take(x.reshape(perm.shape[0], *x.shape[2:]), perm, axis=0)
    return jax.tree.map(cells, batch)


def split_units(batch: Batch, parts: int, sequences: bool) -> Batch:
    """Split ``batch`` into ``parts`` equal runs of consecutive units, stacked along a new
    axis 0. ``sequences``: env axis 1 of ``[T, E, ...]`` (-> ``[parts, T, E / parts,
    ...]``) and axis 0 of the carries; otherwise axis 0 of cells ``[U, ...]`` (-> ``[parts,
    U / parts, ...]``)."""
    flat = lambda x: x.reshape(parts, -1, *x.shape[1:])
    if sequences:
        seq = lambda x: x.reshape(x.shape[0], parts, -1, *x.shape[2:]).swapaxes(0, 1)
        return Batch(
            rollout=jax.tree.map(seq, batch.rollout),
            advantages=seq(batch.advantages),
            targets=seq(batch.targets),
            carries=jax.tree.map(flat, batch.carries),
        )
    return jax.tree.map(flat, batch)


def map_units(batch: Batch, fn, sequences: bool, stacked: bool) -> Batch:
    """``fn(leaf, axis)`` on every leaf of ``batch`` along its unit axis: the env axis
    with ``sequences`` (axis 1 of ``[T, E, ...]``, axis 0 of the carries; also the layout
    of any batch before ``minibatches``), else cells (axis 0 of ``[U, ...]``); one axis
    further where minibatches are ``stacked`` along a new axis 0."""
    lead = int(stacked)
    if not sequences:
        return jax.tree.map(lambda x: fn(x, lead), batch)
    on_envs = lambda x: fn(x, lead + 1)
    return Batch(
        rollout=jax.tree.map(on_envs, batch.rollout),
        advantages=on_envs(batch.advantages),
        targets=on_envs(batch.targets),
        carries=jax.tree.map(lambda x: fn(x, lead), batch.carries),
    )


def minibatches(rng: jax.Array, batch: Batch, parts: int, sequences: bool) -> Batch:
    """A time-major ``batch`` shuffled by a Feistel permutation of its units (env
    sequences, or ``(t, e)`` cells) and split into ``parts`` minibatches along a new
    axis 0."""
    T, E = batch.advantages.shape[:2]
    perm = feistel_permutation(rng, E if sequences else T * E)
    return split_units(shuffle_units(batch, perm, sequences), parts, sequences)


def num_grad_chunks(units: int, rows_per_unit: int, chunk_rows: int) -> int:
    """How many equal chunks to split ``units`` into so each holds about ``chunk_rows``
    rows: the divisor of ``units`` nearest (in ratio) to ``units * rows_per_unit / chunk_rows``."""
    if chunk_rows <= 0 or units * rows_per_unit <= chunk_rows:
        return 1
    target = units * rows_per_unit / chunk_rows
    divisors = [d for d in range(1, units + 1) if units % d == 0]
    return min(divisors, key=lambda d: (abs(math.log(d / target)), d))


CPU_GRAD_CHUNK_ROWS = 8192


def grad_chunk_rows(
    configured: int | None, backend: str | None = None, recurrent: bool = False
) -> int:
    """``algo.grad_chunk_rows``: each minibatch's gradient is accumulated over chunks of
    about this many agent-rows, the same gradient with activations kept in cache (a
    98k-row forward and backward of the 64-64 actor-critic: 143 -> 73 ms on a 2-core
    CPU); 0: the whole minibatch at once. ``None`` is resolved by backend: chunks that fit
    a CPU's cache there, the whole minibatch on an accelerator, where chunks run one by one
    (IPPO on MPE at 65,536 envs on an H200: 5.0M env steps/s chunked vs 28.5M whole). A
    recurrent minibatch is whole by default: its GEMMs are per step, ``B * N`` rows each,
    already cache-sized, and chunks only halve them (MAPPO-RNN on SMAX 3m, 2-core CPU:
    3,481 env steps/s whole vs 3,111 in two chunks)."""
    if configured is not None:
        return int(configured)
    if recurrent:
        return 0
    return CPU_GRAD_CHUNK_ROWS if (backend or jax.default_backend()) == "cpu" else 0


def check_config(cfg) -> None:
    def bad(key, value, why):
        raise ConfigError(f"bad value for config key 'algo.{key}': {value!r}; {why}")

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
    if cfg.team_reward not in TEAM_REWARDS:
        bad("team_reward", cfg.team_reward, f"one of {', '.join(TEAM_REWARDS)}")
    returns = getattr(cfg, "returns", "gae")
    if returns not in ("gae", "nstep"):
        bad("returns", returns, "gae or nstep")
    if getattr(cfg, "n_step", 1) < 1:
        bad("n_step", cfg.n_step, "must be >= 1")
    tau = getattr(cfg, "target_critic_tau", 0.0)
    if not 0.0 <= tau <= 1.0:
        bad("target_critic_tau", tau, "a soft-update rate in [0, 1]")
    if tau > 0 and returns != "nstep":
        bad(
            "target_critic_tau",
            tau,
            "a target critic bootstraps n-step returns: set algo.returns=nstep",
        )
    if cfg.total_timesteps < cfg.num_envs * cfg.num_steps:
        bad(
            "total_timesteps",
            cfg.total_timesteps,
            f"is less than one update (num_envs * num_steps = {cfg.num_envs * cfg.num_steps})",
        )


class PPO(LearnerParts):
    """The pieces of the IPPO/MAPPO learner for one config, env and shaper.

    ``init``/``update`` make the ``Learner``; the forward passes, ``policy_step``,
    ``advantages``, ``loss`` and ``minibatch_grad`` are exposed for tests. All are pure
    and jittable. The networks are ``net`` (the feed-forward actor-critic) or
    ``actor``/``critic`` (GRUs), the others ``None``.
    """

    def init_rollout(
        self,
        cfg,
        env: ArrayEnv,
        shaper: Shaper,
        centralized: bool,
        recurrent: bool,
        shards: DataShards = SINGLE,
    ) -> None:
        """The settings the rollout, GAE and acting read (HAPPO shares them).
        ``num_envs`` is this data shard's env count; ``env_steps_per_update`` counts
        every shard's."""
        self.cfg, self.env, self.shaper = cfg, env, shaper
        self.centralized, self.recurrent = centralized, recurrent
        self.shards = shards
        self.num_envs = shards.local(int(cfg.num_envs), "num_envs")
        self.num_steps = int(cfg.num_steps)
        self.env_steps_per_update = self.num_steps * int(cfg.num_envs)
        # each shard shuffles its own units into num_minibatches minibatches, or (exact)
        # holds its equal part of each minibatch of all shards' units: the same count
        self.batch_units = self.num_envs * (1 if recurrent else self.num_steps)
        if self.batch_units % cfg.num_minibatches:
            what = "envs" if recurrent else "env steps"
            raise ConfigError(
                f"bad value for config key 'algo.num_minibatches': {cfg.num_minibatches} does "
                f"not divide the {self.batch_units} {what} of each of the {shards.count} data "
                "shards"
            )
        self.num_updates = int(cfg.total_timesteps) // self.env_steps_per_update
        # a potential-based shaper's phi is carried through the rollout; it reads no batch
        self.carries_potential = shaper.potential is not None
        self.needs = set() if self.carries_potential else set(shaper.fields)
        # Feature widths that cost nothing when unused: IPPO stores no world state and
        # envs without action masks store no masks, so minibatch shuffles move less data.
        self.use_masks = env.has_action_masks
        self.communicates = int(getattr(cfg, "commnet_steps", 0)) > 0
        self.target_tau = float(getattr(cfg, "target_critic_tau", 0.0))

    def __init__(self, cfg, env: ArrayEnv, shaper: Shaper, shards: DataShards = SINGLE):
        centralized = algo_spec(cfg.name).centralized_critic
        self.init_rollout(cfg, env, shaper, centralized, bool(cfg.recurrent), shards)

        mb_units = self.batch_units // cfg.num_minibatches
        rows_per_unit = env.num_agents * (self.num_steps if self.recurrent else 1)
        self.grad_chunks = num_grad_chunks(
            mb_units,
            rows_per_unit,
            grad_chunk_rows(cfg.grad_chunk_rows, recurrent=self.recurrent),
        )

        a = env.num_actions
        activation = str(getattr(cfg.activation, "value", cfg.activation))
        sharing = str(getattr(cfg.param_sharing, "value", cfg.param_sharing))
        if self.communicates and (self.recurrent or sharing != "shared"):
            raise ConfigError(
                "algo.commnet_steps > 0 needs a feed-forward actor with shared parameters "
                f"(got recurrent={self.recurrent}, param_sharing={sharing})"
            )
        self.net = self.actor = self.critic = None
        if self.recurrent:
            gru = cfg.gru_hidden_dim
            self.actor = AgentParams(RecurrentActor(a, gru, activation), env.agent_groups, sharing)
            self.critic = AgentParams(RecurrentCritic(gru, activation), env.agent_groups, sharing)
            self.carry_dim = gru
        else:
            hidden = tuple(cfg.hidden_sizes)
            if self.communicates:
                module = CommNetActorCritic(a, hidden, activation, int(cfg.commnet_steps))
            else:
                module = ActorCritic(a, hidden, activation)
            self.net = AgentParams(module, env.agent_groups, sharing)
            self.carry_dim = 1

        grad_steps = self.num_updates * cfg.update_epochs * cfg.num_minibatches
        lr = optax.linear_schedule(cfg.lr, 0.0, grad_steps) if cfg.anneal_lr else cfg.lr
        adam = lambda: optax.chain(
            optax.clip_by_global_norm(cfg.max_grad_norm), optax.adam(lr, eps=1e-5)
        )
        if getattr(cfg, "separate_optimizers", False):
            if self.communicates:
                raise ConfigError("algo.separate_optimizers needs the MLP or GRU actor-critic")
            self.tx = optax.multi_transform(
                {"actor": adam(), "critic": adam()}, critic_or_actor_labels
            )
        else:
            self.tx = adam()

    # ----- inputs and networks -------------------------------------------------------
    def actor_inputs(self, obs):
        """Actor inputs ``[..., N, D(+N)]``: the obs, with one-hot agent ids if configured."""
        return with_agent_ids(obs) if self.cfg.agent_ids else obs

    def critic_inputs(self, obs, world_state):
        """Critic inputs ``[..., N, C]``: IPPO's are the actor's; MAPPO's are the world
        state ``[..., S]`` given to every agent, with its agent id."""
        if not self.centralized:
            return self.actor_inputs(obs)
        ws = jnp.broadcast_to(world_state[..., None, :], (*obs.shape[:-1], world_state.shape[-1]))
        return with_agent_ids(ws)  # per-agent values need to know whose value it is

    def masked(self, logits, avail):
        """Logits ``[..., N, A]`` with illegal actions at ``MASKED_LOGIT`` (envs with masks)."""
        return jnp.where(avail, logits, MASKED_LOGIT) if self.use_masks else logits

    def stored_avail(self, avail):
        """The action masks ``[E, N, A]`` to keep in the state, ``None`` without masks."""
        return avail if self.use_masks else None

    def stored_world_state(self, env_state, obs):
        """The world state ``[E, S]`` to keep in the state, ``None`` for IPPO."""
        return jax.vmap(self.env.world_state)(env_state, obs) if self.centralized else None

    def forward_ff(self, params, obs, avail, world_state):
        """Feed-forward actor-critic on obs ``[..., N, D]``: (masked logits ``[..., N, A]``,
        values ``[..., N]``)."""
        x, c = self.actor_inputs(obs), self.critic_inputs(obs, world_state)
        if self.net.num_groups == 1 and not self.communicates:
            # 2-D inputs keep XLA:CPU on its fast GEMM path (a [B, N, D] dot and its
            # gradient run markedly slower).
            lead = x.shape[:-1]
            logits, value = self.net.apply(
                params, x.reshape(-1, x.shape[-1]), c.reshape(-1, c.shape[-1])
            )
            logits, value = logits.reshape(*lead, -1), value.reshape(lead)
        else:
            logits, value = self.net.apply(params, x, c)
        return self.masked(logits, avail), value

    def forward_rnn(self, params, carries, obs, avail, world_state, resets):
        """GRU actor and critic over sequences ``[T, B, N, ...]`` from carries ``[B, N, H]``,
        cleared where ``resets`` ``[T, B]`` is set: (carries, masked logits ``[T, B, N, A]``,
        values ``[T, B, N]``)."""
        resets = jnp.broadcast_to(resets[..., None], obs.shape[:-1])
        x, c = self.actor_inputs(obs), self.critic_inputs(obs, world_state)
        a_carry, logits = apply_recurrent_flat(self.actor, params["actor"], carries[0], x, resets)
        c_carry, value = apply_recurrent_flat(self.critic, params["critic"], carries[1], c, resets)
        return (a_carry, c_carry), self.masked(logits, avail), value

    def forward_state(self, params, s: PPOState):
        """The networks on the state's current obs (one step): (carries ``[E, N, H]`` after
        it, masked logits ``[E, N, A]``, values ``[E, N]``)."""
        if not self.recurrent:
            logits, value = self.forward_ff(params, s.obs, s.avail, s.world_state)
            return (s.actor_carry, s.critic_carry), logits, value
        add_time = lambda x: None if x is None else x[None]
        carries, logits, value = self.forward_rnn(
            params,
            (s.actor_carry, s.critic_carry),
            s.obs[None],
            add_time(s.avail),
            add_time(s.world_state),
            s.last_done[None],
        )
        return carries, logits[0], value[0]

    def init_params(self, rng):
        """Fresh parameters: the actor-critic's, or ``{"actor", "critic"}`` GRUs'."""
        n = self.env.num_agents
        obs0 = jnp.zeros((self.env.obs_dim + (n if self.cfg.agent_ids else 0),))
        crit0 = jnp.zeros((self.env.world_state_dim + n,)) if self.centralized else obs0
        if self.communicates:  # CommNet's actor sees the agent axis
            return self.net.init(rng, jnp.stack([obs0] * n), jnp.stack([crit0] * n))
        if not self.recurrent:
            return self.net.init(rng, obs0, crit0)
        ra, rc = jax.random.split(rng)
        h0 = jnp.zeros((1, self.cfg.gru_hidden_dim))
        return {
            "actor": self.actor.init(ra, h0, obs0[None, None], jnp.zeros((1, 1), bool)),
            "critic": self.critic.init(rc, h0, crit0[None, None], jnp.zeros((1, 1), bool)),
        }

    def init_opt_state(self, params):
        """The optimiser state of fresh ``params``."""
        return self.tx.init(params)

    # ----- acting ----------------------------------------------------------------------
    def init(self, rng) -> PPOState:
        """Fresh parameters and optimiser, ``num_envs`` reset envs, zero carries."""
        rng, r_params, r_env = jax.random.split(rng, 3)
        params = self.init_params(r_params)
        E, n = self.num_envs, self.env.num_agents
        obs, env_state = jax.vmap(self.env.reset)(self.shards.env_keys(self.shards.key(r_env), E))
        return PPOState(
            params=params,
            opt_state=self.init_opt_state(params),
            env_state=env_state,
            obs=obs,
            avail=self.stored_avail(jax.vmap(self.env.avail_actions)(env_state)),
            world_state=self.stored_world_state(env_state, obs),
            last_done=jnp.ones((E,), bool),
            actor_carry=jnp.zeros((E, n, self.carry_dim)),
            critic_carry=jnp.zeros((E, n, self.carry_dim)),
            shaper_params=self.shaper.params,
            rng=rng,
            update_step=jnp.zeros((), jnp.int32),
            reward_stats=RunningMeanStd.create(),
            target_params=params if self.target_tau > 0 else None,
        )

    def policy_step(self, s: PPOState, r_act, r_env):
        """One step of every env under the current policy: ``(next state, rollout
        record, env step result)``; the record's reward is the env's."""
        (ac, cc), logits, value = self.forward_state(s.params, s)
        r_act, r_env = self.shards.key(r_act), self.shards.key(r_env)
        pi = distrax.Categorical(logits=logits)
        action, log_prob = self.shards.sample_and_log_prob(r_act, pi)
        res = step_envs(self.env, s.env_state, action, r_env, self.shards)
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
            avail=self.stored_avail(res.avail_actions),
            world_state=self.stored_world_state(res.state, res.obs),
            last_done=res.done,
            actor_carry=ac,
            critic_carry=cc,
        )
        return s_next, step, res

    def greedy_act(self, s: PPOState, carry, obs, avail, first):
        """The most likely legal action of every agent (the actor alone): obs ``[B, N, D]``
        -> ``(carry, actions [B, N])``."""
        carry, logits = self.eval_logits(s, carry, obs, avail, first)
        return carry, jnp.argmax(logits, axis=-1).astype(jnp.int32)

    def sample_act(self, s: PPOState, carry, obs, avail, first, key):
        """Every agent's action drawn from its policy over the legal actions, as EPyMARL's
        test episodes draw them."""
        carry, logits = self.eval_logits(s, carry, obs, avail, first)
        return carry, jax.random.categorical(key, logits, axis=-1).astype(jnp.int32)

    def eval_logits(self, s: PPOState, carry, obs, avail, first):
        """The actor's masked logits ``[B, N, A]`` for evaluation, and its next carry."""
        x = self.actor_inputs(obs)
        if self.recurrent:
            resets = jnp.broadcast_to(first[:, None], obs.shape[:-1])[None]
            carry, logits = apply_recurrent_flat(
                self.actor, s.params["actor"], carry, x[None], resets
            )
            logits = logits[0]
        elif self.net.num_groups == 1 and not self.communicates:
            flat = self.net.apply(s.params, x.reshape(-1, x.shape[-1]), method="policy_logits")
            logits = flat.reshape(*x.shape[:-1], -1)
        else:
            logits = self.net.apply(s.params, x, method="policy_logits")
        return carry, self.masked(logits, avail)

    def greedy_carry(self, s: PPOState, num_envs: int):
        """The actor's starting carry ``[num_envs, N, H]`` for evaluation (None if FF)."""
        if not self.recurrent:
            return None
        return jnp.zeros((num_envs, self.env.num_agents, self.cfg.gru_hidden_dim))

    # ----- rollout ---------------------------------------------------------------------
    def rollout_step(self, carry, t, r_act, r_env):
        """``policy_step`` with the shaped training reward in the record; a
        potential-based shaper's phi of the current states is carried beside the state."""
        s, phi = carry
        s_next, step, res = self.policy_step(s, r_act, r_env)
        if self.carries_potential:
            phi_after = self.shaper.potential(s.shaper_params, res.state.env_state)
            reward = potential_shaping(self.shaper, res.reward, res.done, phi, phi_after)
            phi = phi_after
        else:
            batch = step_transitions(self.env, s.obs, step.action, s.env_state, res, self.needs)
            reward = shaped_reward(self.shaper, s.shaper_params, batch)
        if self.cfg.team_reward != "none":
            reward = jnp.broadcast_to(
                team_reward(reward, self.cfg.team_reward)[..., None], reward.shape
            )
        step = step.replace(reward=reward)
        return (s_next, phi), (step, res.done, res.info)

    def rollout(self, s: PPOState):
        """``num_steps`` steps of every env, the key carried from ``s.rng`` (``s.rng``
        stays as it was): ``(state after them, key left, Rollout [T, E, ...], done [T,
        E], step infos [T, E, ...])``."""
        # phi of the starting states, under the current shaper parameters (which may have
        # changed since the last rollout)
        phi = (
            self.shaper.potential(s.shaper_params, s.env_state.env_state)
            if self.carries_potential
            else None
        )
        (s, _), rng, (traj, done, info) = unroll(
            self.rollout_step, (s, phi), s.rng, self.num_steps, carried_key=True
        )
        return s, rng, traj, done, info

    def collect(self, s: PPOState, key: jax.Array, steps: int) -> TransitionBatch:
        """``steps`` steps of the current policy from the learner's env states (leaves
        ``[steps, E, ...]``, env reward); ``s`` is left as it was."""

        def act(s, r_act, r_env):
            s_next, step, res = self.policy_step(s, r_act, r_env)
            return s_next, step.action, res

        return collect_steps(self.env, act, s, key, steps)

    # ----- advantages ------------------------------------------------------------------
    def advantages(self, s: PPOState, traj: Rollout, carries0=None):
        """GAE over ``traj``, bootstrapped from the value of ``s``'s obs (the state after
        the rollout): ``(reward stats, advantages [T, E, N], value targets [T, E, N])``.
        With ``standardize_rewards`` the running reward stats are updated with ``traj``'s
        rewards first, and those rewards are standardised by them. With ``returns:
        nstep`` the targets are n-step returns, bootstrapped from the target critic where
        there is one (replayed over ``traj`` from the GRU carries ``carries0`` it started
        from), and the advantages are the targets minus the critic's values."""
        _, _, last_value = self.forward_state(s.params, s)
        reward_stats, train_reward = s.reward_stats, traj.reward
        if self.cfg.standardize_rewards:
            reward_stats = update_running_stats(reward_stats, traj.reward, self.shards)
            train_reward = standardize(reward_stats, traj.reward)
        if getattr(self.cfg, "returns", "gae") == "nstep":
            values, last = traj.value, last_value
            if s.target_params is not None:
                values, last = self.target_values(s, traj, carries0)
            targets = nstep_returns(
                train_reward, traj.done[..., None], values, last, self.cfg.gamma, self.cfg.n_step
            )
            return reward_stats, targets - traj.value, targets
        adv, targets = gae(
            train_reward,
            traj.value,
            traj.done[..., None],
            last_value,
            self.cfg.gamma,
            self.cfg.gae_lambda,
        )
        return reward_stats, adv, targets

    def target_values(self, s: PPOState, traj: Rollout, carries0):
        """The target critic's values over ``traj`` ``[T, E, N]`` and of the obs after it
        ``[E, N]``. A GRU target critic replays the rollout from the online critic's
        carry at its start (the target keeps no carry of its own)."""
        tp = s.target_params
        _, _, last = self.forward_state(tp, s)
        if not self.recurrent:
            _, values = self.forward_ff(tp, traj.obs, traj.avail, traj.world_state)
        else:
            _, _, values = self.forward_rnn(
                tp, carries0, traj.obs, traj.avail, traj.world_state, traj.reset
            )
        return values, last

    # ----- the gradient step -----------------------------------------------------------
    def loss(self, params, batch: Batch):
        """PPO's clipped loss on a (minibatch or chunk) ``batch``: ``(total, stats)``."""
        mb = batch.rollout
        if self.recurrent:
            _, logits, value = self.forward_rnn(
                params, batch.carries, mb.obs, mb.avail, mb.world_state, mb.reset
            )
        else:
            logits, value = self.forward_ff(params, mb.obs, mb.avail, mb.world_state)
        cfg = self.cfg
        pi = distrax.Categorical(logits=logits)
        log_prob = pi.log_prob(mb.action)
        pg_loss, stats = clipped_policy_loss(log_prob, mb.log_prob, batch.advantages, cfg.clip_eps)
        v_loss = value_loss(value, mb.value, batch.targets, cfg.clip_eps, cfg.clip_value)
        entropy = pi.entropy().mean()
        total = pg_loss + cfg.vf_coef * v_loss - cfg.ent_coef * entropy
        return total, {"policy_loss": pg_loss, "value_loss": v_loss, "entropy": entropy, **stats}

    def minibatch_grad(self, params, mb: Batch):
        """Loss gradient over one minibatch, accumulated over ``grad_chunks`` chunks of
        it: ``(grads, stats)``. Every loss term is a mean over equal-size chunks, so the
        mean of chunk gradients is exact."""
        if self.cfg.normalize_advantages:
            # minibatch statistics, over every shard's part of the minibatch
            mb = mb.replace(advantages=self.shards.normalize(mb.advantages))
        grad_fn = jax.value_and_grad(self.loss, has_aux=True)
        if self.grad_chunks == 1:
            (_, stats), grads = grad_fn(params, mb)
            return self.shards.mean((grads, stats))

        def one_chunk(_, chunk):
            (_, stats), grads = grad_fn(params, chunk)
            return None, (grads, stats)

        chunks = split_units(mb, self.grad_chunks, self.recurrent)
        _, (grads, stats) = jax.lax.scan(one_chunk, None, chunks)
        return self.shards.mean(jax.tree.map(lambda x: x.mean(axis=0), (grads, stats)))

    def sgd_step(self, carry, mb: Batch):
        """One optimiser step on minibatch ``mb``: ``((params, opt_state), stats)``."""
        params, opt_state = carry
        grads, stats = self.minibatch_grad(params, mb)
        updates, opt_state = self.tx.update(grads, opt_state, params)
        params = optax.apply_updates(params, updates)
        stats["grad_norm"] = optax.tree.norm(grads)
        return (params, opt_state), stats

    # ----- the update ------------------------------------------------------------------
    def update_metrics(self, stats: dict, done: jax.Array, info: dict, traj: Rollout) -> dict:
        """An update's metrics: the means of its step statistics, the rollout's episode
        metrics and its mean training reward."""
        metrics = {k: v.mean() for k, v in stats.items()}
        metrics.update(
            episode_metrics(done, info, self.env.has_won, self.env.return_reduction, self.shards)
        )
        metrics["reward_mean"] = self.shards.mean(traj.reward.mean())
        return metrics

    def update(self, s: PPOState) -> tuple[PPOState, dict]:
        """A rollout, its advantages, then ``update_epochs`` epochs of ``num_minibatches``
        SGD steps, each epoch on a fresh shuffle; metrics are means over the steps."""
        cfg = self.cfg
        carries0 = (s.actor_carry, s.critic_carry) if self.recurrent else None
        s, rng, traj, done, info = self.rollout(s)
        reward_stats, adv, targets = self.advantages(s, traj, carries0)
        batch = Batch(rollout=traj, advantages=adv, targets=targets, carries=carries0)
        if self.shards.is_exact:  # every shard holds all envs; minibatches split over shards
            batch = map_units(batch, self.shards.gather, sequences=True, stacked=False)

        def run_epoch(carry, r):
            mbs = minibatches(self.shards.key(r), batch, cfg.num_minibatches, self.recurrent)
            if self.shards.is_exact:
                mbs = map_units(mbs, self.shards.local_part, self.recurrent, stacked=True)
            return jax.lax.scan(self.sgd_step, carry, mbs)

        rng, r_epochs = jax.random.split(rng)
        (params, opt_state), stats = jax.lax.scan(
            run_epoch, (s.params, s.opt_state), jax.random.split(r_epochs, cfg.update_epochs)
        )
        metrics = self.update_metrics(stats, done, info, traj)
        target = s.target_params
        if target is not None:  # soft update, once per update as EPyMARL's learner does
            tau = self.target_tau
            target = jax.tree.map(lambda t, p: (1.0 - tau) * t + tau * p, target, params)
        s = s.replace(
            params=params,
            opt_state=opt_state,
            rng=rng,
            update_step=s.update_step + 1,
            reward_stats=reward_stats,
            target_params=target,
        )
        return s, metrics


def make_learner(cfg, env: ArrayEnv, shaper: Shaper, shards: DataShards = SINGLE) -> Learner:
    """IPPO or MAPPO (``cfg.name``), feed-forward or GRU, for ``env`` with ``shaper``;
    with ``shards``, the program of one of its data shards."""
    return PPO(cfg, env, shaper, shards).learner()


def make_train(cfg, env: ArrayEnv, shaper: Shaper):
    """``train(rng) -> (final state, metrics stacked over updates)``."""
    return make_learner(cfg, env, shaper).train

"""The replay-buffer learner skeleton that QMIX/VDN/QPLEX and MADDPG share.

Each update plays ``num_steps`` steps of the exploring policy in each of ``num_envs``
auto-resetting envs, adds the rollout to a flashbax item buffer and, once
``learning_starts`` env steps are done and ``batch_size`` items are stored, takes
``updates_per_rollout`` gradient steps, each on a batch it samples itself; before that
the learner's metrics are NaN, like the episode metrics of an update in which no episode
ended. A buffer item is one env's whole rollout (``sequence_items``: leaves ``[T, ...]``,
for recurrent agents) or one env step (leaves ``[...]``).

The buffer holds env rewards only, and of ``next_obs``/``next_avail``/``next_world_state``/
``state``/``next_state`` only those the shaper reads or the learner itself needs
(``always_stored``). Rewards are shaped when a batch is sampled, with the shaper
parameters in the train state, so new shaper parameters re-score old transitions.

Keys: a rollout step splits ``state.rng`` into (next rng, acting key, env key); after the
rollout ``state.rng`` splits into (next rng, learning key), and the learning key into one
key per gradient step.

A learner subclasses ``OffPolicyLearner`` and supplies its networks and optimiser
(``init_params``, ``init_opt_state``), its exploring and greedy policies (``behaviour``,
``greedy_act``, optionally ``exploration``), its gradient step (``grad_step`` and the
``learn_metrics`` it returns) and, where it has them, a recurrent carry
(``init_policy_state``, ``advance``, ``rollout_items``, ``greedy_carry``), target updates
outside the gradient step (``update_targets``) and metrics of the exploring policy
(``rollout_metrics``).
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from typing import Any, NamedTuple, NoReturn

import flashbax as fbx
import jax
import jax.numpy as jnp

from envs.array_env import ArrayEnv
from jaxmarl_llm.errors import ConfigError
from jaxmarl_llm.learners.acting import collect_steps, step_envs, step_transitions, unroll
from jaxmarl_llm.learners.base import LearnerParts, TrainState, episode_metrics
from jaxmarl_llm.learners.networks import ParamSharing
from jaxmarl_llm.learners.shards import SINGLE, DataShards
from jaxmarl_llm.shaper import Shaper, shaped_reward
from jaxmarl_llm.transitions import TransitionBatch

# the item fields stored only when the shaper or the learner reads them
OPTIONAL_FIELDS = ("next_obs", "next_avail", "next_world_state", "state", "next_state")


def option_name(x) -> str:
    """The string of a config option given as an enum member or a string."""
    return str(getattr(x, "value", x))


def bad_value(key: str, value: Any, why: str) -> NoReturn:
    raise ConfigError(f"bad value for config key 'algo.{key}': {value!r}; {why}")


def check_offpolicy_config(cfg, team_rewards: tuple[str, ...], sequence_items: bool) -> None:
    """The checks of the keys every off-policy learner has (a ConfigError naming the key);
    ``team_rewards`` are the learner's valid ``team_reward`` values, ``sequence_items``
    its buffer layout (see ``OffPolicyLearner``)."""
    if option_name(cfg.team_reward) not in team_rewards:
        bad_value("team_reward", cfg.team_reward, f"valid: {', '.join(team_rewards)}")
    try:
        ParamSharing(option_name(cfg.param_sharing))
    except ValueError:
        valid = ", ".join(p.value for p in ParamSharing)
        bad_value("param_sharing", cfg.param_sharing, f"valid: {valid}")
    for key in (
        "total_timesteps", "num_envs", "num_steps", "buffer_size", "batch_size",
        "updates_per_rollout", "max_grad_norm",
    ):  # fmt: skip
        if getattr(cfg, key) <= 0:
            bad_value(key, getattr(cfg, key), "must be > 0")
    if cfg.learning_starts < 0:
        bad_value("learning_starts", cfg.learning_starts, "must be >= 0")
    if cfg.batch_size > cfg.buffer_size:
        bad_value("batch_size", cfg.batch_size, f"must be <= buffer_size ({cfg.buffer_size})")
    rollout = cfg.num_envs if sequence_items else cfg.num_envs * cfg.num_steps
    if rollout > cfg.buffer_size:
        what = "num_envs" if sequence_items else "num_envs * num_steps"
        bad_value(
            "buffer_size", cfg.buffer_size, f"must hold one rollout: {what} = {rollout} items"
        )
    if cfg.total_timesteps < cfg.num_envs * cfg.num_steps:
        bad_value(
            "total_timesteps",
            cfg.total_timesteps,
            f"must be >= num_envs * num_steps = {cfg.num_envs * cfg.num_steps} (one update)",
        )
    if not 0.0 <= cfg.gamma <= 1.0:
        bad_value("gamma", cfg.gamma, "must be in [0, 1]")
    if not 0.0 < cfg.tau <= 1.0:
        bad_value("tau", cfg.tau, "must be in (0, 1]")


class Nets(NamedTuple):
    """What gradient steps change: parameters, target parameters, optimiser state."""

    params: Any
    target_params: Any
    opt_state: Any


class OffPolicyState(TrainState):
    params: Any
    target_params: Any
    opt_state: Any
    buffer: Any  # flashbax item buffer state, experience leaves [1, buffer_size, item...]
    obs: jax.Array  # [E, N, D]
    avail: jax.Array  # [E, N, A] bool, legal actions at obs
    env_steps: jax.Array  # [] int32, env steps summed over envs


class OffPolicyLearner(LearnerParts, ABC):
    """An off-policy learner for one config, env and shaper; ``learner()`` makes the
    ``Learner``. Every method is pure and jittable."""

    state_cls: type[OffPolicyState] = OffPolicyState
    sequence_items: bool = False  # an item is one env's rollout [T, ...], not one step
    always_stored: frozenset[str] = frozenset()  # optional item fields the learner reads
    learn_metrics: tuple[str, ...] = ()  # the metrics grad_step returns
    shard_local_state = True  # each data shard's replay buffer

    def __init__(self, cfg, env: ArrayEnv, shaper: Shaper, shards: DataShards = SINGLE):
        """With ``shards``, the program of one data shard: ``num_envs`` of its own, a
        buffer of ``buffer_size / shards`` items it alone fills, and gradient steps on
        ``batch_size / shards`` items it samples from it, the gradient averaged over
        shards (a sampled batch is the union of equal parts of every shard's buffer).
        Exact shards instead each hold the whole buffer, add every shard's items to it,
        sample the batch one device samples and learn on their equal part of it."""
        self.cfg, self.env, self.shaper, self.shards = cfg, env, shaper, shards
        self.num_envs = shards.local(int(cfg.num_envs), "num_envs")
        self.total_envs = int(cfg.num_envs)  # every shard's
        self.num_steps = int(cfg.num_steps)
        self.env_steps_per_update = int(cfg.num_envs) * self.num_steps
        self.num_updates = int(cfg.total_timesteps) // self.env_steps_per_update
        self.gamma, self.tau = float(cfg.gamma), float(cfg.tau)
        self.team = option_name(cfg.team_reward)
        self.stored = frozenset(
            f for f in OPTIONAL_FIELDS if f in self.always_stored or f in shaper.fields
        )
        batch_size = shards.local(int(cfg.batch_size), "batch_size")
        if shards.is_exact:  # every shard holds the whole buffer and samples whole batches
            if not self.sequence_items:
                raise ConfigError("mesh.exact needs a learner whose buffer items are sequences")
            batch_size, buffer_size = int(cfg.batch_size), int(cfg.buffer_size)
        else:
            buffer_size = shards.local(int(cfg.buffer_size), "buffer_size")
        self.buffer = fbx.make_item_buffer(
            max_length=buffer_size,
            min_length=batch_size,
            sample_batch_size=batch_size,
            add_sequences=False,
            add_batches=True,
        )

    # ----- what each learner supplies -------------------------------------------------
    @abstractmethod
    def init_params(self, rng) -> Any:
        """Fresh parameters (the target parameters start as a copy)."""

    @abstractmethod
    def init_opt_state(self, params) -> Any:
        """The optimiser state of fresh ``params``."""

    @abstractmethod
    def behaviour(self, state: OffPolicyState, rng, explore) -> tuple[jax.Array, Any]:
        """The exploring actions ``[E, N]`` at ``state.obs`` and the policy carry after
        them (``None`` for a feed-forward policy); ``explore`` is ``exploration``'s."""

    @abstractmethod
    def grad_step(self, nets: Nets, buffer_state, shaper_params, key) -> tuple[Nets, dict]:
        """One gradient step on a batch sampled from ``buffer_state`` with (part of)
        ``key``: the new nets and scalar metrics named by ``learn_metrics``."""

    @abstractmethod
    def greedy_act(self, state: OffPolicyState, carry, obs, avail, first):
        """The greedy policy (``GreedyPolicy.act``): ``(carry, actions [B, N])``."""

    def exploration(self, env_steps: jax.Array) -> Any:
        """What ``behaviour`` explores with after ``env_steps`` env steps (an epsilon);
        ``None`` where the policy explores by itself."""
        return None

    def init_policy_state(self, num_envs: int) -> dict:
        """The learner's own state fields of ``num_envs`` fresh episodes (a carry)."""
        return {}

    def advance(self, state: OffPolicyState, carry, res) -> OffPolicyState:
        """The train state after one env step (``res``, a vmapped ``StepResult``)."""
        return state.replace(env_state=res.state, obs=res.obs, avail=res.avail_actions)

    def rollout_items(self, start: OffPolicyState, steps: TransitionBatch) -> TransitionBatch:
        """The buffer items of a rollout from ``start`` whose steps have leaves ``[T, E,
        ...]``: ``[E, T, ...]`` (sequence items) or ``[T * E, ...]``."""
        if self.sequence_items:
            return jax.tree.map(lambda x: jnp.swapaxes(x, 0, 1), steps)
        return jax.tree.map(lambda x: x.reshape((-1, *x.shape[2:])), steps)

    def update_targets(self, nets: Nets, update_step: jax.Array) -> Any:
        """Target parameters after update ``update_step`` (1-based) is learned."""
        return nets.target_params

    def rollout_metrics(self, start: OffPolicyState) -> dict:
        """Metrics of the exploring policy at the start of an update."""
        return {}

    def greedy_carry(self, state: OffPolicyState, num_envs: int) -> Any:
        """The greedy policy's carry for fresh episodes (``GreedyPolicy.init_carry``)."""
        return None

    # ----- buffer ---------------------------------------------------------------------
    def item_spec(self) -> TransitionBatch:
        """Zeros with the layout of one stored item (flashbax infers storage from it)."""
        env, n = self.env, self.env.num_agents
        lead = (self.num_steps,) if self.sequence_items else ()

        def zeros(*shape, dtype=jnp.float32):
            return jnp.zeros((*lead, *shape), dtype)

        def kept(name, value):
            return value if name in self.stored else None

        env_state = jax.eval_shape(env.reset, jax.random.PRNGKey(0))[1].env_state
        state_zeros = jax.tree.map(lambda s: zeros(*s.shape, dtype=s.dtype), env_state)
        return TransitionBatch(
            obs=zeros(n, env.obs_dim),
            actions=zeros(n, dtype=jnp.int32),
            reward=zeros(n),
            done=zeros(dtype=bool),
            avail=zeros(n, env.num_actions, dtype=bool),
            world_state=zeros(env.world_state_dim),
            next_obs=kept("next_obs", zeros(n, env.obs_dim)),
            next_avail=kept("next_avail", zeros(n, env.num_actions, dtype=bool)),
            next_world_state=kept("next_world_state", zeros(env.world_state_dim)),
            state=kept("state", state_zeros),
            next_state=kept("next_state", state_zeros),
        )

    def buffer_nbytes(self) -> int:
        """Bytes the replay buffer state occupies (from shapes; nothing is allocated)."""
        shapes = jax.eval_shape(lambda: self.buffer.init(self.item_spec()))
        return int(sum(x.size * x.dtype.itemsize for x in jax.tree.leaves(shapes)))

    def sample_items(self, buffer_state, key) -> TransitionBatch:
        """``batch_size`` stored items, leaves ``[B, item...]``."""
        return self.buffer.sample(buffer_state, key).experience

    def sample(self, state: OffPolicyState, key) -> TransitionBatch:
        """``batch_size`` items of the train state's buffer, leaves ``[B, item...]``."""
        return self.sample_items(state.buffer, key)

    def shaped_rewards(self, shaper_params, items: TransitionBatch) -> jax.Array:
        """Per-agent training reward ``[..., N]`` of stored items under ``shaper_params``."""
        return shaped_reward(self.shaper, shaper_params, items)

    # ----- acting ---------------------------------------------------------------------
    def _policy_step(self, state: OffPolicyState, r_act, r_env, explore):
        """One exploring step of every env: ``(next state, item [E, ...], step result)``."""
        stored = self.stored
        actions, carry = self.behaviour(state, self.shards.key(r_act), explore)
        res = step_envs(self.env, state.env_state, actions, self.shards.key(r_env), self.shards)
        fields = stored | {"world_state"}
        item = step_transitions(self.env, state.obs, actions, state.env_state, res, fields)
        item = item.replace(
            next_obs=item.next_obs if "next_obs" in stored else None,
            avail=state.avail,
            next_avail=res.avail_actions if "next_avail" in stored else None,
        )
        return self.advance(state, carry, res), item, res

    def _rollout_step(self, state: OffPolicyState, t, r_act, r_env):
        explore = self.exploration(state.env_steps + t * self.total_envs)
        state, item, res = self._policy_step(state, r_act, r_env, explore)
        return state, (item, res.done, res.info)

    def collect(self, state: OffPolicyState, key: jax.Array, steps: int) -> TransitionBatch:
        """``steps`` exploring steps (exploring as at the start of the next update) from
        the learner's env states, leaves ``[steps, E, ...]``; ``state`` is unchanged."""
        explore = self.exploration(state.env_steps)

        def act(s, r_act, r_env):
            s_next, item, res = self._policy_step(s, r_act, r_env, explore)
            return s_next, item.actions, res

        return collect_steps(self.env, act, state, key, steps)

    # ----- learning -------------------------------------------------------------------
    def _learn(self, state: OffPolicyState, buffer_state, rng) -> tuple[Nets, dict]:
        def step(nets, key):
            return self.grad_step(nets, buffer_state, state.shaper_params, self.shards.key(key))

        keys = jax.random.split(rng, int(self.cfg.updates_per_rollout))
        nets = Nets(state.params, state.target_params, state.opt_state)
        nets, out = jax.lax.scan(step, nets, keys)
        return nets, jax.tree.map(jnp.mean, out)

    def _skip(self, state: OffPolicyState, buffer_state, rng) -> tuple[Nets, dict]:
        nan = jnp.full((), jnp.nan, jnp.float32)
        nets = Nets(state.params, state.target_params, state.opt_state)
        return nets, {k: nan for k in self.learn_metrics}

    # ----- the Learner ----------------------------------------------------------------
    def init(self, rng) -> OffPolicyState:
        rng, r_params, r_env = jax.random.split(rng, 3)
        params = self.init_params(r_params)
        r_env = self.shards.key(r_env)
        obs, env_state = jax.vmap(self.env.reset)(self.shards.env_keys(r_env, self.num_envs))
        return self.state_cls(
            params=params,
            target_params=params,
            opt_state=self.init_opt_state(params),
            buffer=self.buffer.init(self.item_spec()),
            env_state=env_state,
            obs=obs,
            avail=jax.vmap(self.env.avail_actions)(env_state),
            shaper_params=self.shaper.params,
            rng=rng,
            update_step=jnp.zeros((), jnp.int32),
            env_steps=jnp.zeros((), jnp.int32),
            **self.init_policy_state(self.num_envs),
        )

    def update(self, state: OffPolicyState) -> tuple[OffPolicyState, dict]:
        start = state
        state, rng, (steps, done, info) = unroll(
            self._rollout_step, state, state.rng, self.num_steps, carried_key=True
        )
        state = state.replace(rng=rng)
        items = self.rollout_items(start, steps)
        if self.shards.is_exact:  # all shards' envs' items, in the one-device order
            items = jax.tree.map(lambda x: self.shards.gather(x, 0), items)
        buffer_state = self.buffer.add(state.buffer, items)
        env_steps = state.env_steps + self.env_steps_per_update
        rng, r_learn = jax.random.split(state.rng)
        can_learn = self.buffer.can_sample(buffer_state) & (env_steps >= self.cfg.learning_starts)
        nets, learn_metrics = jax.lax.cond(
            can_learn, self._learn, self._skip, state, buffer_state, r_learn
        )
        update_step = state.update_step + 1
        state = state.replace(
            params=nets.params,
            target_params=self.update_targets(nets, update_step),
            opt_state=nets.opt_state,
            buffer=buffer_state,
            rng=rng,
            update_step=update_step,
            env_steps=env_steps,
        )
        metrics = episode_metrics(
            done, info, self.env.has_won, self.env.return_reduction, self.shards
        )
        metrics.update(learn_metrics)
        metrics.update(self.rollout_metrics(start))
        return state, metrics

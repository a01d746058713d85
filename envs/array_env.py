"""Array view of a jaxmarl ``MultiAgentEnv``: what every learner steps.

jaxmarl environments speak dicts keyed by agent name. Learners want stacked arrays
``[num_agents, ...]`` in ``env.agents`` order, auto-reset, episode statistics, the
true terminal observation (for reward shaping) and action masks. ``ArrayEnv`` gives
that once, so no learner reshuffles dicts on its own.

Observations of agents with different shapes are flattened and zero-padded to the
largest; action spaces of different sizes are padded and the padding is masked out
of ``avail_actions``.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, NamedTuple

import chex
import jax
import jax.numpy as jnp
import numpy as np
from flax import struct
from jaxmarl.environments.multi_agent_env import MultiAgentEnv

WonFn = Callable[[MultiAgentEnv, Any], jax.Array]
WorldStateFn = Callable[[MultiAgentEnv, Any, jax.Array], jax.Array]
StatsFn = Callable[[MultiAgentEnv, Any], dict]


@struct.dataclass
class ArrayEnvState:
    env_state: Any
    episode_return: jax.Array  # [N] running per-agent return of the current episode
    episode_length: jax.Array  # [] int32


class StepResult(NamedTuple):
    """One auto-resetting step.

    ``obs``/``state`` continue the rollout (reset ones where the episode ended);
    ``terminal_obs``/``terminal_env_state`` are the true next observation and env
    state before any reset, which is what a shaper needs at the last step.
    """

    obs: jax.Array  # [N, D]
    state: ArrayEnvState
    reward: jax.Array  # [N]
    done: jax.Array  # [] bool: the episode ended at this step
    avail_actions: jax.Array  # [N, A] bool, for the returned ``state``
    terminal_obs: jax.Array  # [N, D]
    terminal_env_state: Any
    # episode_return [N], episode_length [], won [], stats {name: []} where the env has
    # stats (valid where done)
    info: dict


def _strong_types(tree):
    """Drop JAX weak types from array leaves (dtypes are kept).

    jaxmarl reset states hold weak-typed leaves (``jnp.array(0)``, stacked Python ints)
    that come back strongly typed from a step, so a jitted step would compile twice.
    """
    return jax.tree.map(
        lambda x: jax.lax.convert_element_type(x, x.dtype) if isinstance(x, jax.Array) else x,
        tree,
    )


def _space_dim(space) -> int:
    if hasattr(space, "n"):
        return int(space.n)
    return int(np.prod(space.shape))


class ArrayEnv:
    """Stacked-array, auto-resetting view of a jaxmarl ``MultiAgentEnv``.

    Args:
        env: any jaxmarl ``MultiAgentEnv`` with discrete actions.
        won_fn: ``(env, env_state) -> bool``; where given, episodes report a win flag.
        stats_fn: ``(env, env_state) -> {name: scalar}`` of a terminal state; where given,
            every ended episode reports these statistics (``info['stats']``), and the
            learners log their means as ``stat_<name>``.
        world_state_fn: ``(env, env_state, obs[N, D]) -> [S]`` centralized state for
            MAPPO critics and QMIX mixers. Default: all agents' observations concatenated.
        world_state_reads_obs: whether ``world_state_fn`` reads ``obs`` (False for one
            computed from the env state alone, as SMAX's); where it does not, a shaper
            that only needs the next world state need not store next observations.
        agent_groups: group index per agent, for separate parameters per group.
        return_reduction: how the logged episode return reduces per-agent returns:
            ``mean`` (every agent gets the team reward, as in SMAX) or ``sum`` (MPE, as
            jaxmarl's MPE logger and the on-policy MAPPO codebase report it).
    """

    def __init__(
        self,
        env: MultiAgentEnv,
        won_fn: WonFn | None = None,
        world_state_fn: WorldStateFn | None = None,
        agent_groups: tuple[int, ...] | None = None,
        return_reduction: str = "mean",
        world_state_reads_obs: bool = True,
        stats_fn: StatsFn | None = None,
    ):
        if return_reduction not in ("mean", "sum"):
            raise ValueError(f"return_reduction must be 'mean' or 'sum', got {return_reduction!r}")
        self.return_reduction = return_reduction
        self.env = env
        self.agents: list[str] = list(env.agents)
        self.num_agents = len(self.agents)
        self._obs_dims = [_space_dim(env.observation_space(a)) for a in self.agents]
        self._act_dims = [_space_dim(env.action_space(a)) for a in self.agents]
        for a in self.agents:
            if not hasattr(env.action_space(a), "n"):
                raise ValueError(
                    f"agent {a!r} has a non-discrete action space; ArrayEnv supports "
                    "discrete actions only"
                )
        self.obs_dim = max(self._obs_dims)
        self.num_actions = max(self._act_dims)
        self._won_fn = won_fn
        self._world_state_fn = world_state_fn
        self.world_state_reads_obs = world_state_fn is None or bool(world_state_reads_obs)
        self.has_won = won_fn is not None
        self._stats_fn = stats_fn
        groups = agent_groups if agent_groups is not None else (0,) * self.num_agents
        if len(groups) != self.num_agents:
            raise ValueError(f"agent_groups has {len(groups)} entries for {self.num_agents} agents")
        self.agent_groups = np.asarray(groups, dtype=np.int32)
        self.num_groups = int(self.agent_groups.max()) + 1
        self._action_pad_mask = np.stack(
            [np.arange(self.num_actions) < n for n in self._act_dims]
        )  # [N, A]
        self._has_avail = self._env_has_avail_actions()
        # Shapes of the world state are read off a traced reset, never a real one.
        obs_shape = jax.eval_shape(self.reset, jax.random.PRNGKey(0))[0]
        chex.assert_shape(obs_shape, (self.num_agents, self.obs_dim))
        state_shape = jax.eval_shape(
            lambda k: self.world_state(*self.reset(k)[::-1]), jax.random.PRNGKey(0)
        )
        self.world_state_dim = int(np.prod(state_shape.shape))

    # ----- conversions -------------------------------------------------------------
    def stack_obs(self, obs: dict) -> jax.Array:
        rows = []
        for a, d in zip(self.agents, self._obs_dims, strict=True):
            x = jnp.reshape(obs[a], (-1,)).astype(jnp.float32)
            if d < self.obs_dim:
                x = jnp.pad(x, (0, self.obs_dim - d))
            rows.append(x)
        return jnp.stack(rows)

    def stack(self, values: dict) -> jax.Array:
        return jnp.stack([jnp.asarray(values[a]) for a in self.agents])

    def unstack_actions(self, actions: jax.Array) -> dict:
        return {a: actions[i] for i, a in enumerate(self.agents)}

    # ----- the environment --------------------------------------------------------
    def reset(self, key: chex.PRNGKey) -> tuple[jax.Array, ArrayEnvState]:
        obs, env_state = self.env.reset(key)
        state = ArrayEnvState(
            env_state=_strong_types(env_state),
            episode_return=jnp.zeros((self.num_agents,), jnp.float32),
            episode_length=jnp.zeros((), jnp.int32),
        )
        return self.stack_obs(obs), state

    @property
    def has_action_masks(self) -> bool:
        """Whether the env restricts actions (else every padded-in action is legal)."""
        return self._has_avail or not self._action_pad_mask.all()

    def _env_has_avail_actions(self) -> bool:
        try:
            jax.eval_shape(
                lambda k: self.env.get_avail_actions(self.env.reset(k)[1]), jax.random.PRNGKey(0)
            )
        except NotImplementedError:
            return False
        return True

    def avail_actions(self, state: ArrayEnvState) -> jax.Array:
        if not self._has_avail:
            return jnp.asarray(self._action_pad_mask)
        avail = self.env.get_avail_actions(state.env_state)
        rows = []
        for a, n in zip(self.agents, self._act_dims, strict=True):
            x = jnp.asarray(avail[a]).astype(bool).reshape(-1)
            if n < self.num_actions:
                x = jnp.pad(x, (0, self.num_actions - n))
            rows.append(x)
        return jnp.stack(rows)

    def world_state(self, state: ArrayEnvState, obs: jax.Array) -> jax.Array:
        return self.state_vector(state.env_state, obs)

    def state_vector(self, env_state, obs: jax.Array | None) -> jax.Array:
        """The centralized state ``[S]`` of a jaxmarl env state (its observations ``obs``
        ``[N, D]`` where the world state reads them; ``None`` is accepted where it does
        not, see ``world_state_reads_obs``)."""
        if obs is None and self.world_state_reads_obs:
            raise ValueError(
                "this env's world state is built from the observations, so state_vector "
                "needs obs (got None)"
            )
        if self._world_state_fn is None:
            return jnp.reshape(obs, (-1,))
        return jnp.reshape(self._world_state_fn(self.env, env_state, obs), (-1,)).astype(
            jnp.float32
        )

    def won(self, env_state) -> jax.Array:
        if self._won_fn is None:
            return jnp.zeros((), bool)
        return jnp.asarray(self._won_fn(self.env, env_state), bool)

    def episode_stats(self, env_state) -> dict:
        """The env's named statistics of a (terminal) env state, as float32 scalars;
        ``{}`` where the env declares none."""
        if self._stats_fn is None:
            return {}
        return {
            k: jnp.asarray(v, jnp.float32) for k, v in self._stats_fn(self.env, env_state).items()
        }

    def step(self, key: chex.PRNGKey, state: ArrayEnvState, actions: jax.Array) -> StepResult:
        """Step with ``actions`` [N] int, resetting where the episode ends."""
        key_step, key_reset = jax.random.split(key)
        obs_dict, env_state, rewards, dones, _ = self.env.step_env(
            key_step, state.env_state, self.unstack_actions(actions)
        )
        terminal_obs = self.stack_obs(obs_dict)
        reward = self.stack(rewards).astype(jnp.float32)
        done = jnp.asarray(dones["__all__"], bool)

        reset_obs, reset_state = self.env.reset(key_reset)
        env_state = _strong_types(env_state)
        next_env_state = jax.tree.map(
            lambda r, s: jax.lax.select(done, r, s), _strong_types(reset_state), env_state
        )
        next_obs = jnp.where(done, self.stack_obs(reset_obs), terminal_obs)

        episode_return = state.episode_return + reward
        episode_length = state.episode_length + 1
        info = {
            "episode_return": episode_return,
            "episode_length": episode_length,
            "won": self.won(env_state),
        }
        if self._stats_fn is not None:
            info["stats"] = self.episode_stats(env_state)
        next_state = ArrayEnvState(
            env_state=next_env_state,
            episode_return=jnp.where(done, 0.0, episode_return),
            episode_length=jnp.where(done, 0, episode_length),
        )
        return StepResult(
            obs=next_obs,
            state=next_state,
            reward=reward,
            done=done,
            avail_actions=self.avail_actions(next_state),
            terminal_obs=terminal_obs,
            terminal_env_state=env_state,
            info=info,
        )

    def random_actions(self, key: chex.PRNGKey, avail_actions: jax.Array) -> jax.Array:
        """Uniform random legal action per agent: [N, A] mask -> [N] int32."""
        logits = jnp.where(avail_actions, 0.0, -jnp.inf)
        return jax.random.categorical(key, logits).astype(jnp.int32)

"""Cooperative matrix games: tiny jaxmarl environments that tell value factorisations apart.

``MatrixGame`` is a one-step game: every agent sees the same constant observation,
all act once, and the episode ends with the team payoff ``payoff[a_0, ..., a_{N-1}]``.
``TwoStepGame`` is the two-step game of the QMIX paper (Rashid et al., 2018, sec. 6.1):
agent 0's first action picks the matrix played at the second step; the agents see
which stage they are in.

Every agent receives ``payoff / num_agents``, so the default team reward of the
value-decomposition learners (the sum over agents) is the payoff itself; the entries
log returns summed over agents (``return_reduction="sum"``), so ``episode_return`` is
the payoff too.
"""

from __future__ import annotations

from typing import Any

import jax
import jax.numpy as jnp
import numpy as np
from flax import struct
from jaxmarl.environments.multi_agent_env import MultiAgentEnv
from jaxmarl.environments.spaces import Box, Discrete

from envs.registry import EnvSpec, register

# Non-monotonic: neither an additive (VDN) nor a monotonic (QMIX) mixer can represent it.
PENALTY_PAYOFF = ((8.0, -12.0, -12.0), (-12.0, 0.0, 0.0), (-12.0, 0.0, 0.0))
# QMIX paper, Figure 3: stage 2A pays 7 whatever the agents do; 2B is monotonic with
# its optimum 8 in a corner, which VDN under-estimates (to 6.5 under uniform data), so
# VDN prefers 2A (return 7) and QMIX 2B (return 8).
TWO_STEP_PAYOFF_A = ((7.0, 7.0), (7.0, 7.0))
TWO_STEP_PAYOFF_B = ((0.0, 1.0), (1.0, 8.0))


@struct.dataclass
class MatrixState:
    stage: jax.Array  # [] int32: 0 first step; TwoStepGame: 1 + matrix chosen at step 0
    step: jax.Array  # [] int32


def _payoff_array(payoff: Any, num_agents: int, name: str) -> np.ndarray:
    arr = np.asarray(payoff, dtype=np.float32)
    if arr.ndim != num_agents or len(set(arr.shape)) != 1 or arr.shape[0] < 1:
        raise ValueError(
            f"{name} must be a hypercube with one axis per agent ({num_agents}), got shape "
            f"{arr.shape}"
        )
    return arr


class _CooperativeMatrixEnv(MultiAgentEnv):
    """Shared plumbing: observation/action spaces, action masks, team reward split."""

    def __init__(self, num_agents: int, num_actions: int, obs_dim: int, avail_actions=None):
        super().__init__(num_agents)
        self.num_actions = num_actions
        self.obs_dim = obs_dim
        self.observation_spaces = {a: Box(0.0, 1.0, (obs_dim,)) for a in self.agents}
        self.action_spaces = {a: Discrete(num_actions) for a in self.agents}
        if avail_actions is None:
            avail = np.ones((num_agents, num_actions), bool)
        else:
            avail = np.asarray(avail_actions, bool)
            if avail.shape != (num_agents, num_actions) or not avail.any(-1).all():
                raise ValueError(
                    f"avail_actions must be a [{num_agents}, {num_actions}] mask with a legal "
                    f"action for every agent, got {avail.tolist()}"
                )
        self._avail = avail

    def _joint(self, actions: dict) -> tuple[jax.Array, ...]:
        return tuple(jnp.asarray(actions[a], jnp.int32) for a in self.agents)

    def _split_reward(self, payoff: jax.Array) -> dict:
        r = payoff.astype(jnp.float32) / self.num_agents
        return {a: r for a in self.agents}

    def get_avail_actions(self, state: MatrixState) -> dict:
        return {a: jnp.asarray(self._avail[i]) for i, a in enumerate(self.agents)}

    @property
    def agent_classes(self) -> dict:
        return {"agent": list(self.agents)}


class MatrixGame(_CooperativeMatrixEnv):
    """One-step cooperative matrix game with team payoff ``payoff[a_0, ..., a_{N-1}]``.

    Args:
        payoff: nested sequence with one axis per agent, each of length ``num_actions``.
        num_agents: number of agents (the number of payoff axes).
        avail_actions: optional ``[N, A]`` legal-action mask (constant over time); an
            illegal action still indexes the payoff if an agent plays it anyway.
    """

    def __init__(self, payoff=PENALTY_PAYOFF, num_agents: int = 2, avail_actions=None):
        arr = _payoff_array(payoff, num_agents, "payoff")
        super().__init__(num_agents, arr.shape[0], 1, avail_actions)
        self.payoff = arr

    def get_obs(self, state: MatrixState) -> dict:
        return {a: jnp.ones((1,), jnp.float32) for a in self.agents}

    def reset(self, key):
        state = MatrixState(stage=jnp.zeros((), jnp.int32), step=jnp.zeros((), jnp.int32))
        return self.get_obs(state), state

    def step_env(self, key, state: MatrixState, actions: dict):
        payoff = jnp.asarray(self.payoff)[self._joint(actions)]
        state = state.replace(step=state.step + 1)
        done = jnp.ones((), bool)
        dones = {a: done for a in self.agents} | {"__all__": done}
        return self.get_obs(state), state, self._split_reward(payoff), dones, {}


class TwoStepGame(_CooperativeMatrixEnv):
    """The QMIX paper's two-step game for two agents with two actions each.

    Stage 0 pays nothing; agent 0's action ``k`` moves both agents to stage ``1 + k``,
    where they play ``payoff_a`` (k = 0) or ``payoff_b`` (k = 1) and the episode ends.
    Observations are the one-hot stage ``[3]``.
    """

    def __init__(self, payoff_a=TWO_STEP_PAYOFF_A, payoff_b=TWO_STEP_PAYOFF_B, avail_actions=None):
        a = _payoff_array(payoff_a, 2, "payoff_a")
        b = _payoff_array(payoff_b, 2, "payoff_b")
        if a.shape != (2, 2) or b.shape != (2, 2):
            raise ValueError(f"payoff_a and payoff_b must be 2x2, got {a.shape} and {b.shape}")
        super().__init__(2, 2, 3, avail_actions)
        self.payoffs = np.stack([np.zeros_like(a), a, b])  # indexed by stage

    def get_obs(self, state: MatrixState) -> dict:
        o = jax.nn.one_hot(state.stage, 3, dtype=jnp.float32)
        return {a: o for a in self.agents}

    def reset(self, key):
        state = MatrixState(stage=jnp.zeros((), jnp.int32), step=jnp.zeros((), jnp.int32))
        return self.get_obs(state), state

    def step_env(self, key, state: MatrixState, actions: dict):
        a0, a1 = self._joint(actions)
        first = state.stage == 0
        payoff = jnp.where(first, 0.0, jnp.asarray(self.payoffs)[state.stage, a0, a1])
        stage = jnp.where(first, 1 + a0, state.stage)
        state = MatrixState(stage=stage, step=state.step + 1)
        done = jnp.logical_not(first)
        dones = {a: done for a in self.agents} | {"__all__": done}
        return self.get_obs(state), state, self._split_reward(payoff), dones, {}


register(
    EnvSpec(
        "matrix:penalty",
        MatrixGame,
        "One-step 2-agent 3x3 penalty game [[8,-12,-12],[-12,0,0],[-12,0,0]] "
        "(non-monotonic; each agent gets payoff/2)",
        return_reduction="sum",
    )
)
register(
    EnvSpec(
        "matrix:two_step",
        TwoStepGame,
        "QMIX paper's two-step game: VDN settles for 7, a monotonic mixer finds 8 "
        "(each agent gets payoff/2)",
        return_reduction="sum",
    )
)

"""Tiny jaxmarl environments with known answers, for learner tests."""

import jax
import jax.numpy as jnp
from flax import struct
from jaxmarl.environments.multi_agent_env import MultiAgentEnv
from jaxmarl.environments.spaces import Box, Discrete


@struct.dataclass
class BanditState:
    step: jax.Array
    done: jax.Array


class MaskedBandit(MultiAgentEnv):
    """Each agent picks one of 4 actions per step; action ``best`` pays 1, others 0.

    Action ``masked`` would pay 2 but is never available, so a learner that ignores the
    mask is caught. Episodes last ``horizon`` steps; observation is the step counter.
    """

    def __init__(self, num_agents=2, horizon=4, best=2, masked=3):
        super().__init__(num_agents)
        self.horizon, self.best, self.masked = horizon, best, masked
        self.observation_spaces = {a: Box(0.0, 1.0, (2,)) for a in self.agents}
        self.action_spaces = {a: Discrete(4) for a in self.agents}

    def reset(self, key):
        state = BanditState(step=jnp.zeros((), jnp.int32), done=jnp.zeros((), bool))
        return self.get_obs(state), state

    def get_obs(self, state):
        x = jnp.stack([state.step / self.horizon, 1.0])
        return {a: x for a in self.agents}

    def step_env(self, key, state, actions):
        step = state.step + 1
        done = step >= self.horizon
        state = BanditState(step=step, done=done)
        pay = lambda a: jnp.where(a == self.best, 1.0, jnp.where(a == self.masked, 2.0, 0.0))
        rewards = {a: pay(actions[a]) for a in self.agents}
        dones = {a: done for a in self.agents} | {"__all__": done}
        return self.get_obs(state), state, rewards, dones, {}

    def get_avail_actions(self, state):
        mask = jnp.arange(4) != self.masked
        return {a: mask for a in self.agents}

"""Tiny jaxmarl environments with known answers, for learner tests."""

import jax
import jax.numpy as jnp
from flax import struct
from jaxmarl.environments.multi_agent_env import MultiAgentEnv
from jaxmarl.environments.spaces import Box, Discrete

from envs.capabilities import RankingHeuristic, Renderer, StateDescriber, provides


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


@struct.dataclass
class LineState:
    pos: jax.Array  # [N] int32
    step: jax.Array  # [] int32


class RaceLine(MultiAgentEnv):
    """Credit-assignment toy: ``N`` agents on a line of ``length`` cells race to the right end.

    Actions: 0 stay (the noop), 1 left, 2 right. The episode ends when every agent is at
    the end (team reward 1) or after ``max_steps``. The ranking heuristic is each agent's
    own position, so a learned potential must reward "right" and punish "left".
    """

    noop_action = 0
    capabilities = provides(RankingHeuristic, StateDescriber, Renderer)

    def __init__(self, num_agents=2, length=6, max_steps=12, roles=None):
        super().__init__(num_agents)
        self.length, self.max_steps = length, max_steps
        self.roles = tuple(roles) if roles is not None else ("runner",) * num_agents
        self.observation_spaces = {a: Box(0.0, 1.0, (2 * length,)) for a in self.agents}
        self.action_spaces = {a: Discrete(3) for a in self.agents}

    def _onehot(self, pos):
        return jax.nn.one_hot(pos, self.length)

    def agent_features(self, state):
        own = self._onehot(state.pos)  # [N, L]
        others = (own.sum(0, keepdims=True) - own) / max(self.num_agents - 1, 1)
        return jnp.concatenate([own, others], -1)

    def get_obs(self, state):
        f = self.agent_features(state)
        return {a: f[i] for i, a in enumerate(self.agents)}

    def reset(self, key):
        pos = jax.random.randint(key, (self.num_agents,), 0, self.length // 2)
        state = LineState(pos=pos.astype(jnp.int32), step=jnp.zeros((), jnp.int32))
        return self.get_obs(state), state

    def step_env(self, key, state, actions):
        a = jnp.stack([actions[x] for x in self.agents])
        move = jnp.where(a == 1, -1, jnp.where(a == 2, 1, 0))
        pos = jnp.clip(state.pos + move, 0, self.length - 1).astype(jnp.int32)
        step = state.step + 1
        state = LineState(pos=pos, step=step)
        won = self.won(state)
        done = won | (step >= self.max_steps)
        r = won.astype(jnp.float32)
        rewards = {x: r for x in self.agents}
        dones = {x: done for x in self.agents}
        dones["__all__"] = done
        return self.get_obs(state), state, rewards, dones, {}

    def won(self, state):
        return jnp.all(state.pos == self.length - 1)

    def heuristic_potential(self, state):
        return state.pos.astype(jnp.float32)

    def individual_reward(self, state, actions, next_state):
        return ((next_state.pos == self.length - 1) & (state.pos < self.length - 1)).astype(
            jnp.float32
        )

    def random_state(self, key):
        k1, k2 = jax.random.split(key)
        pos = jax.random.randint(k1, (self.num_agents,), 0, self.length).astype(jnp.int32)
        return LineState(pos=pos, step=jax.random.randint(k2, (), 0, self.max_steps))

    def render(self, state):
        img = jnp.zeros((self.num_agents, self.length, 3), jnp.uint8)
        return img.at[jnp.arange(self.num_agents), state.pos].set(255)

    def describe(self, state, agent):
        pos = [int(p) for p in state.pos]
        mates = ", ".join(f"teammate at cell {p}" for i, p in enumerate(pos) if i != agent)
        return f"The ego agent is at cell {pos[agent]} of {self.length}; {mates}."

    def prompt_context(self, state, agent):
        return {
            "task_description": "Agents race along a line to its right end.",
            "team_target": "every agent at the right end",
            "key_steps": "move right",
            "dependency": "",
            "ego_role": self.roles[agent],
        }


@struct.dataclass
class BitState:
    bits: jax.Array  # [2] int32: each agent's private bit
    done: jax.Array


class GuessTeammateBit(MultiAgentEnv):
    """Communication toy: each of two agents sees only its own random bit and is paid 1
    for naming its teammate's. One step per episode. Without communication the best
    expected reward is 0.5; with it, 1."""

    def __init__(self):
        super().__init__(2)
        self.observation_spaces = {a: Box(0.0, 1.0, (2,)) for a in self.agents}
        self.action_spaces = {a: Discrete(2) for a in self.agents}

    def reset(self, key):
        bits = jax.random.bernoulli(key, 0.5, (2,)).astype(jnp.int32)
        state = BitState(bits=bits, done=jnp.zeros((), bool))
        return self.get_obs(state), state

    def get_obs(self, state):
        one_hot = jax.nn.one_hot(state.bits, 2)
        return {a: one_hot[i] for i, a in enumerate(self.agents)}

    def step_env(self, key, state, actions):
        done = jnp.ones((), bool)
        rewards = {
            a: (actions[a] == state.bits[1 - i]).astype(jnp.float32)
            for i, a in enumerate(self.agents)
        }
        state = state.replace(done=done)
        dones = {a: done for a in self.agents} | {"__all__": done}
        return self.get_obs(state), state, rewards, dones, {}

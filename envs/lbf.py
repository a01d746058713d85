"""Level-Based Foraging (Papoudakis et al., 2021) in JAX: YOLO-MARL's sparse-reward task.

Agents and food items sit on a grid, each with a level. Actions: ``NONE, NORTH, SOUTH,
WEST, EAST, LOAD``. Each step, as in ``lbforaging``:

1. A move into a wall, off the grid or onto a food cell is void; moves of agents that
   pick the same target cell are void (collisions); a move onto a cell an agent is
   leaving is allowed only if that agent really leaves it.
2. Every food with agents choosing ``LOAD`` next to it (4-neighbourhood, positions
   before the moves) is collected when the sum of those agents' levels reaches the
   food's level. Each loading agent then gets
   ``level_i * food_level / (sum of the loaders' levels * sum of all food levels)``,
   so a team that collects everything earns 1 in all.
3. The episode ends when every food is collected or after ``max_steps`` steps.

``lbf:8x8-2p-2f-coop`` is the paper's scenario (``Foraging-8x8-2p-2f-coop-v2``): 8x8 grid,
2 agents of level 1 or 2, 2 food items whose level is the sum of the agents' levels, so
both agents must load together; full observability; 50 steps. As in ``lbforaging``'s
``reset``, agents spawn first on distinct cells, then each food on a free inner cell with no
food in its 3x3 neighbourhood nor within two cells in a straight line.

Observation of agent ``i`` (``lbforaging``'s vector form, ``_make_gym_obs``): the food still
on the field as ``(row, col, level)`` in row-major order, then ``(-1, -1, 0)`` for each
collected one, then for each agent, itself first, ``(row, col, level)``. A food's slot thus
changes when an earlier one is collected, as in the real env.
"""

from __future__ import annotations

import chex
import jax
import jax.numpy as jnp
from flax import struct
from jaxmarl.environments.multi_agent_env import MultiAgentEnv
from jaxmarl.environments.spaces import Box, Discrete

from envs import fast_random
from envs.capabilities import YoloTaskSet, provides
from envs.registry import EnvSpec, register

NONE, NORTH, SOUTH, WEST, EAST, LOAD = range(6)
ACTION_NAMES = ("NONE", "NORTH", "SOUTH", "WEST", "EAST", "LOAD")
MOVES = jnp.array([[0, 0], [-1, 0], [1, 0], [0, -1], [0, 1], [0, 0]], jnp.int32)


@struct.dataclass
class LBFState:
    agent_pos: chex.Array  # [N, 2] int32 (row, col)
    agent_level: chex.Array  # [N] int32
    food_pos: chex.Array  # [F, 2] int32
    food_level: chex.Array  # [F] int32
    food_alive: chex.Array  # [F] bool
    step: chex.Array  # [] int32


def food_order(state: LBFState, grid_size: int) -> chex.Array:
    """``[F]`` state indices of the food in the observation's order: the food still on the
    field row-major (``np.nonzero`` of ``lbforaging``'s field), then the collected food."""
    cell = state.food_pos[:, 0] * grid_size + state.food_pos[:, 1]
    return jnp.argsort(jnp.where(state.food_alive, cell, grid_size**2 + cell))


class LevelBasedForaging(MultiAgentEnv):
    def __init__(
        self,
        grid_size: int = 8,
        num_agents: int = 2,
        num_food: int = 2,
        max_agent_level: int = 2,
        force_coop: bool = True,
        max_steps: int = 50,
    ):
        super().__init__(num_agents)
        if grid_size < 4 or num_food < 1 or max_agent_level < 1 or max_steps < 1:
            raise ValueError("need grid_size >= 4, num_food >= 1, levels >= 1, max_steps >= 1")
        inner = (grid_size - 2) ** 2
        if num_food > inner // 4 or num_agents + num_food > grid_size**2 // 2:
            raise ValueError(
                f"{num_food} food and {num_agents} agents do not fit a {grid_size}^2 grid"
            )
        self.grid_size, self.num_food = grid_size, num_food
        self.max_agent_level, self.force_coop = max_agent_level, force_coop
        self.max_steps = max_steps
        self.obs_dim = 3 * (num_food + num_agents)
        self.observation_spaces = {
            a: Box(-1.0, float(max(grid_size, max_agent_level * num_agents)), (self.obs_dim,))
            for a in self.agents
        }
        self.action_spaces = {a: Discrete(6) for a in self.agents}

    # ----- spawning ---------------------------------------------------------------------
    # A uniform draw among the allowed cells picks the k-th of them, k = floor(u * count);
    # drawing items one after another with the taken cells masked is sampling without
    # replacement. It takes one uniform per item from one fused threefry evaluation
    # (envs/fast_random.py) and a cumsum over g*g cells: ``ArrayEnv`` computes a reset at
    # every step, and jax.random's rolled threefry loops, a sort (``jax.random.choice``
    # without replacement) or a ``reduce_window`` there made the reset 70x the step on CPU.
    def _spawn(self, key) -> tuple[chex.Array, chex.Array, chex.Array]:
        """``lbforaging``'s order: agents on distinct cells anywhere, then food on free
        inner cells with no other food in the 3x3 box around them or within two cells in a
        straight line (``spawn_food``'s two ``neighborhood`` checks); agent levels.
        Returns ``(food_pos [F, 2], agent_pos [N, 2], levels [N])``."""
        g, f, n = self.grid_size, self.num_food, self.num_agents
        cells = g * g
        u = fast_random.uniform(key, f + 2 * n)
        levels = 1 + jnp.minimum(
            (u[f + n :] * self.max_agent_level).astype(jnp.int32), self.max_agent_level - 1
        )
        row, col = jnp.arange(cells) // g, jnp.arange(cells) % g

        def draw(i, allowed):
            count = allowed.sum()
            k = jnp.minimum((u[i] * count).astype(jnp.int32), count - 1)
            return jnp.argmax(jnp.cumsum(allowed) > k)

        taken, picked = jnp.zeros((cells,), bool), []
        for i in range(n):
            c = draw(i, ~taken)
            picked.append(c)
            taken = taken | (jnp.arange(cells) == c)
        agents = jnp.stack(picked)
        inner = (row > 0) & (row < g - 1) & (col > 0) & (col < g - 1)
        allowed, picked = inner & ~taken, []
        for i in range(f):
            c = draw(n + i, allowed)
            picked.append(c)
            dr, dc = jnp.abs(row - c // g), jnp.abs(col - c % g)
            near = ((dr <= 1) & (dc <= 1)) | ((dr == 0) & (dc <= 2)) | ((dc == 0) & (dr <= 2))
            allowed = allowed & ~near
        food = jnp.stack(picked)
        to_pos = lambda c: jnp.stack([c // g, c % g], -1).astype(jnp.int32)
        return to_pos(food), to_pos(agents), levels

    def reset(self, key):
        food_pos, agent_pos, agent_level = self._spawn(key)
        if self.force_coop:
            food_level = jnp.full((self.num_food,), agent_level.sum(), jnp.int32)
        else:
            food_level = jax.random.randint(
                jax.random.fold_in(key, 1), (self.num_food,), 1, agent_level.sum() + 1
            ).astype(jnp.int32)
        state = LBFState(
            agent_pos=agent_pos,
            agent_level=agent_level,
            food_pos=food_pos,
            food_level=food_level,
            food_alive=jnp.ones((self.num_food,), bool),
            step=jnp.zeros((), jnp.int32),
        )
        return self.get_obs(state), state

    # ----- dynamics ---------------------------------------------------------------------
    def adjacent(self, state: LBFState) -> chex.Array:
        """``[N, F]``: agent ``i`` is next to (4-neighbourhood) living food ``f``."""
        d = jnp.abs(state.agent_pos[:, None, :] - state.food_pos[None, :, :]).sum(-1)
        return (d == 1) & state.food_alive[None, :]

    def step_env(self, key, state: LBFState, actions: dict):
        a = jnp.stack([jnp.asarray(actions[ag], jnp.int32) for ag in self.agents])
        g = self.grid_size
        # loading first, from the positions before the moves
        loading = (a == LOAD)[:, None] & self.adjacent(state)  # [N, F]
        load_sum = (loading * state.agent_level[:, None]).sum(0)  # [F]
        collected = state.food_alive & (load_sum >= state.food_level) & loading.any(0)
        total_food = jnp.maximum(state.food_level.sum(), 1).astype(jnp.float32)
        share = jnp.where(
            collected,
            state.food_level / (jnp.maximum(load_sum, 1) * total_food),
            0.0,
        )  # [F]
        reward = (loading * share[None, :]).sum(1) * state.agent_level  # [N]
        food_alive = state.food_alive & ~collected

        # moves: void into walls and (still present) food, void on shared targets
        target = state.agent_pos + MOVES[a]
        inside = (target >= 0).all(-1) & (target < g).all(-1)
        on_food = (
            (target[:, None, :] == state.food_pos[None, :, :]).all(-1) & food_alive[None, :]
        ).any(-1)
        target = jnp.where((inside & ~on_food)[:, None], target, state.agent_pos)
        same = (target[:, None, :] == target[None, :, :]).all(-1)
        clash = (same.sum(-1) > 1)[:, None]
        target = jnp.where(clash, state.agent_pos, target)
        # an agent may not take a cell another agent stays on
        for _ in range(self.num_agents):
            stays = (target == state.agent_pos).all(-1)
            blocked = (
                (target[:, None, :] == state.agent_pos[None, :, :]).all(-1)
                & stays[None, :]
                & ~jnp.eye(self.num_agents, dtype=bool)
            ).any(-1)
            target = jnp.where(blocked[:, None], state.agent_pos, target)
        step = state.step + 1
        next_state = state.replace(agent_pos=target, food_alive=food_alive, step=step)
        done = ~food_alive.any() | (step >= self.max_steps)
        rewards = {ag: reward[i] for i, ag in enumerate(self.agents)}
        dones = {ag: done for ag in self.agents} | {"__all__": done}
        info = {"collected": collected.sum()}
        return self.get_obs(next_state), next_state, rewards, dones, info

    # ----- views --------------------------------------------------------------------------
    def get_obs(self, state: LBFState) -> dict:
        food = jnp.concatenate([state.food_pos, state.food_level[:, None]], -1).astype(jnp.float32)
        order = food_order(state, self.grid_size)
        alive = state.food_alive[order]
        food = jnp.where(alive[:, None], food[order], jnp.array([-1.0, -1.0, 0.0]))
        agents = jnp.concatenate([state.agent_pos, state.agent_level[:, None]], -1).astype(
            jnp.float32
        )
        out = {}
        for i, ag in enumerate(self.agents):
            order = jnp.roll(jnp.arange(self.num_agents), -i)  # itself first
            out[ag] = jnp.concatenate([food.ravel(), agents[order].ravel()])
        return out

    def get_avail_actions(self, state: LBFState) -> dict:
        return {ag: jnp.ones((6,), bool) for ag in self.agents}

    def won(self, state: LBFState) -> chex.Array:
        return ~state.food_alive.any()

    @property
    def name(self) -> str:
        return "LevelBasedForaging"


register(
    EnvSpec(
        "lbf:8x8-2p-2f-coop",
        LevelBasedForaging,
        "Level-Based Foraging 8x8, 2 agents, 2 food that need both agents to load together "
        "(YOLO-MARL's LBF scenario); team return 1 when all food is collected",
        won_fn=lambda env, s: env.won(s),
        return_reduction="sum",
        capabilities=provides(YoloTaskSet("lbf")),
    )
)

"""Level-Based Foraging: the rules the YOLO-MARL paper lists, against hand-built states."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest

import envs
from envs.lbf import EAST, LOAD, NONE, NORTH, SOUTH, WEST, LBFState


@pytest.fixture(scope="module")
def env():
    return envs.make("lbf:8x8-2p-2f-coop")


def _state(agents, levels, food, food_levels, alive=None):
    return LBFState(
        agent_pos=jnp.array(agents, jnp.int32),
        agent_level=jnp.array(levels, jnp.int32),
        food_pos=jnp.array(food, jnp.int32),
        food_level=jnp.array(food_levels, jnp.int32),
        food_alive=jnp.array(alive if alive is not None else [True] * len(food)),
        step=jnp.zeros((), jnp.int32),
    )


def _step(env, state, a0, a1):
    step = jax.jit(env.step_env)
    obs, s, r, d, info = step(jax.random.PRNGKey(0), state, {"agent_0": a0, "agent_1": a1})
    return s, np.array([float(r["agent_0"]), float(r["agent_1"])]), bool(d["__all__"])


def test_food_needs_the_sum_of_the_loaders_levels(env):
    # food 0 (level 3) at (3, 3); agent 0 (level 1) left of it, agent 1 (level 2) below it
    s = _state([[3, 2], [4, 3]], [1, 2], [[3, 3], [6, 6]], [3, 3])
    alone, r, _ = _step(env, s, LOAD, NONE)
    assert bool(alone.food_alive[0]) and r.sum() == 0.0  # level 1 < 3
    alone, r, _ = _step(env, s, NONE, LOAD)
    assert bool(alone.food_alive[0]) and r.sum() == 0.0  # level 2 < 3
    both, r, done = _step(env, s, LOAD, LOAD)
    assert not bool(both.food_alive[0]) and not done
    # rewards level_i * 3 / (3 * 6): half the team's total of 1 for one of two foods
    np.testing.assert_allclose(r, [1 * 3 / (3 * 6), 2 * 3 / (3 * 6)])
    np.testing.assert_allclose(r.sum(), 0.5)


def test_loading_needs_adjacency_and_collecting_everything_pays_one(env):
    diagonal = _state([[2, 2], [4, 4]], [1, 2], [[3, 3], [6, 6]], [3, 3])
    s, r, _ = _step(env, diagonal, LOAD, LOAD)
    assert bool(s.food_alive[0]) and r.sum() == 0.0  # diagonal is not adjacent
    last = _state([[5, 6], [6, 5]], [1, 2], [[3, 3], [6, 6]], [3, 3], alive=[False, True])
    s, r, done = _step(env, last, LOAD, LOAD)
    assert done and not bool(s.food_alive.any())
    np.testing.assert_allclose(r.sum(), 0.5)


def test_moves_are_blocked_by_walls_food_and_collisions(env):
    s = _state([[0, 0], [3, 2]], [1, 1], [[3, 3], [6, 6]], [2, 2])
    moved, _, _ = _step(env, s, NORTH, EAST)  # off the grid; onto the food
    np.testing.assert_array_equal(moved.agent_pos, [[0, 0], [3, 2]])
    s = _state([[2, 4], [4, 4]], [1, 1], [[6, 1], [6, 6]], [2, 2])
    clash, _, _ = _step(env, s, SOUTH, NORTH)  # both into (3, 4)
    np.testing.assert_array_equal(clash.agent_pos, [[2, 4], [4, 4]])
    s = _state([[2, 4], [3, 4]], [1, 1], [[6, 1], [6, 6]], [2, 2])
    stay, _, _ = _step(env, s, SOUTH, NONE)  # onto an agent that stays
    np.testing.assert_array_equal(stay.agent_pos, [[2, 4], [3, 4]])
    follow, _, _ = _step(env, s, SOUTH, SOUTH)  # onto a cell its owner leaves
    np.testing.assert_array_equal(follow.agent_pos, [[3, 4], [4, 4]])
    west, _, _ = _step(env, s, WEST, WEST)
    np.testing.assert_array_equal(west.agent_pos, [[2, 3], [3, 3]])


def test_reset_follows_the_coop_scenario(env):
    for seed in range(20):
        obs, s = env.reset(jax.random.PRNGKey(seed))
        g = env.grid_size
        food = np.asarray(s.food_pos)
        assert ((food > 0) & (food < g - 1)).all()  # never on the border
        assert (np.asarray(s.food_level) == int(s.agent_level.sum())).all()  # coop
        cells = {tuple(p) for p in np.asarray(s.agent_pos)} | {tuple(p) for p in food}
        assert len(cells) == 4
        o = np.asarray(obs["agent_1"])
        assert o.shape == (12,) and tuple(o[6:9]) == (*np.asarray(s.agent_pos[1]), s.agent_level[1])


def test_timeout_ends_the_episode(env):
    s = _state([[0, 0], [7, 7]], [1, 1], [[3, 3], [5, 5]], [2, 2]).replace(
        step=jnp.array(env.max_steps - 1, jnp.int32)
    )
    _, r, done = _step(env, s, NONE, NONE)
    assert done and r.sum() == 0.0


def test_food_spawns_apart_as_lbforaging_does(env):
    """``spawn_food``: no other food in the 3x3 box nor within two cells in a straight line,
    never on an agent; over many resets every allowed gap occurs (a knight's move, two
    cells diagonally) and no forbidden one."""
    _, states = jax.jit(jax.vmap(env.reset))(jax.random.split(jax.random.PRNGKey(1), 4096))
    food, agents = np.asarray(states.food_pos), np.asarray(states.agent_pos)
    dr, dc = np.abs(food[:, 0] - food[:, 1]).T
    box = (dr <= 1) & (dc <= 1)
    line = ((dr == 0) & (dc <= 2)) | ((dc == 0) & (dr <= 2))
    assert not (box | line).any()
    assert ((dr == 1) & (dc == 2)).any() and ((dr == 2) & (dc == 2)).any()
    on_agent = (food[:, :, None, :] == agents[:, None, :, :]).all(-1).any()
    assert not on_agent and (agents[:, 0] != agents[:, 1]).any(-1).all()


def test_observation_lists_the_remaining_food_first_in_row_major_order(env):
    # food 1 at (2, 5) comes before food 0 at (4, 2) in row-major order
    s = _state([[0, 0], [7, 7]], [1, 2], [[4, 2], [2, 5]], [3, 3])
    obs = jax.jit(env.get_obs)(s)
    np.testing.assert_array_equal(np.asarray(obs["agent_0"])[:6], [2, 5, 3, 4, 2, 3])
    # once (2, 5) is collected the other food moves into the first slot, padding after it
    obs = jax.jit(env.get_obs)(s.replace(food_alive=jnp.array([True, False])))
    np.testing.assert_array_equal(np.asarray(obs["agent_1"])[:6], [4, 2, 3, -1, -1, 0])
    np.testing.assert_array_equal(np.asarray(obs["agent_1"])[6:], [7, 7, 2, 0, 0, 1])
    # a row-major tie on the row breaks on the column
    s = _state([[0, 0], [7, 7]], [1, 1], [[3, 5], [3, 2]], [2, 2])
    np.testing.assert_array_equal(np.asarray(env.get_obs(s)["agent_0"])[:6], [3, 2, 2, 3, 5, 2])

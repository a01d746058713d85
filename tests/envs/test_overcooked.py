"""Overcooked entries: layouts, image observations, soup delivery, episode timing."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from conformance import rollout_harness
from jaxmarl.environments.overcooked import Overcooked, overcooked_layouts
from jaxmarl.environments.overcooked.common import OBJECT_TO_INDEX

import envs

LAYOUT = "overcooked:cramped_room"  # the layout the conformance suite compiles
SHORT = {"max_steps": 8}
UP, DOWN, RIGHT, LEFT, STAY, INTERACT = range(6)
DIRECTION_CHANNELS = slice(2, 10)  # per-agent facing-direction planes of the 26


@pytest.fixture(scope="module")
def aenv():
    return rollout_harness(LAYOUT, 32, **SHORT).aenv


@pytest.mark.parametrize("layout", sorted(overcooked_layouts))
def test_layout_shapes(layout):
    name = f"overcooked:{layout}"
    assert name in envs.names()
    env = envs.make(name)
    assert isinstance(env, Overcooked) and env.max_steps == 400
    lay = overcooked_layouts[layout]
    obs, _ = jax.eval_shape(env.reset, jax.random.PRNGKey(0))
    # jaxmarl declares (width, height, 26) but returns (height, width, 26).
    assert obs["agent_0"].shape == (lay["height"], lay["width"], 26)
    aenv = envs.make_array_env(name)
    assert aenv.num_agents == 2 and aenv.num_actions == 6
    assert aenv.obs_dim == lay["height"] * lay["width"] * 26
    assert aenv.world_state_dim == 2 * aenv.obs_dim and not aenv.has_won


def test_no_deprecation_warning_on_make(recwarn):
    envs.make(LAYOUT)
    assert not [w for w in recwarn if "OvercookedV2" in str(w.message)]


def test_all_actions_always_legal(aenv):
    _, state = aenv.reset(jax.random.PRNGKey(0))
    assert np.asarray(aenv.avail_actions(state)).all()


def test_reset_draws_only_directions(aenv):
    reset = jax.jit(jax.vmap(aenv.reset))
    obs, _ = reset(jax.random.split(jax.random.PRNGKey(0), 6))
    lay = overcooked_layouts["cramped_room"]
    planes = np.asarray(obs).reshape(6, 2, lay["height"], lay["width"], 26)
    fixed = np.delete(planes, np.arange(26)[DIRECTION_CHANNELS], axis=-1)
    assert (fixed == fixed[:1]).all(), "a reset changed more than the agents' directions"
    dirs = planes[..., DIRECTION_CHANNELS]
    assert len({d.tobytes() for d in dirs}) > 1, "directions do not depend on the key"


def test_soup_delivery_rewards_both_agents(aenv):
    # cramped_room: agent 1 starts at (3, 1); the delivery counter is at (3, 3).
    _, state = aenv.reset(jax.random.PRNGKey(0))
    env_state = state.env_state
    np.testing.assert_array_equal(env_state.agent_pos[1], [3, 1])
    inv = env_state.agent_inv.at[1].set(OBJECT_TO_INDEX["dish"])
    state = state.replace(env_state=env_state.replace(agent_inv=inv))
    step = aenv.step  # unjitted: reuses the conformance run's op cache
    r = step(jax.random.PRNGKey(1), state, jnp.array([STAY, DOWN], jnp.int32))
    np.testing.assert_array_equal(r.state.env_state.agent_pos[1], [3, 2])
    np.testing.assert_array_equal(r.reward, [0.0, 0.0])
    r = step(jax.random.PRNGKey(2), r.state, jnp.array([STAY, INTERACT], jnp.int32))
    np.testing.assert_array_equal(r.reward, [20.0, 20.0])
    np.testing.assert_array_equal(r.info["episode_return"], [20.0, 20.0])
    assert int(r.state.env_state.agent_inv[1]) == OBJECT_TO_INDEX["empty"]
    # Nothing left to deliver: interacting again pays nothing.
    r = step(jax.random.PRNGKey(3), r.state, jnp.array([STAY, INTERACT], jnp.int32))
    np.testing.assert_array_equal(r.reward, [0.0, 0.0])


def test_episodes_last_exactly_max_steps():
    traj = rollout_harness(LAYOUT, 32, **SHORT).run()[1]
    done = traj["done"]
    assert done.sum() == done.shape[0] * (32 // SHORT["max_steps"])
    assert (traj["info"]["episode_length"][done] == SHORT["max_steps"]).all()
    # No win condition: the flag stays down.
    assert not traj["info"]["won"].any()

"""ArrayEnv on a tiny heterogeneous env: padding, masks, auto-reset, episode statistics."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from flax import struct
from jaxmarl.environments.multi_agent_env import MultiAgentEnv
from jaxmarl.environments.spaces import Box, Discrete

from envs.array_env import ArrayEnv

HORIZON = 3


@struct.dataclass
class TinyState:
    step: jax.Array  # [] int, weakly typed after reset as jaxmarl envs often are
    start: jax.Array  # [] float, drawn at reset
    done: jax.Array


class Tiny(MultiAgentEnv):
    """Agent ``a``: obs [2], 3 actions (action 1 illegal); agent ``b``: obs [2, 2], 5 actions
    (action 4 illegal). Rewards: ``a`` gets its action, ``b`` gets 10. Episodes last
    ``HORIZON`` steps; observations hold the reset draw and the step counter."""

    def __init__(self, with_avail: bool = True):
        super().__init__(num_agents=2)
        self.agents = ["a", "b"]
        self.observation_spaces = {"a": Box(-1.0, 1.0, (2,)), "b": Box(-1.0, 1.0, (2, 2))}
        self.action_spaces = {"a": Discrete(3), "b": Discrete(5)}
        self.with_avail = with_avail

    def get_obs(self, state):
        s = state.step.astype(jnp.float32)
        return {
            "a": jnp.stack([state.start, s]),
            "b": jnp.stack([state.start, s, -state.start, -s]).reshape(2, 2),
            "extra_key": jnp.zeros(7),  # not an agent: ArrayEnv must ignore it
        }

    def reset(self, key):
        state = TinyState(step=jnp.array(0), start=jax.random.uniform(key), done=jnp.array(False))
        return self.get_obs(state), state

    def step_env(self, key, state, actions):
        step = state.step + jnp.int32(1)  # strongly typed, unlike reset's (as in SMAX)
        done = step >= HORIZON
        state = TinyState(step=step, start=state.start, done=done)
        rewards = {"a": actions["a"].astype(jnp.float32), "b": jnp.float32(10.0)}
        dones = {"a": done, "b": done, "__all__": done}
        return self.get_obs(state), state, rewards, dones, {}

    def get_avail_actions(self, state):
        if not self.with_avail:
            raise NotImplementedError
        return {"a": jnp.array([1, 0, 1]), "b": jnp.array([1, 1, 1, 1, 0])}


def won_at_horizon(env, env_state):
    return env_state.step >= HORIZON


@pytest.fixture(scope="module")
def aenv():
    return ArrayEnv(Tiny(), won_fn=won_at_horizon)


@pytest.fixture(scope="module")
def step(aenv):
    return jax.jit(aenv.step)


def test_padding_of_obs_and_actions(aenv):
    assert aenv.num_agents == 2 and aenv.obs_dim == 4 and aenv.num_actions == 5
    obs, state = aenv.reset(jax.random.PRNGKey(0))
    start = float(state.env_state.start)
    np.testing.assert_allclose(obs, [[start, 0, 0, 0], [start, 0, -start, 0]])
    assert obs.dtype == jnp.float32
    avail = np.asarray(aenv.avail_actions(state))
    np.testing.assert_array_equal(avail, [[1, 0, 1, 0, 0], [1, 1, 1, 1, 0]])
    assert aenv.world_state_dim == 8
    np.testing.assert_array_equal(aenv.world_state(state, obs), np.reshape(obs, -1))


def test_padded_actions_masked_without_env_avail():
    aenv = ArrayEnv(Tiny(with_avail=False))
    _, state = aenv.reset(jax.random.PRNGKey(0))
    avail = np.asarray(aenv.avail_actions(state))
    np.testing.assert_array_equal(avail, [[1, 1, 1, 0, 0], [1, 1, 1, 1, 1]])
    actions = jax.vmap(aenv.random_actions, in_axes=(0, None))(
        jax.random.split(jax.random.PRNGKey(1), 256), avail
    )
    assert int(actions[:, 0].max()) == 2 and int(actions[:, 1].max()) == 4


def test_random_actions_respect_env_mask(aenv):
    _, state = aenv.reset(jax.random.PRNGKey(0))
    avail = aenv.avail_actions(state)
    actions = np.asarray(
        jax.vmap(aenv.random_actions, in_axes=(0, None))(
            jax.random.split(jax.random.PRNGKey(1), 256), avail
        )
    )
    assert set(actions[:, 0].tolist()) == {0, 2}
    assert set(actions[:, 1].tolist()) == {0, 1, 2, 3}


def test_episode_return_terminal_obs_and_auto_reset(aenv, step):
    _, state = aenv.reset(jax.random.PRNGKey(0))
    first_start = float(state.env_state.start)
    acts = jnp.array([2, 3], jnp.int32)
    key = jax.random.PRNGKey(1)
    for t in range(1, 2 * HORIZON + 1):
        key, k = jax.random.split(key)
        r = step(k, state, acts)
        in_episode = (t - 1) % HORIZON + 1
        np.testing.assert_array_equal(r.reward, [2.0, 10.0])
        np.testing.assert_allclose(r.info["episode_return"], [2.0 * in_episode, 10.0 * in_episode])
        assert int(r.info["episode_length"]) == in_episode
        assert bool(r.done) == (in_episode == HORIZON)
        assert bool(r.info["won"]) == (in_episode == HORIZON)  # won_fn sees the terminal state
        if r.done:
            # terminal_obs: the true last observation (step counter == HORIZON)...
            np.testing.assert_allclose(r.terminal_obs[0, 1], HORIZON)
            assert int(r.terminal_env_state.step) == HORIZON
            # ...obs: a fresh reset drawn with the step key's reset half.
            reset_obs, reset_state = aenv.reset(jax.random.split(k)[1])
            np.testing.assert_array_equal(r.obs, reset_obs)
            assert float(r.state.env_state.start) != first_start
            assert int(r.state.env_state.step) == 0
            np.testing.assert_array_equal(r.state.episode_return, [0.0, 0.0])
            assert int(r.state.episode_length) == 0
        else:
            np.testing.assert_array_equal(r.obs, r.terminal_obs)
            np.testing.assert_allclose(r.obs[0, 1], in_episode)
            if t < HORIZON:
                np.testing.assert_allclose(r.obs[0, 0], first_start)
            np.testing.assert_allclose(r.state.episode_return, r.info["episode_return"])
        state = r.state


def test_jitted_step_compiles_once(aenv):
    traces = []

    def counted(key, state, actions):
        traces.append(1)
        return aenv.step(key, state, actions)

    step = jax.jit(counted)
    _, state = aenv.reset(jax.random.PRNGKey(0))
    assert state.env_state.step.dtype == jnp.int32
    for i in range(3):
        state = step(jax.random.PRNGKey(i), state, jnp.zeros(2, jnp.int32)).state
    assert len(traces) == 1, "the step's output state retraced the jitted step"


def test_vmapped_step_matches_single(aenv, step):
    keys = jax.random.split(jax.random.PRNGKey(3), 4)
    obs, states = jax.vmap(aenv.reset)(keys)
    acts = jnp.array([[0, 1]] * 4, jnp.int32)
    batched = jax.jit(jax.vmap(aenv.step))(keys, states, acts)
    for i in range(4):
        single = step(keys[i], jax.tree.map(lambda x, i=i: x[i], states), acts[i])
        np.testing.assert_array_equal(batched.obs[i], single.obs)
        np.testing.assert_array_equal(batched.reward[i], single.reward)


def test_bad_construction():
    class Continuous(Tiny):
        def __init__(self):
            super().__init__()
            self.action_spaces = {"a": Discrete(3), "b": Box(0.0, 1.0, (2,))}

    with pytest.raises(ValueError, match="non-discrete"):
        ArrayEnv(Continuous())
    with pytest.raises(ValueError, match="agent_groups"):
        ArrayEnv(Tiny(), agent_groups=(0, 1, 1))
    grouped = ArrayEnv(Tiny(), agent_groups=(0, 1))
    assert grouped.num_groups == 2


def test_episode_stats_reach_the_learners_metrics():
    """An env's ``stats_fn`` is read off the terminal state and averaged over the episodes
    that ended as ``stat_<name>``; envs without one log no ``stat_`` keys."""
    from jaxmarl_llm.learners.base import episode_metrics

    env = ArrayEnv(Tiny(), stats_fn=lambda e, s: {"final_step": s.step, "start": s.start})
    plain = ArrayEnv(Tiny())
    _, state = env.reset(jax.random.PRNGKey(0))
    start = float(state.env_state.start)
    acts = jnp.array([0, 0], jnp.int32)
    results = []
    for t in range(HORIZON + 1):
        r = jax.jit(env.step)(jax.random.PRNGKey(t), state, acts)
        results.append(r)
        state = r.state
    done = jnp.stack([r.done for r in results])[:, None]  # [T, E=1]
    info = jax.tree.map(lambda *x: jnp.stack(x)[:, None], *[r.info for r in results])
    assert info["stats"]["final_step"].dtype == jnp.float32
    m = episode_metrics(done, info, has_won=False)
    np.testing.assert_allclose(m["stat_final_step"], HORIZON)  # only the ended episode
    np.testing.assert_allclose(m["stat_start"], start, rtol=1e-6)
    assert plain.episode_stats(state.env_state) == {}
    assert "stats" not in plain.step(jax.random.PRNGKey(0), state, acts).info

"""FastSimpleSpread against jaxmarl's SimpleSpreadMPE, step for step."""

import functools

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from conformance import rollout_harness
from jaxmarl.environments.mpe import SimpleSpreadMPE

import envs
from envs.spread import FastSimpleSpread, split_uniform_2d

TOL = {"rtol": 1e-5, "atol": 1e-5}
MAX_STEPS = 25  # jaxmarl's default: an episode lasts max_steps + 1 = 26 steps
EPISODE_STEPS = 2 * (MAX_STEPS + 1) + 8  # more than two full episodes


def _pair(n, **kwargs):
    kwargs.setdefault("num_landmarks", n)
    return SimpleSpreadMPE(num_agents=n, **kwargs), FastSimpleSpread(num_agents=n, **kwargs)


def _actions(env, key):
    acts = jax.random.randint(key, (env.num_agents,), 0, 5)
    return {a: acts[i] for i, a in enumerate(env.agents)}


def _assert_state_close(s_ref, s_fast, what):
    np.testing.assert_allclose(s_fast.p_pos, s_ref.p_pos, err_msg=f"{what}: p_pos", **TOL)
    np.testing.assert_allclose(s_fast.p_vel, s_ref.p_vel, err_msg=f"{what}: p_vel", **TOL)
    np.testing.assert_allclose(s_fast.c, s_ref.c, err_msg=f"{what}: c", **TOL)
    assert int(s_fast.step) == int(s_ref.step), what
    assert bool(s_fast.done) == bool(s_ref.done), what


def _assert_dicts_close(d_ref, d_fast, what):
    assert list(d_fast) == list(d_ref), what
    for a in d_ref:
        assert jnp.shape(d_fast[a]) == jnp.shape(d_ref[a]), f"{what}[{a}]"
        np.testing.assert_allclose(d_fast[a], d_ref[a], err_msg=f"{what}[{a}]", **TOL)


@functools.cache
def _trajectories(n: int, kwargs_items: tuple, steps: int, seeds: tuple):
    """Both envs under jit(vmap(scan)) of jaxmarl's auto-resetting ``step`` with the same
    reset key, per-step keys and random actions; one row per seed."""
    # per-entity parameters come as tuples (hashable for the cache); jaxmarl wants arrays
    kwargs = {k: jnp.array(v) if isinstance(v, tuple) else v for k, v in kwargs_items}
    ref, fast = _pair(n, **kwargs)

    def rollout(env, key):
        k_reset, k_run = jax.random.split(key)
        obs, state = env.reset(k_reset)

        def body(state, k):
            k_act, k_step = jax.random.split(k)
            obs, state, rew, dones, _ = env.step(k_step, state, _actions(env, k_act))
            stack = lambda d: jnp.stack([d[a] for a in env.agents])
            out = (stack(obs), stack(rew), dones["__all__"], stack(dones))
            return state, (*out, state.p_pos, state.p_vel, state.step, state.done)

        _, traj = jax.lax.scan(body, state, jax.random.split(k_run, steps))
        first = (jnp.stack([obs[a] for a in env.agents]), state.p_pos)
        return first, traj

    keys = jnp.stack([jax.random.PRNGKey(s) for s in seeds])
    run = lambda env: jax.tree.map(
        np.asarray, jax.jit(jax.vmap(functools.partial(rollout, env)))(keys)
    )
    return run(ref), run(fast)


def _compare_trajectories(ref, fast, max_steps):
    (obs0_r, pos0_r), traj_r = ref
    (obs0_f, pos0_f), traj_f = fast
    np.testing.assert_array_equal(pos0_f, pos0_r)  # reset is bit-identical
    np.testing.assert_allclose(obs0_f, obs0_r, **TOL)
    names = ("obs", "reward", "done", "agent dones", "p_pos", "p_vel", "step", "state done")
    for name, r, f in zip(names, traj_r, traj_f, strict=True):
        assert r.shape == f.shape and r.dtype == f.dtype, (name, r.shape, f.shape, r.dtype)
        if np.issubdtype(r.dtype, np.floating):
            np.testing.assert_allclose(f, r, err_msg=name, **TOL)
        else:
            np.testing.assert_array_equal(f, r, err_msg=name)
    done = traj_r[2]
    assert (done.sum(axis=1) >= 2).all(), "every row must finish at least two episodes"
    np.testing.assert_array_equal(np.argmax(done, axis=1), max_steps)  # step max_steps + 1


@pytest.mark.parametrize("n", [3, 4])
def test_matches_jaxmarl_over_episodes(n):
    ref, fast = _trajectories(n, (), EPISODE_STEPS, tuple(range(8)))
    _compare_trajectories(ref, fast, MAX_STEPS)


@pytest.mark.parametrize("n", [3, 4])
def test_matches_jaxmarl_eager_jit_loop(n):
    """Plain Python loop over jitted ``step_env``/``reset`` (what ArrayEnv calls)."""
    ref, fast = _pair(n)
    step_r, step_f = jax.jit(ref.step_env), jax.jit(fast.step_env)
    reset_r, reset_f = jax.jit(ref.reset), jax.jit(fast.reset)
    key = jax.random.PRNGKey(100 + n)
    key, k = jax.random.split(key)
    (o_r, s_r), (o_f, s_f) = reset_r(k), reset_f(k)
    _assert_dicts_close(o_r, o_f, "reset obs")
    _assert_state_close(s_r, s_f, "reset")
    episodes = 0
    for t in range(EPISODE_STEPS):
        key, k_act, k_step, k_reset = jax.random.split(key, 4)
        acts = _actions(ref, k_act)
        o_r, s_r, r_r, d_r, _ = step_r(k_step, s_r, acts)
        o_f, s_f, r_f, d_f, info = step_f(k_step, s_f, acts)
        what = f"t={t}"
        _assert_dicts_close(o_r, o_f, f"{what} obs")
        _assert_dicts_close(r_r, r_f, f"{what} reward")
        assert {a: bool(v) for a, v in d_f.items()} == {a: bool(v) for a, v in d_r.items()}
        assert info == {}
        _assert_state_close(s_r, s_f, what)
        if bool(d_r["__all__"]):
            episodes += 1
            (o_r, s_r), (o_f, s_f) = reset_r(k_reset), reset_f(k_reset)
            _assert_dicts_close(o_r, o_f, f"{what} reset obs")
            _assert_state_close(s_r, s_f, f"{what} reset")
    assert episodes >= 2


def test_contacts_and_collisions_match():
    """Agents packed together: contact forces and the collision penalty both act."""
    n = 4
    ref, fast = _pair(n, local_ratio=0.7)
    _, state = ref.reset(jax.random.PRNGKey(0))
    # agents within a 0.2-wide square (radius 0.15 each): many overlapping pairs
    packed = jax.random.uniform(jax.random.PRNGKey(1), (n, 2), minval=-0.1, maxval=0.1)
    state = state.replace(p_pos=state.p_pos.at[:n].set(packed))
    step_r, step_f = jax.jit(ref.step_env), jax.jit(fast.step_env)
    s_r = s_f = state
    key = jax.random.PRNGKey(2)
    hits = 0
    for t in range(12):
        key, k_act, k_step = jax.random.split(key, 3)
        acts = _actions(ref, k_act)
        o_r, s_r, r_r, _, _ = step_r(k_step, s_r, acts)
        o_f, s_f, r_f, _, _ = step_f(k_step, s_f, acts)
        _assert_dicts_close(o_r, o_f, f"t={t} obs")
        _assert_dicts_close(r_r, r_f, f"t={t} reward")
        _assert_state_close(s_r, s_f, f"t={t}")
        # reward = 0.7 * (-collisions) + 0.3 * global: the agents differ only by collisions
        r = np.array([float(r_r[a]) for a in ref.agents])
        hits += int(np.ptp(r) > 0.5) + int(r.max() < -0.7)
    assert hits > 0, "the packed start produced no collisions; the test checks nothing"
    assert not np.allclose(s_r.p_vel[:n], 0.0)


@pytest.mark.parametrize(
    "n, kwargs",
    [
        (3, {"num_landmarks": 5, "local_ratio": 0.2, "max_steps": 7}),
        (4, {"num_landmarks": 2, "max_steps": 9}),
        (2, {"max_steps": 5}),
        (1, {"max_steps": 5}),
        (3, {"damping": 0.1, "dt": 0.05, "contact_force": 50.0, "contact_margin": 0.01}),
        (
            3,
            {
                "accel": jnp.array([1.0, 2.0, 3.0]),
                "mass": jnp.array([1.0, 2.0, 0.5, 1.0, 1.0, 1.0]),
                "max_speed": jnp.array([0.3, 0.5, -1.0, 0.0, 0.0, 0.0]),
                "u_noise": jnp.array([0.1, 0.0, 0.5]),
            },
        ),
    ],
)
def test_matches_jaxmarl_with_kwargs(n, kwargs):
    max_steps = kwargs.get("max_steps", MAX_STEPS)
    items = tuple(
        (k, tuple(np.asarray(v).tolist()) if hasattr(v, "shape") else v)
        for k, v in sorted(kwargs.items())
    )
    ref, fast = _trajectories(n, items, 2 * (max_steps + 1) + 3, tuple(range(4)))
    _compare_trajectories(ref, fast, max_steps)


def test_get_obs_with_communication_and_rewards():
    """jaxmarl's roll-based ordering of the other agents' positions and comm entries."""
    n = 4
    ref, fast = _pair(n)
    _, state = ref.reset(jax.random.PRNGKey(3))
    state = state.replace(
        p_vel=jax.random.normal(jax.random.PRNGKey(4), state.p_vel.shape),
        c=jnp.arange(n * 2, dtype=jnp.float32).reshape(n, 2) + 1.0,
    )
    _assert_dicts_close(ref.get_obs(state), fast.get_obs(state), "get_obs")
    _assert_dicts_close(ref.rewards(state), fast.rewards(state), "rewards")
    obs = fast.get_obs(state)
    assert obs["agent_1"][-6:].tolist() == [1.0, 2.0, 5.0, 6.0, 7.0, 8.0]


def test_spaces_and_api():
    ref, fast = _pair(3)
    assert fast.agents == ref.agents == ["agent_0", "agent_1", "agent_2"]
    assert fast.num_agents == 3 and fast.num_landmarks == 3 and fast.num_entities == 6
    for a in ref.agents:
        assert fast.observation_space(a).shape == ref.observation_space(a).shape == (18,)
        assert fast.action_space(a).n == ref.action_space(a).n == 5
    assert fast.agent_classes == {"agents": fast.agents}
    with pytest.raises(NotImplementedError):
        FastSimpleSpread(action_type="Continuous")
    with pytest.raises(ValueError):
        FastSimpleSpread(local_ratio=1.5)
    with pytest.raises(TypeError):
        FastSimpleSpread(not_a_kwarg=1)


@pytest.mark.parametrize("typed", [False, True])
@pytest.mark.parametrize("sizes", [(3, 3), (4, 4), (2, 5), (1, 1)])
def test_reset_draws_are_bit_identical(typed, sizes):
    """The written-out threefry equals jax.random.split + uniform, bit for bit."""
    for seed in range(5):
        key = jax.random.key(seed) if typed else jax.random.PRNGKey(seed)
        keys = jax.random.split(key, len(sizes))
        expect = jnp.concatenate(
            [
                jax.random.uniform(k, (m, 2), minval=-1.0, maxval=1.0)
                for k, m in zip(keys, sizes, strict=True)
            ]
        )
        got = jax.jit(lambda k: split_uniform_2d(k, sizes, -1.0, 1.0))(key)
        np.testing.assert_array_equal(
            np.asarray(got).view(np.uint32), np.asarray(expect).view(np.uint32)
        )


def test_registry():
    for name, n in (
        ("mpe:simple_spread", 3),
        ("mpe:simple_spread_3", 3),
        ("mpe:simple_spread_4", 4),
    ):
        env = envs.make(name)
        assert isinstance(env, FastSimpleSpread), name
        assert env.num_agents == env.num_landmarks == n
        assert envs.spec(name).return_reduction == "sum"
    env = envs.make("mpe:simple_spread", num_agents=5)
    assert env.num_landmarks == 5
    ref = envs.make("mpe:simple_spread_jaxmarl", num_agents=4)
    assert type(ref) is SimpleSpreadMPE and ref.num_landmarks == 4
    assert envs.spec("mpe:simple_spread_jaxmarl").return_reduction == "sum"
    with pytest.raises(ValueError, match="bad kwargs"):
        envs.make("mpe:simple_spread_3", not_a_kwarg=1)


def test_array_env_rollouts_match_jaxmarl():
    """The conformance suite's compiled ArrayEnv rollouts (auto-reset, episode stats)
    of the fast env and of jaxmarl's agree entry for entry."""
    fast = rollout_harness("mpe:simple_spread_3", 32, max_steps=8).run()
    ref = rollout_harness("mpe:simple_spread_jaxmarl", 32, max_steps=8).run()
    flat_f, tree_f = jax.tree.flatten(fast)
    flat_r, tree_r = jax.tree.flatten(ref)
    assert tree_f == tree_r
    for f, r in zip(flat_f, flat_r, strict=True):
        if np.issubdtype(r.dtype, np.floating):
            np.testing.assert_allclose(f, r, **TOL)
        else:
            np.testing.assert_array_equal(f, r)
    assert fast[1]["done"].sum() >= 3

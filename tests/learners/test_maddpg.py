"""MADDPG: the straight-through Gumbel-softmax, a coordination game, masks, shaping at
sample time, no retracing, config checks."""

import chex
import jax
import jax.numpy as jnp
import numpy as np
import pytest

import envs
from envs.array_env import ArrayEnv
from envs.matrix_game import MatrixGame
from jaxmarl_llm.config import build_config
from jaxmarl_llm.learners.maddpg import MADDPG, MADDPGConfig, check_config, gumbel_softmax_st
from jaxmarl_llm.shaping import constant_shaper, identity_shaper

# joint action (1, 1) pays 3, (0, 0) pays 1; action 2 pays most but is illegal
PAYOFF = [[1.0, 0.0, 9.0], [0.0, 3.0, 9.0], [9.0, 9.0, 9.0]]
MASK = [[True, True, False], [True, True, False]]


def small_cfg(**kw):
    base = dict(
        total_timesteps=16 * 4 * 120, num_envs=16, num_steps=4, buffer_size=1024,
        batch_size=64, learning_starts=0, updates_per_rollout=2, actor_lr=3e-3,
        critic_lr=3e-3, hidden_sizes=[32], tau=0.05,
    )  # fmt: skip
    base.update(kw)
    return MADDPGConfig(**base)


class GumbelSoftmaxTest(chex.TestCase):
    @chex.variants(with_jit=True, without_jit=True)
    def test_forward_is_one_hot_and_gradient_flows(self):
        logits = jnp.array([[0.5, -1.0, 2.0], [0.0, 0.0, 0.0]])

        def f(lg):
            return gumbel_softmax_st(jax.random.PRNGKey(0), lg, 1.0)

        sample = self.variant(f)(logits)
        np.testing.assert_array_equal(sample.sum(-1), 1.0)
        np.testing.assert_array_equal(np.sort(np.asarray(sample), -1)[:, :2], 0.0)
        grad = jax.grad(lambda lg: (f(lg) * jnp.array([1.0, 2.0, 3.0])).sum())(logits)
        assert np.abs(np.asarray(grad)).sum() > 0  # the relaxed sample's gradient

    def test_samples_follow_the_softmax(self):
        logits = jnp.log(jnp.array([0.2, 0.5, 0.3]))
        keys = jax.random.split(jax.random.PRNGKey(1), 20000)
        s = jax.vmap(lambda k: gumbel_softmax_st(k, logits, 1.0))(keys)
        np.testing.assert_allclose(s.mean(0), [0.2, 0.5, 0.3], atol=0.015)


@pytest.fixture(scope="module")
def coordination():
    env = ArrayEnv(MatrixGame(PAYOFF, avail_actions=MASK))
    m = MADDPG(small_cfg(), env, identity_shaper())
    state, metrics = jax.jit(jax.vmap(m.learner().train))(
        jax.random.split(jax.random.PRNGKey(0), 2)
    )
    return m, env, state, jax.tree.map(np.asarray, metrics)


@pytest.mark.slow
def test_maddpg_learns_to_coordinate_on_the_better_joint_action(coordination):
    m, env, state, metrics = coordination
    obs, s = env.reset(jax.random.PRNGKey(0))
    avail = env.avail_actions(s)
    logits = jax.vmap(lambda p: m.logits(p["actor"], obs, avail))(state.params)  # [seeds, N, A]
    np.testing.assert_array_equal(np.asarray(logits).argmax(-1), 1)
    # ArrayEnv's default reduction is the mean over agents: (1, 1) logs 3 / 2
    assert (metrics["episode_return"][:, -10:].mean(-1) > 0.9 * 1.5).all()


def test_metrics_and_masks(coordination):
    m, env, state, metrics = coordination
    assert set(metrics) >= {"critic_loss", "actor_loss", "q_mean", "grad_norm", "episode_return"}
    # learning starts once batch_size (64) transitions are stored: the first update holds 64
    assert np.isfinite(metrics["critic_loss"]).all()
    # the illegal action (paying 9) is never played: no return above 3 / 2
    assert metrics["episode_return"].max() <= 1.5 + 1e-6
    items = m.buffer.sample(jax.tree.map(lambda x: x[0], state.buffer), jax.random.PRNGKey(3))
    assert not (np.asarray(items.experience.actions) == 2).any()


def test_update_compiles_once_and_shaping_happens_at_sample_time():
    env = ArrayEnv(MatrixGame(PAYOFF, avail_actions=MASK))
    m = MADDPG(small_cfg(learning_starts=64 * 2), env, constant_shaper(0.5))
    traces = []

    def update(state):
        traces.append(1)
        return m.update(state)

    update_jit = jax.jit(update)
    state = jax.jit(m.init)(jax.random.PRNGKey(0))
    metrics = []
    for i in range(4):
        if i == 3:
            state = state.replace(shaper_params=jnp.asarray(2.0, jnp.float32))
        state, mt = update_jit(state)
        metrics.append(mt)
    assert len(traces) == 1 and update_jit._cache_size() == 1
    assert np.isnan(float(metrics[0]["critic_loss"])) and np.isfinite(
        float(metrics[2]["critic_loss"])
    )
    items = m.buffer.sample(state.buffer, jax.random.PRNGKey(0)).experience
    r_half = m.rewards(jnp.float32(0.5), items)
    r_two = m.rewards(jnp.float32(2.0), items)
    np.testing.assert_allclose(r_two - r_half, 1.5, rtol=1e-6)  # env reward stored once


def test_collect_and_team_reward():
    env = ArrayEnv(MatrixGame(PAYOFF, avail_actions=MASK))
    m = MADDPG(small_cfg(team_reward="sum"), env, identity_shaper())
    state = m.init(jax.random.PRNGKey(0))
    batch = jax.jit(m.collect, static_argnums=2)(state, jax.random.PRNGKey(1), 5)
    assert batch.actions.shape == (5, 16, 2) and batch.reward.shape == (5, 16, 2)
    items = jax.tree.map(lambda x: x.reshape((-1, *x.shape[2:])), batch)
    from jaxmarl_llm.transitions import TransitionBatch

    tr = TransitionBatch(
        obs=items.obs, actions=items.actions, reward=items.reward, done=items.done,
        avail=jnp.ones((80, 2, 3), bool), world_state=jnp.zeros((80, 1)), next_obs=items.obs,
        next_avail=jnp.ones((80, 2, 3), bool), next_world_state=jnp.zeros((80, 1)),
    )  # fmt: skip
    r = m.rewards(None, tr)
    np.testing.assert_allclose(r[:, 0], items.reward.sum(-1))  # both critics see the team's
    np.testing.assert_allclose(r[:, 1], items.reward.sum(-1))


@pytest.mark.parametrize(
    "override, key",
    [
        ("algo.team_reward=everyone", "algo.team_reward"),
        ("algo.actor_lr=0", "algo.actor_lr"),
        ("algo.lr=1e-3", "algo.lr"),
    ],
)
def test_bad_config_names_the_key(override, key):
    from jaxmarl_llm.config import ConfigError

    raw = {"name": "m", "env": {"name": "matrix:penalty"}, "algo": {"name": "maddpg"}}
    with pytest.raises(ConfigError, match=key.replace(".", r"\.")):
        build_config(raw, [override])


def test_config_check_refuses_sizes_that_cannot_work():
    with pytest.raises(ValueError, match="buffer_size"):
        check_config(small_cfg(buffer_size=32))
    with pytest.raises(ValueError, match="batch_size"):
        check_config(small_cfg(batch_size=2048))


def test_each_critic_sees_its_own_joint_action_in_one_pass():
    """``own_q_values`` (what the actor loss uses) gives critic ``i`` the joint action
    ``joints[i]``: equal to evaluating every critic on every joint and taking the diagonal."""
    env = envs.make_array_env("mpe:simple_spread_3")
    m = MADDPG(small_cfg(), env, identity_shaper())
    critic = m.init_params(jax.random.PRNGKey(0))["critic"]
    n, a, b = env.num_agents, env.num_actions, 5
    k1, k2 = jax.random.split(jax.random.PRNGKey(1))
    ws = jax.random.normal(k1, (b, env.world_state_dim))
    joints = jax.nn.one_hot(jax.random.randint(k2, (b, n, n), 0, a), a)  # [B, N(i), N, A]
    own = m.own_q_values(critic, ws, joints)
    every = jnp.stack([m.q_values(critic, ws, joints[:, i]) for i in range(n)], 1)  # [B, N(i), N]
    np.testing.assert_allclose(own, jnp.diagonal(every, axis1=1, axis2=2), rtol=1e-5, atol=1e-6)
    # critics differ by agent id, so distinct joints give distinct values
    assert not np.allclose(own[:, 0], own[:, 1])

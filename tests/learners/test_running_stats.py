"""Running reward moments: the merge equals the moments of everything seen."""

import chex
import jax
import jax.numpy as jnp
import numpy as np

from jaxmarl_llm.learners.running_stats import RunningMeanStd, standardize, update_running_stats


class RunningStatsTest(chex.TestCase):
    @chex.variants(with_jit=True, without_jit=True)
    def test_merge_equals_moments_of_the_concatenation(self):
        rng = np.random.default_rng(0)
        batches = [
            rng.normal(3.0, 2.0, size=s).astype(np.float32) for s in [(5, 4), (7,), (2, 3, 2)]
        ]
        update = self.variant(update_running_stats)
        stats = RunningMeanStd.create()
        for b in batches:
            stats = update(stats, jnp.asarray(b))
        seen = np.concatenate([b.ravel() for b in batches])
        # the initial count of 1e-4 at mean 0 / var 1 weighs almost nothing
        np.testing.assert_allclose(stats.mean, seen.mean(), rtol=1e-4)
        np.testing.assert_allclose(stats.var, seen.var(), rtol=1e-3)
        np.testing.assert_allclose(stats.count, seen.size + 1e-4, rtol=1e-6)

    @chex.variants(with_jit=True, without_jit=True)
    def test_standardize(self):
        stats = RunningMeanStd(jnp.float32(2.0), jnp.float32(4.0), jnp.float32(10.0))
        out = self.variant(standardize)(stats, jnp.array([2.0, 4.0, 0.0]))
        np.testing.assert_allclose(out, [0.0, 1.0, -1.0], atol=1e-6)


def test_ppo_standardizes_the_training_reward_it_sees():
    """With standardize_rewards the PPO state tracks the shaped reward's moments; off,
    they stay at their start."""
    import envs
    from jaxmarl_llm.learners.ppo import PPOConfig, make_learner
    from jaxmarl_llm.shaping import constant_shaper

    env = envs.make_array_env("matrix:penalty")
    states = {}
    for on in (False, True):
        cfg = PPOConfig(
            name="ippo", num_envs=4, num_steps=4, total_timesteps=32, num_minibatches=2,
            hidden_sizes=[8], standardize_rewards=on,
        )  # fmt: skip
        learner = make_learner(cfg, env, constant_shaper(0.5))
        states[on], _ = jax.jit(learner.train)(jax.random.PRNGKey(0))
    # 2 updates of 4 envs x 4 steps x 2 agents
    np.testing.assert_allclose(states[True].reward_stats.count, 2 * 4 * 4 * 2, rtol=1e-5)
    np.testing.assert_allclose(states[False].reward_stats.count, 1e-4)
    assert np.isfinite(float(states[True].reward_stats.mean))


def test_team_reward_gives_every_agent_the_reduced_shaped_reward():
    """With team_reward sum each agent's training reward is the sum over agents of the
    per-agent shaped rewards of the same rollout (EPyMARL's common reward)."""
    import envs
    from jaxmarl_llm.learners.ppo import PPO, PPOConfig
    from jaxmarl_llm.shaper import Shaper

    env = envs.make_array_env("matrix:penalty")
    # agent i's bonus depends on its action and index: the agents' rewards differ
    by_agent = Shaper(apply=lambda p, b: (b.actions + 1.0) * jnp.arange(1.0, 3.0), name="by_agent")
    rewards = {}
    for how in ("none", "sum"):
        cfg = PPOConfig(
            name="mappo", num_envs=4, num_steps=8, total_timesteps=32, num_minibatches=2,
            hidden_sizes=[8], team_reward=how,
        )  # fmt: skip
        ppo = PPO(cfg, env, by_agent)
        rewards[how] = np.asarray(
            jax.jit(lambda k, p=ppo: p.rollout(p.init(k))[2].reward)(jax.random.PRNGKey(0))
        )
    own = rewards["none"]
    assert (own[..., 0] != own[..., 1]).any()
    np.testing.assert_allclose(rewards["sum"], np.repeat(own.sum(-1, keepdims=True), 2, -1))


def test_an_unknown_team_reward_is_refused():
    import pytest

    from jaxmarl_llm.learners.ppo import PPOConfig, check_config

    cfg = PPOConfig(name="mappo", team_reward="max")
    with pytest.raises(Exception, match="team_reward"):
        check_config(cfg)

"""The shaping interface: combine modes, field validation, and exact effect on returns."""

import chex
import jax
import jax.numpy as jnp
import numpy as np
import pytest
from toy_envs import MaskedBandit

from envs.array_env import ArrayEnv
from jaxmarl_llm.learners import ppo
from jaxmarl_llm.learners.ppo import PPOConfig
from jaxmarl_llm.shaping import (
    CombineMode,
    Shaper,
    TransitionBatch,
    constant_shaper,
    identity_shaper,
    shaped_reward,
    team_reward,
)


def batch(reward):
    reward = jnp.asarray(reward, jnp.float32)
    return TransitionBatch(
        obs=None,
        actions=None,
        next_obs=None,
        reward=reward,
        done=jnp.zeros(reward.shape[:-1], bool),
    )


class CombineTest(chex.TestCase):
    @chex.variants(with_jit=True, without_jit=True)
    def test_add_and_replace(self):
        b = batch([[1.0, 2.0]])
        add = constant_shaper(0.5, mode=CombineMode.add, coef=2.0)
        rep = constant_shaper(0.5, mode=CombineMode.replace, coef=2.0)
        np.testing.assert_allclose(
            self.variant(lambda p, x: shaped_reward(add, p, x))(add.params, b), [[2.0, 3.0]]
        )
        np.testing.assert_allclose(
            self.variant(lambda p, x: shaped_reward(rep, p, x))(rep.params, b), [[1.0, 1.0]]
        )

    @chex.variants(with_jit=True, without_jit=True)
    def test_identity_keeps_env_reward(self):
        s = identity_shaper()
        b = batch([[1.0, -2.0, 3.0]])
        np.testing.assert_array_equal(
            self.variant(lambda x: shaped_reward(s, None, x))(b), b.reward
        )


def test_team_reward_reductions():
    r = jnp.array([[1.0, 2.0, 3.0]])
    assert float(team_reward(r, "sum")[0]) == 6.0
    assert float(team_reward(r, "mean")[0]) == 2.0
    assert float(team_reward(r, "first")[0]) == 1.0
    with pytest.raises(ValueError, match="valid"):
        team_reward(r, "max")


def test_shaper_rejects_unknown_fields():
    with pytest.raises(ValueError, match="unknown transition fields"):
        Shaper(apply=lambda p, b: b.reward, fields=("observations",))


def test_shaper_output_shape_is_checked():
    bad = Shaper(apply=lambda p, b: b.reward.sum(-1))
    with pytest.raises(AssertionError):
        shaped_reward(bad, None, batch([[1.0, 2.0]]))


@pytest.mark.parametrize("mode", ["add", "replace"])
def test_constant_shaper_changes_training_reward_exactly(mode):
    """Same seed, same first rollout: the training reward moves by exactly the constant."""
    env = ArrayEnv(MaskedBandit(horizon=4))
    cfg = PPOConfig(total_timesteps=8 * 4, num_envs=8, num_steps=4, num_minibatches=1)
    rng = jax.random.PRNGKey(3)

    def first_update(shaper):
        learner = ppo.make_learner(cfg, env, shaper)
        return jax.jit(learner.update)(learner.init(rng))[1]

    base = first_update(identity_shaper())
    shaped = first_update(constant_shaper(0.25, mode=CombineMode(mode), coef=2.0))
    # Env returns are logged unshaped, so they are identical ...
    np.testing.assert_allclose(shaped["episode_return"], base["episode_return"])
    # ... while the reward the learner trains on is shifted (add) or replaced.
    expected = base["reward_mean"] + 0.5 if mode == "add" else 0.5
    np.testing.assert_allclose(shaped["reward_mean"], expected, rtol=1e-6)


def test_shaper_params_live_in_train_state():
    env = ArrayEnv(MaskedBandit(horizon=4))
    cfg = PPOConfig(total_timesteps=8 * 4, num_envs=8, num_steps=4, num_minibatches=1)
    learner = ppo.make_learner(cfg, env, constant_shaper(0.0, mode=CombineMode.replace))
    state = learner.init(jax.random.PRNGKey(0))
    update = jax.jit(learner.update)
    _, m0 = update(state)
    _, m1 = update(state.replace(shaper_params=jnp.float32(1.5)))  # host swaps params
    assert float(m0["reward_mean"]) == 0.0
    np.testing.assert_allclose(m1["reward_mean"], 1.5)


def test_feedback_rounds_fall_after_every_interval_and_never_at_the_end():
    from types import SimpleNamespace

    from jaxmarl_llm.runner.feedback import due_round

    fb = SimpleNamespace(every=4, rounds=2, collect_steps=1)
    due = {u: due_round(fb, u, total_updates=20) for u in range(21)}
    assert {u: r for u, r in due.items() if r is not None} == {4: 0, 8: 1}
    # a last round that would fall on the final update is pointless: no training follows
    fb_last = SimpleNamespace(every=10, rounds=5, collect_steps=1)
    assert [due_round(fb_last, u, 20) for u in (10, 20)] == [0, None]
    assert due_round(None, 4, 20) is None
    assert due_round(SimpleNamespace(every=4, rounds=0, collect_steps=1), 4, 20) is None


def test_feedback_rounds_by_episodes_fall_at_the_first_chunk_end_past_each_mark():
    from types import SimpleNamespace

    from jaxmarl_llm.runner.feedback import due_round, rounds_by_episodes

    fb = SimpleNamespace(every=None, every_episodes=25, rounds=3, collect_steps=1)
    # 10 episodes an update: 25, 50, 75 are passed after updates 3, 5, 8
    assert rounds_by_episodes(fb, [10.0] * 20, chunk=1, total_updates=20) == [3, 5, 8]
    # checked at chunk ends only: after updates 4 (40), 6 (60), 8 (80)
    assert rounds_by_episodes(fb, [10.0] * 20, chunk=2, total_updates=20) == [4, 6, 8]
    # a chunk past two marks holds one round; the next comes a chunk later; none at the end
    assert rounds_by_episodes(fb, [60.0, 0.0, 0.0], chunk=1, total_updates=3) == [1, 2]
    assert rounds_by_episodes(fb, [2.5] * 40, chunk=5, total_updates=40) == [10, 20, 30]
    assert due_round(fb, 5, 20, episodes_done=49.5, rounds_done=1) is None
    assert due_round(fb, 5, 20, episodes_done=50.0, rounds_done=1) == 1
    assert due_round(fb, 5, 20, episodes_done=500.0, rounds_done=3) is None  # all held
    assert due_round(fb, 20, 20, episodes_done=500.0, rounds_done=0) is None  # the end

"""Evaluation: known answers on a toy env, every learner's greedy policy, PPO's sampled
policy, no retracing."""

import chex
import jax
import jax.numpy as jnp
import numpy as np
import pytest
from toy_envs import MaskedBandit, RaceLine

from envs.array_env import ArrayEnv
from jaxmarl_llm.learners import make_learner
from jaxmarl_llm.learners.evaluation import GreedyPolicy, make_evaluate
from jaxmarl_llm.learners.maddpg import MADDPGConfig
from jaxmarl_llm.learners.ppo import PPOConfig
from jaxmarl_llm.learners.qlearning import QLearningConfig
from jaxmarl_llm.shaping import identity_shaper

RIGHT, STAY = 2, 0


def constant_policy(action: int) -> GreedyPolicy:
    """Every agent always plays ``action``; the carry counts calls (checks it is threaded)."""

    def act(train_state, carry, obs, avail, first):
        return carry + 1, jnp.full(obs.shape[:2], action, jnp.int32)

    return GreedyPolicy(lambda train_state, num_envs: jnp.zeros((), jnp.int32), act)


def race_starts(key, num_episodes: int, env: RaceLine) -> np.ndarray:
    """Start positions ``[E, N]`` the evaluation draws: it splits its key as ``make_evaluate``."""
    r_reset, _ = jax.random.split(key)
    return np.stack(
        [np.asarray(env.reset(k)[1].pos) for k in jax.random.split(r_reset, num_episodes)]
    )


class TestKnownAnswers(chex.TestCase):
    @chex.variants(with_jit=True, without_jit=True)
    def test_always_right_wins_every_episode_in_the_expected_steps(self):
        race = RaceLine(num_agents=2, length=6, max_steps=12)
        env = ArrayEnv(race, won_fn=lambda e, s: e.won(s))
        evaluate = self.variant(make_evaluate(env, constant_policy(RIGHT), 16, 100))
        key = jax.random.PRNGKey(3)
        m = evaluate(None, key)
        starts = race_starts(key, 16, race)
        # each agent needs length-1-pos steps; the episode ends when the last one arrives
        expected_length = (race.length - 1 - starts.min(axis=1)).mean()
        np.testing.assert_allclose(m["eval_length"], expected_length, rtol=1e-6)
        np.testing.assert_allclose(m["eval_return"], 1.0)  # team reward 1, mean over agents
        np.testing.assert_allclose(m["eval_win_rate"], 1.0)
        assert int(m["eval_episodes"]) == 16

    @chex.variants(with_jit=True, without_jit=True)
    def test_episode_stats_are_averaged_over_the_first_episodes(self):
        race = RaceLine(num_agents=2, length=6, max_steps=12)
        env = ArrayEnv(
            race,
            won_fn=lambda e, s: e.won(s),
            stats_fn=lambda e, s: {"last_step": s.step, "leftmost": s.pos.min()},
        )
        key = jax.random.PRNGKey(3)
        m = self.variant(make_evaluate(env, constant_policy(RIGHT), 16, 100))(None, key)
        starts = race_starts(key, 16, race)
        np.testing.assert_allclose(m["eval_stat_last_step"], m["eval_length"], rtol=1e-6)
        # the terminal state has every agent at the end, whatever its start
        np.testing.assert_allclose(m["eval_stat_leftmost"], race.length - 1)
        assert starts.min() < race.length - 1

    @chex.variants(with_jit=True, without_jit=True)
    def test_standing_still_times_out_without_reward(self):
        env = ArrayEnv(RaceLine(max_steps=12), won_fn=lambda e, s: e.won(s))
        m = self.variant(make_evaluate(env, constant_policy(STAY), 8, 100))(
            None, jax.random.PRNGKey(0)
        )
        np.testing.assert_allclose(m["eval_length"], 12.0)
        np.testing.assert_allclose(m["eval_return"], 0.0)
        np.testing.assert_allclose(m["eval_win_rate"], 0.0)

    def test_episodes_past_the_step_cap_are_left_out(self):
        env = ArrayEnv(RaceLine(max_steps=12), won_fn=lambda e, s: e.won(s))
        m = jax.jit(make_evaluate(env, constant_policy(STAY), 8, 5))(None, jax.random.PRNGKey(0))
        assert int(m["eval_episodes"]) == 0
        assert np.isnan(m["eval_return"]) and np.isnan(m["eval_win_rate"])

    def test_each_env_counts_its_first_episode_once(self):
        # bandit episodes last 4 steps; a 100-step cap would allow 25 episodes per env,
        # but the loop stops when every env has finished one
        env = ArrayEnv(MaskedBandit(horizon=4))
        m = jax.jit(make_evaluate(env, constant_policy(1), 8, 100))(None, jax.random.PRNGKey(0))
        assert int(m["eval_episodes"]) == 8
        np.testing.assert_allclose(m["eval_length"], 4.0)
        assert "eval_win_rate" not in m  # the env reports no wins

    def test_bad_sizes_are_refused(self):
        env = ArrayEnv(MaskedBandit())
        with pytest.raises(ValueError, match="num_episodes > 0"):
            make_evaluate(env, constant_policy(1), 0, 10)


def _cfg(algo: str):
    if algo == "ippo":
        return PPOConfig(
            name="ippo",
            total_timesteps=16 * 8 * 40,
            num_envs=16,
            num_steps=8,
            lr=3e-3,
            anneal_lr=False,
            num_minibatches=2,
            hidden_sizes=[32, 32],
        )
    if algo == "qmix":
        return QLearningConfig(
            total_timesteps=8 * 8 * 60,
            num_envs=8,
            num_steps=8,
            buffer_size=200,
            batch_size=16,
            learning_starts=128,
            hidden_dim=32,
            lr=5e-3,
            eps_decay=0.5,
        )
    return MADDPGConfig(
        total_timesteps=16 * 8 * 80,
        num_envs=16,
        num_steps=8,
        learning_starts=512,
        hidden_sizes=[32, 32],
        batch_size=128,
        actor_lr=3e-3,
        critic_lr=3e-3,
    )


@pytest.mark.slow
@pytest.mark.parametrize("algo", ["qmix", "maddpg"])
def test_trained_greedy_policy_is_optimal_and_legal(algo):
    """After training on the masked bandit the greedy policy plays the best legal action
    every step (return 4 = horizon) and never the masked one (worth 2). The PPO variants
    are checked the same way in tests/learners/test_ppo.py, on the states they train."""
    env = ArrayEnv(MaskedBandit())
    learner = make_learner(_cfg(algo), env, identity_shaper())
    evaluate = make_evaluate(env, learner.policy, 16, 50)
    keys = jax.random.split(jax.random.PRNGKey(0), 2)
    untrained = jax.jit(jax.vmap(evaluate))(jax.vmap(learner.init)(keys), keys)
    state, _ = jax.jit(jax.vmap(learner.train))(keys)
    m = jax.jit(jax.vmap(evaluate))(state, keys)
    np.testing.assert_allclose(m["eval_return"], 4.0, atol=1e-5)
    assert np.all(np.asarray(untrained["eval_return"]) <= 4.0 + 1e-5)
    assert np.asarray(m["eval_episodes"]).tolist() == [16, 16]


def test_evaluation_compiles_once_and_leaves_the_state_alone():
    env = ArrayEnv(MaskedBandit())
    learner = make_learner(_cfg("ippo"), env, identity_shaper())
    traces = []

    def counted(state, key):
        traces.append(1)
        return make_evaluate(env, learner.policy, 8, 50)(state, key)

    evaluate = jax.jit(counted)
    state = learner.init(jax.random.PRNGKey(0))
    before = jax.tree.map(np.asarray, state)
    for i in range(3):
        evaluate(state, jax.random.PRNGKey(i))
    assert len(traces) == 1
    chex.assert_trees_all_equal(before, jax.tree.map(np.asarray, state))


def test_sampled_evaluation_draws_from_the_policy_over_legal_actions():
    """PPO's ``sample_act`` follows the masked policy's probabilities (the masked action
    never), and ``make_evaluate(sampled=True)`` plays it under its own metric names."""
    env = ArrayEnv(MaskedBandit())
    learner = make_learner(_cfg("ippo"), env, identity_shaper())
    state = learner.init(jax.random.PRNGKey(0))
    obs = jnp.tile(jnp.array([0.0, 1.0]), (512, 2, 1))
    avail = jnp.tile(jnp.array([True, True, True, False]), (512, 2, 1))
    first = jnp.ones((512,), bool)
    policy = learner.policy
    _, greedy = policy.act(state, None, obs, avail, first)
    draws = jnp.stack(
        [policy.sample(state, None, obs, avail, first, k)[1] for k in jax.random.split(
            jax.random.PRNGKey(1), 8)]
    )  # fmt: skip
    counts = np.bincount(np.asarray(draws).ravel(), minlength=4) / draws.size
    assert counts[3] == 0.0  # never the unavailable action
    assert (counts[:3] > 0.1).all()  # an untrained policy is near uniform over the legal three
    greedy = np.asarray(greedy)
    assert (greedy == greedy[0]).all()  # greedy: one action per agent for one observation
    m = jax.jit(make_evaluate(env, policy, 64, 50, sampled=True))(state, jax.random.PRNGKey(2))
    assert set(m) >= {"eval_sampled_return", "eval_sampled_length", "eval_sampled_episodes"}
    # 4 steps, the best action paying 1 with probability about 1/3
    assert 0.8 < float(m["eval_sampled_return"]) < 2.0


def test_sampled_evaluation_needs_a_stochastic_policy():
    env = ArrayEnv(MaskedBandit())
    with pytest.raises(ValueError, match="policy that samples"):
        make_evaluate(env, constant_policy(1), 8, 10, sampled=True)


def test_runner_refuses_sampled_evaluation_of_a_value_based_learner():
    from omegaconf import OmegaConf

    from jaxmarl_llm.errors import ConfigError
    from jaxmarl_llm.runner.evaluation import seed_evaluate

    env = ArrayEnv(MaskedBandit())
    evaluation = {"every": 1, "episodes": 4, "max_steps": 10, "sampled": True}
    cfg = OmegaConf.create({"algo": {"name": "qmix"}, "eval": evaluation})
    learner = make_learner(_cfg("qmix"), env, identity_shaper())
    with pytest.raises(ConfigError, match="eval.sampled=true: algo 'qmix'"):
        seed_evaluate(cfg, env, learner)
    ppo = make_learner(_cfg("ippo"), env, identity_shaper())
    both = seed_evaluate(cfg, env, ppo)
    keys = jax.random.split(jax.random.PRNGKey(0), 2)
    m = both(jax.vmap(ppo.init)(keys), keys)
    assert {"eval_return", "eval_sampled_return"} <= set(m) and m["eval_return"].shape == (2,)

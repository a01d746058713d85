"""Scripted-teacher noise models: each B-Pref error rate is what it says."""

import re

import chex
import jax
import jax.numpy as jnp
import numpy as np
import pytest

from jaxmarl_llm.lm.teachers import (
    PairLabels,
    TeacherNoise,
    agent_rankings,
    pair_preferences,
    ranks_from_pairs,
    repeated_pair_preferences,
    segment_preferences,
    segment_values,
)

N = 200_000


def _values(seed=0, n=N):
    ka, kb = jax.random.split(jax.random.PRNGKey(seed))
    return jax.random.normal(ka, (n,)), jax.random.normal(kb, (n,))


class PairPreferenceTest(chex.TestCase):
    @chex.variants(with_jit=True, without_jit=True)
    def test_perfect_teacher_is_the_true_order(self):
        a, b = _values()
        out = self.variant(pair_preferences)(jax.random.PRNGKey(1), a, b, TeacherNoise())
        np.testing.assert_array_equal(out.label, (a > b).astype(np.float32))
        assert bool(out.valid.all())

    @chex.variants(with_jit=True, without_jit=True)
    def test_mistake_rate_flips_that_fraction(self):
        a, b = _values()
        out = self.variant(pair_preferences)(
            jax.random.PRNGKey(2), a, b, TeacherNoise.with_accuracy(0.7)
        )
        accuracy = float(((out.label == 1.0) == (a > b)).mean())
        assert abs(accuracy - 0.7) < 0.01, accuracy

    def test_skip_and_tie_rates_are_exclusive_and_exact(self):
        a, b = _values()
        out = jax.jit(pair_preferences)(
            jax.random.PRNGKey(3), a, b, TeacherNoise(skip=0.1, tie=0.25)
        )
        assert abs(float(1 - out.valid.mean()) - 0.1) < 0.005
        ties_among_answered = float((out.label[out.valid] == 0.5).mean())
        assert abs(ties_among_answered - 0.25 / 0.9) < 0.005
        decided = out.valid & (out.label != 0.5)
        np.testing.assert_array_equal(out.label[decided], (a > b)[decided].astype(np.float32))

    def test_boltzmann_teacher_follows_sigmoid_odds(self):
        a = jnp.full((N,), 0.5)
        b = jnp.zeros((N,))
        out = pair_preferences(jax.random.PRNGKey(4), a, b, TeacherNoise(beta=2.0))
        assert abs(float(out.label.mean()) - float(jax.nn.sigmoid(1.0))) < 0.005

    def test_equal_margin_and_skip_below_are_deterministic(self):
        a = jnp.array([1.0, 1.0, -5.0, 3.0])
        b = jnp.array([1.05, 2.0, -6.0, -6.0])
        noise = TeacherNoise(equal_margin=0.1, skip_below=-4.0)
        out = pair_preferences(jax.random.PRNGKey(0), a, b, noise)
        np.testing.assert_array_equal(out.label, [0.5, 0.0, 1.0, 1.0])
        np.testing.assert_array_equal(out.valid, [True, True, False, True])

    def test_invalid_noise_is_rejected_by_name(self):
        for bad, field in [
            (TeacherNoise(mistake=1.5), "mistake"),
            (TeacherNoise(skip=0.6, tie=0.6), "skip + tie"),
            (TeacherNoise(beta=0.0), "beta"),
            (TeacherNoise(gamma=0.0), "gamma"),
        ]:
            with pytest.raises(ValueError, match=re.escape(field)):
                bad.validate()


class RepeatedQueryTest(chex.TestCase):
    @chex.variants(with_jit=True, without_jit=True)
    def test_confidence_is_the_vote_share(self):
        a, b = _values(n=50_000)
        conf, count = self.variant(repeated_pair_preferences, static_argnums=4)(
            jax.random.PRNGKey(5), a, b, TeacherNoise.with_accuracy(0.8), 4
        )
        np.testing.assert_array_equal(count, 4)
        assert set(np.unique(conf).tolist()) <= {0.0, 0.25, 0.5, 0.75, 1.0}
        # A 4-vote majority at 80% (ties scored as half) is right 0.8192 + 0.0768 of the time.
        truth = np.asarray(a > b)
        majority = np.where(conf == 0.5, 0.5, (np.asarray(conf) > 0.5) == truth).mean()
        single = pair_preferences(jax.random.PRNGKey(6), a, b, TeacherNoise.with_accuracy(0.8))
        single_accuracy = float(((single.label == 1.0) == truth).mean())
        assert abs(majority - 0.896) < 0.01, majority
        assert majority > single_accuracy + 0.08

    def test_all_skipped_gives_half_and_zero_count(self):
        conf, count = repeated_pair_preferences(
            jax.random.PRNGKey(0), jnp.ones(3), jnp.zeros(3), TeacherNoise(skip=1.0), 3
        )
        np.testing.assert_array_equal(conf, 0.5)
        np.testing.assert_array_equal(count, 0)


def test_myopic_segment_values_weight_late_steps():
    r = jnp.array([[1.0, 0.0, 0.0], [0.0, 0.0, 1.0]])
    np.testing.assert_allclose(segment_values(r, TeacherNoise(gamma=0.5)), [0.25, 1.0])
    np.testing.assert_allclose(segment_values(r, TeacherNoise()), [1.0, 1.0])
    out = segment_preferences(jax.random.PRNGKey(0), r[:1], r[1:], TeacherNoise(gamma=0.5))
    np.testing.assert_array_equal(out.label, [0.0])


class AgentRankingTest(chex.TestCase):
    @chex.variants(with_jit=True, without_jit=True)
    def test_perfect_ranking_with_ties(self):
        scores = jnp.array([[3.0, 1.0, 3.0, 2.0]])
        pairs = self.variant(agent_rankings)(jax.random.PRNGKey(0), scores, TeacherNoise())
        np.testing.assert_array_equal(ranks_from_pairs(pairs), [[0, 3, 0, 2]])
        assert not bool(pairs.valid[0].diagonal().any())
        off = ~np.eye(4, dtype=bool)
        np.testing.assert_array_equal(
            (pairs.label + jnp.swapaxes(pairs.label, -1, -2))[0][off], 1.0
        )

    def test_noisy_ranking_is_still_antisymmetric(self):
        scores = jax.random.normal(jax.random.PRNGKey(1), (64, 5))
        pairs = agent_rankings(jax.random.PRNGKey(2), scores, TeacherNoise(mistake=0.3, skip=0.2))
        assert isinstance(pairs, PairLabels)
        np.testing.assert_array_equal(pairs.valid, jnp.swapaxes(pairs.valid, -1, -2))
        both = np.asarray(pairs.valid)
        total = np.asarray(pairs.label + jnp.swapaxes(pairs.label, -1, -2))
        np.testing.assert_array_equal(total[both], 1.0)

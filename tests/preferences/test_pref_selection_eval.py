"""Query selection (uniform, disagreement, Kendall-tau consensus) and evaluation metrics."""

import chex
import jax
import jax.numpy as jnp
import numpy as np
import pytest
from scipy import stats

from jaxmarl_llm.preferences import evaluation as ev
from jaxmarl_llm.preferences import selection as sel


class SelectionTest(chex.TestCase):
    @chex.variants(with_jit=True, without_jit=True)
    def test_disagreement_picks_most_uncertain_pairs(self):
        # 3 members x 6 candidate pairs. Members agree on pairs 0, 2, 4 and disagree most
        # on pair 3, then 1; pair 5 disagrees even more but is invalid.
        a = jnp.array([[1.0, 2.0, 3.0, 4.0, 0.0, 9.0],
                       [1.0, -1.0, 3.0, -4.0, 0.0, -9.0],
                       [1.0, 0.0, 3.0, 0.0, 0.0, 0.0]])  # fmt: skip
        b = jnp.zeros_like(a)
        valid = jnp.array([True, True, True, True, True, False])

        def f(a, b, valid):
            return sel.select_top_k(sel.preference_disagreement(a, b), valid, 2)

        idx, mask = self.variant(f)(a, b, valid)
        np.testing.assert_array_equal(idx, [3, 1])
        np.testing.assert_array_equal(mask, True)
        d = sel.preference_disagreement(a, b)
        np.testing.assert_allclose(d, np.std(1 / (1 + np.exp(-np.asarray(a))), 0), atol=1e-6)

    @chex.variants(with_jit=True, without_jit=True)
    def test_uniform_distinct_and_valid(self):
        valid = jnp.arange(20) % 3 != 0
        idx, mask = self.variant(sel.select_uniform, static_argnums=2)(
            jax.random.PRNGKey(0), valid, 5
        )
        assert len(set(np.asarray(idx).tolist())) == 5 and np.all(mask)
        assert np.all(np.asarray(valid)[np.asarray(idx)])
        # Fewer valid candidates than k: the extra slots are masked.
        idx, mask = sel.select_uniform(jax.random.PRNGKey(1), jnp.arange(6) < 2, 4)
        assert mask.sum() == 2 and set(np.asarray(idx)[np.asarray(mask)].tolist()) == {0, 1}

    def test_mixed_interpolates(self):
        score = jnp.arange(10.0)  # best candidates: 9, 8, 7, ...
        valid = jnp.ones(10, bool)
        f = jax.jit(sel.select_mixed, static_argnums=3)
        idx, _ = f(jax.random.PRNGKey(0), score, valid, 4, 1.0)
        np.testing.assert_array_equal(idx, [9, 8, 7, 6])
        idx, mask = f(jax.random.PRNGKey(0), score, valid, 4, 0.5)  # same compiled fn
        assert set(np.asarray(idx[:2]).tolist()) == {9, 8}
        assert len(set(np.asarray(idx).tolist())) == 4 and np.all(mask)
        # fraction 0 is uniform: over many keys every candidate gets picked
        keys = jax.random.split(jax.random.key(1, impl="rbg"), 50)
        picks = jax.vmap(lambda k: f(k, score, valid, 4, 0.0)[0])(keys)
        assert len(set(np.asarray(picks).ravel().tolist())) == 10
        assert float(sel.linear_schedule(5, 1.0, 0.0, 10)) == pytest.approx(0.5)
        assert float(sel.linear_schedule(50, 1.0, 0.0, 10)) == pytest.approx(0.0)

    def test_kendall_consensus_and_threshold(self):
        # [E=3, M=3 steps, N=4 agents]. Step 0: members agree; step 1: member 2 reverses
        # the order; step 2: member 2 swaps one pair.
        base = jnp.array([4.0, 3.0, 2.0, 1.0])
        r = jnp.stack([
            jnp.stack([base, base, base]),
            jnp.stack([base, base, base[::-1]]),
            jnp.stack([base, base, jnp.array([3.0, 4.0, 2.0, 1.0])]),
        ], axis=1)  # fmt: skip
        c = jax.jit(sel.ensemble_rank_consensus)(r)
        # Member pairs (0,1), (0,2), (1,2): tau = 1, t, t with t = -1 and 4/6.
        np.testing.assert_allclose(c, [1.0, (1 - 2) / 3, (1 + 2 * 4 / 6) / 3], rtol=1e-6)
        traj = sel.trajectory_consensus(c[None], jnp.array([[True, True, False]]))
        np.testing.assert_allclose(traj, [(1.0 - 1 / 3) / 2], rtol=1e-6)
        # Threshold 0.9: steps 1 and 2 qualify, step 0 not.
        idx, mask = sel.select_below_threshold(jax.random.PRNGKey(0), c, jnp.ones(3, bool), 3, 0.9)
        assert set(np.asarray(idx)[np.asarray(mask)].tolist()) == {1, 2} and mask.sum() == 2
        # With fill, the third slot takes the remaining (lowest-consensus) candidate.
        idx, mask = sel.select_below_threshold(
            jax.random.PRNGKey(0), c, jnp.ones(3, bool), 3, 0.0, fill=True
        )
        np.testing.assert_array_equal(idx[0], 1)  # the only one below 0
        np.testing.assert_array_equal(idx[1:], [2, 0])
        assert np.all(mask)


class EvaluationTest(chex.TestCase):
    @chex.variants(with_jit=True, without_jit=True)
    def test_kendall_and_spearman_match_scipy(self):
        rng = np.random.default_rng(0)
        f_tau = self.variant(ev.kendall_tau)
        f_rho = self.variant(ev.spearman)
        for trial in range(6):
            n = (9, 24)[trial % 2 ^ (trial // 4)]  # two sizes: eager ops compile once each
            if trial % 2:  # with ties
                x, y = rng.integers(0, 4, n), rng.integers(0, 5, n)
            else:
                x, y = rng.normal(size=n), rng.normal(size=n)
            x, y = x.astype(np.float32), y.astype(np.float32)
            np.testing.assert_allclose(f_tau(x, y), stats.kendalltau(x, y)[0], rtol=1e-5)
            np.testing.assert_allclose(f_rho(x, y), stats.spearmanr(x, y)[0], rtol=1e-5)
            # masked: equals scipy on the valid subset
            valid = rng.random(n) < 0.7
            valid[:3] = True
            np.testing.assert_allclose(
                f_tau(x, y, valid), stats.kendalltau(x[valid], y[valid])[0], rtol=1e-5
            )
            np.testing.assert_allclose(
                f_rho(x, y, valid), stats.spearmanr(x[valid], y[valid])[0], rtol=1e-5
            )

    def test_kendall_batched(self):
        rng = np.random.default_rng(1)
        x, y = rng.normal(size=(4, 7)), rng.normal(size=(4, 7))
        out = ev.kendall_tau(jnp.asarray(x), jnp.asarray(y))
        ref = [stats.kendalltau(x[i], y[i])[0] for i in range(4)]
        np.testing.assert_allclose(out, ref, rtol=1e-5)

    @chex.variants(with_jit=True, without_jit=True)
    def test_preference_accuracy_ties(self):
        sa = jnp.array([1.0, 0.0, 2.0, 0.0, 5.0])
        sb = jnp.array([0.0, 1.0, 1.0, 0.0, 0.0])
        label = jnp.array([1.0, 1.0, 0.5, 0.75, 0.0])  # right, wrong, tie, score-tie, wrong
        valid = jnp.array([True, True, True, True, False])
        f = self.variant(ev.preference_accuracy, static_argnames="ties")
        # exclude ties: (1 + 0 + 0.5) / 3
        np.testing.assert_allclose(f(sa, sb, label, valid), 1.5 / 3, rtol=1e-6)
        # ties count half: (1 + 0 + 0.5 + 0.5) / 4
        np.testing.assert_allclose(f(sa, sb, label, valid, ties="half"), 2.0 / 4, rtol=1e-6)
        # only ties (a team that never fights): no agreement to report, not 0
        assert np.isnan(f(sa, sb, jnp.full(5, 0.5), valid))
        assert np.isnan(f(sa, sb, label, jnp.zeros(5, bool), ties="half"))

    def test_pairwise_ranking_accuracy(self):
        true = jnp.array([0.0, 1.0, 2.0, 2.0])
        pred = jnp.array([0.0, 2.0, 1.0, 5.0])
        # pairs with different truth: (0,1) ok, (0,2) ok, (0,3) ok, (1,2) wrong, (1,3) ok
        np.testing.assert_allclose(ev.pairwise_ranking_accuracy(pred, true), 4 / 5, rtol=1e-6)
        np.testing.assert_allclose(
            ev.pairwise_ranking_accuracy(pred, true, jnp.array([True, True, True, False])),
            2 / 3, rtol=1e-6,
        )  # fmt: skip

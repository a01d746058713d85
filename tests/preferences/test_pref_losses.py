"""Bradley-Terry losses: hand-computed values, masks, extreme logits."""

import math

import chex
import jax
import jax.numpy as jnp
import numpy as np

from jaxmarl_llm.lm import teachers
from jaxmarl_llm.preferences import losses


def softplus(x):  # -log sigmoid(-x), plain python
    return math.log1p(math.exp(x))


class StatePairLossTest(chex.TestCase):
    @chex.variants(with_jit=True, without_jit=True)
    def test_hand_computed(self):
        # d = s_a - s_b = [2, -1]; labels a-preferred and a tie.
        sa, sb = jnp.array([2.0, 0.0]), jnp.array([0.0, 1.0])
        label = jnp.array([1.0, 0.5])
        ce1 = softplus(-2.0)  # -log sigmoid(2)
        ce2 = 0.5 * softplus(1.0) + 0.5 * softplus(-1.0)  # -[.5 log s(-1) + .5 log s(1)]
        f = self.variant(losses.state_pair_loss)
        np.testing.assert_allclose(f(sa, sb, label), (ce1 + ce2) / 2, rtol=1e-6)
        # Confidence weights (weighted mean) and the valid mask.
        w = jnp.array([3.0, 1.0])
        np.testing.assert_allclose(f(sa, sb, label, None, w), (3 * ce1 + ce2) / 4, rtol=1e-6)
        np.testing.assert_allclose(f(sa, sb, label, jnp.array([True, False])), ce1, rtol=1e-6)

    @chex.variants(with_jit=True, without_jit=True)
    def test_lca_confidence_label(self):
        # LCA eq. 3: conf{a>b} log P(a>b) + conf{b>a} log P(b>a) with 3 of 4 votes for a.
        sa, sb = jnp.array([0.3]), jnp.array([-0.2])
        d = 0.5
        expected = -(
            0.75 * math.log(1 / (1 + math.exp(-d))) + 0.25 * math.log(1 / (1 + math.exp(d)))
        )
        out = self.variant(losses.state_pair_loss)(sa, sb, jnp.array([0.75]))
        np.testing.assert_allclose(out, expected, rtol=1e-6)

    def test_all_masked_is_zero(self):
        out = losses.state_pair_loss(jnp.ones(3), jnp.zeros(3), jnp.ones(3), jnp.zeros(3, bool))
        assert float(out) == 0.0

    def test_extreme_logits_finite(self):
        def f(s):
            return losses.state_pair_loss(s, -s, jnp.array([0.0, 1.0, 0.5, 1.0]))

        s = jnp.array([1e4, -1e4, 1e4, 1e30])
        val, grad = jax.value_and_grad(f)(s)
        assert np.isfinite(val) and np.all(np.isfinite(grad)), (val, grad)
        # Saturated: the gradient of the mean CE is (sigmoid(d) - y) * 2 / P.
        np.testing.assert_allclose(grad[:3], [0.5, -0.5, 0.25], atol=1e-6)

    def test_masked_garbage_excluded_from_value_and_grad(self):
        # Padded rows hold nan/inf and opposite labels: value and gradient must not change.
        rng = np.random.default_rng(0)
        sa, sb = rng.normal(size=6).astype(np.float32), rng.normal(size=6).astype(np.float32)
        label = (rng.random(6) < 0.5).astype(np.float32)
        pa = np.concatenate([sa, [np.nan, np.inf, 5.0]]).astype(np.float32)
        pb = np.concatenate([sb, [0.0, -np.inf, -5.0]]).astype(np.float32)
        plabel = np.concatenate([label, [0.0, 0.0, 0.0]]).astype(np.float32)
        valid = np.arange(9) < 6

        def clean(a):
            return losses.state_pair_loss(a, jnp.asarray(sb), jnp.asarray(label))

        def padded(a):
            return losses.state_pair_loss(a, jnp.asarray(pb), jnp.asarray(plabel), valid)

        v0, g0 = jax.value_and_grad(clean)(jnp.asarray(sa))
        v1, g1 = jax.value_and_grad(padded)(jnp.asarray(pa))
        np.testing.assert_allclose(v1, v0, rtol=1e-6)
        np.testing.assert_allclose(g1[:6], g0, rtol=1e-6)
        np.testing.assert_array_equal(g1[6:], 0.0)


class SegmentLossTest(chex.TestCase):
    @chex.variants(with_jit=True, without_jit=True)
    def test_hand_computed(self):
        # Segment scores 3 vs 1 (sum over steps and agents), label: b preferred.
        ra = jnp.array([[[1.0, 0.5], [2.0, -0.5]]])  # [P=1, T=2, N=2] sum 3
        rb = jnp.array([[[0.5, 0.0], [0.25, 0.25]]])  # sum 1
        f = self.variant(losses.segment_pair_loss)
        np.testing.assert_allclose(f(ra, rb, jnp.array([0.0])), softplus(2.0), rtol=1e-6)
        # DPM ties: y = 0.5.
        tie = 0.5 * softplus(2.0) + 0.5 * softplus(-2.0)
        np.testing.assert_allclose(f(ra, rb, jnp.array([0.5])), tie, rtol=1e-6)
        # Masking step 1 of segment a (score 1.5) gives d = 0.5.
        mask_a = jnp.array([[[True, True], [False, False]]])
        np.testing.assert_allclose(f(ra, rb, jnp.array([1.0]), mask_a), softplus(-0.5), rtol=1e-6)

    def test_masked_steps_excluded(self):
        ra = jnp.array([[[1.0], [jnp.nan]]])
        rb = jnp.zeros((1, 2, 1))
        mask_a = jnp.array([[[True], [False]]])
        g = jax.grad(lambda r: losses.segment_pair_loss(r, rb, jnp.array([1.0]), mask_a))(ra)
        assert np.all(np.isfinite(g))
        np.testing.assert_allclose(
            losses.segment_pair_loss(ra, rb, jnp.array([1.0]), mask_a), softplus(-1.0), rtol=1e-6
        )


class AgentRankingLossTest(chex.TestCase):
    @chex.variants(with_jit=True, without_jit=True)
    def test_hand_computed(self):
        # Teacher ranks agents 0 > 1 > 2; the model's rewards are [1, 0, -1].
        # teachers.agent_rankings(key, [[3, 2, 1]], TeacherNoise()) for a perfect teacher:
        label = np.array([[[0.5, 1, 1], [0, 0.5, 1], [0, 0, 0.5]]], np.float32)
        pairs = teachers.PairLabels(
            label=jnp.asarray(label), valid=jnp.asarray(~np.eye(3, dtype=bool))[None]
        )
        rewards = jnp.array([[1.0, 0.0, -1.0]])
        l1, l2 = softplus(-1.0), softplus(-2.0)
        # 6 ordered pairs, each -beta_ij log P(i > j): (0,1), (1,2) gap 1 and (0,2) gap 2
        # with beta 1, the reversed orders with beta 0.
        expected = (2 * l1 + l2) / 6
        f = self.variant(losses.agent_ranking_loss)
        np.testing.assert_allclose(f(rewards, pairs.label, pairs.valid), expected, rtol=1e-6)
        # DPM eq. 6 literally: (1/|M|) sum over ordered pairs of beta_ij log P(i > j).
        lab = np.asarray(pairs.label[0])
        r = np.asarray(rewards[0])
        eq6 = -np.mean(
            [
                lab[i, j] * math.log(1 / (1 + math.exp(-(r[i] - r[j]))))
                for i in range(3)
                for j in range(3)
                if i != j
            ]
        )
        np.testing.assert_allclose(f(rewards, pairs.label, pairs.valid), eq6, rtol=1e-6)
        # ... half the mean full cross-entropy over the mirrored pairs
        full = (4 * l1 + 2 * l2) / 6
        np.testing.assert_allclose(f(rewards, pairs.label, pairs.valid), full / 2, rtol=1e-6)

    @chex.variants(with_jit=True, without_jit=True)
    def test_step_and_pair_masks(self):
        label = jnp.array([[[0.5, 1.0], [0.0, 0.5]], [[0.5, 0.0], [1.0, 0.5]]])
        pair_valid = jnp.array([[[False, True], [True, False]]] * 2)
        rewards = jnp.array([[2.0, 0.0], [jnp.nan, 1.0]])
        f = self.variant(losses.agent_ranking_loss)
        # Step 1 is invalid (and holds a nan): the loss is step 0's alone, the mean over its
        # two ordered pairs of -beta log P ((1, 0) has beta 0).
        out = f(rewards, label, pair_valid, jnp.array([True, False]))
        np.testing.assert_allclose(out, softplus(-2.0) / 2, rtol=1e-6)
        # With only (0, 1) marked, that pair alone.
        upper = jnp.array([[[False, True], [False, False]]] * 2)
        out2 = f(rewards, label, upper, jnp.array([True, False]))
        np.testing.assert_allclose(out2, softplus(-2.0), rtol=1e-6)
        g = jax.grad(lambda r: f(r, label, pair_valid, jnp.array([True, False])))(rewards)
        assert np.all(np.isfinite(g))

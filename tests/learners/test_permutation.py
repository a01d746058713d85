"""The sort-free minibatch permutation: a bijection, key-determined, uniform."""

import math

import chex
import jax
import numpy as np
import pytest
from absl.testing import parameterized
from scipy.stats import chisquare

from jaxmarl_llm.learners.permutation import feistel_permutation


class FeistelPermutationTest(parameterized.TestCase):
    @chex.variants(with_jit=True, without_jit=True)
    @parameterized.parameters(0, 1, 2, 3, 7, 100, 1000, 4096, 98305)
    def test_is_a_permutation(self, n):
        perm = self.variant(lambda k: feistel_permutation(k, n))(jax.random.PRNGKey(n))
        chex.assert_shape(perm, (n,))
        chex.assert_type(perm, np.int32)
        np.testing.assert_array_equal(np.sort(np.asarray(perm)), np.arange(n))

    def test_same_key_same_order_other_key_other_order(self):
        a = feistel_permutation(jax.random.PRNGKey(0), 1000)
        b = feistel_permutation(jax.random.PRNGKey(0), 1000)
        c = feistel_permutation(jax.random.PRNGKey(1), 1000)
        np.testing.assert_array_equal(a, b)
        assert (np.asarray(a) != np.asarray(c)).mean() > 0.9

    @parameterized.parameters(3, 4, 5)
    def test_all_orders_equally_likely(self, n):
        keys = jax.random.split(jax.random.PRNGKey(11), 24_000)
        perms = np.asarray(jax.jit(jax.vmap(lambda k: feistel_permutation(k, n)))(keys))
        orders, counts = np.unique(perms, axis=0, return_counts=True)
        assert len(orders) == math.factorial(n)
        assert chisquare(counts).pvalue > 1e-3, counts

    def test_positions_uniform_for_a_minibatch_sized_domain(self):
        n = 1000
        keys = jax.random.split(jax.random.PRNGKey(5), 20_000)
        perms = np.asarray(jax.jit(jax.vmap(lambda k: feistel_permutation(k, n)))(keys))
        for element in (0, 499, 999):
            where = np.argmax(perms == element, axis=1)
            assert chisquare(np.bincount(where // 50, minlength=20)).pvalue > 1e-3

    def test_rejects_huge_domains(self):
        with pytest.raises(ValueError, match="n < 2\\*\\*31"):
            feistel_permutation(jax.random.PRNGKey(0), 2**31)

"""Top-p filtering by bisection equals the sorted-cumulative-mass definition."""

import chex
import jax
import jax.numpy as jnp
import numpy as np
from absl.testing import parameterized

from jaxmarl_llm.lm.nucleus import mass_above, nucleus_threshold, top_p_filter


def sorted_nucleus(logits: np.ndarray, top_p: np.ndarray) -> np.ndarray:
    """The nucleus from the definition: sort, keep each token whose mass strictly above
    it is below top_p, and every token tied with the last one kept."""
    keep = np.zeros(logits.shape, bool)
    for b, (row, p) in enumerate(zip(logits, top_p, strict=True)):
        probs = np.exp(row - row.max())
        probs /= probs.sum()
        order = np.argsort(-probs, kind="stable")
        before = np.cumsum(probs[order]) - probs[order]
        last = probs[order][before < p].min()
        keep[b] = probs >= last
    return keep


class NucleusTest(parameterized.TestCase):
    @chex.variants(with_jit=True, without_jit=True)
    def test_equals_the_sorted_definition_ties_included(self):
        rng = np.random.default_rng(0)
        fn = self.variant(top_p_filter)
        for trial in range(40):
            logits = rng.normal(size=(3, 17)) * rng.uniform(0.2, 4.0)
            if trial % 4 == 0:
                logits = np.round(logits)  # ties at the edge of the nucleus
            logits = logits.astype(np.float32)
            top_p = rng.uniform(0.05, 1.0, size=3).astype(np.float32)
            kept = np.isfinite(np.asarray(fn(jnp.asarray(logits), jnp.asarray(top_p))))
            np.testing.assert_array_equal(kept, sorted_nucleus(logits, top_p), err_msg=trial)

    @chex.variants(with_jit=True, without_jit=True)
    def test_kept_logits_are_unchanged_and_edge_cases(self):
        logits = jnp.log(jnp.array([[0.5, 0.3, 0.15, 0.05], [0.97, 0.01, 0.01, 0.01]]))
        out = self.variant(top_p_filter)(logits, jnp.array([0.7, 0.5]))
        # 0.5 < 0.7 keeps the second token; 0.8 >= 0.7 drops the third
        np.testing.assert_array_equal(np.isfinite(out), [[1, 1, 0, 0], [1, 0, 0, 0]])
        np.testing.assert_array_equal(out[0, :2], logits[0, :2])
        assert out[1, 0] == logits[1, 0]
        # top_p = 1 keeps every token with any mass
        everything = self.variant(top_p_filter)(logits, jnp.array([1.0, 1.0]))
        assert np.isfinite(everything).all()

    def test_threshold_is_the_smallest_with_mass_above_below_top_p(self):
        probs = jax.nn.softmax(jax.random.normal(jax.random.key(1), (2, 1000)) * 3, axis=-1)
        top_p = jnp.array([0.9, 0.3])
        t = nucleus_threshold(probs, top_p)
        assert np.all(np.asarray(mass_above(probs, t)) < np.asarray(top_p))
        below = jax.lax.nextafter(t, jnp.zeros_like(t))
        assert np.all(np.asarray(mass_above(probs, below)) >= np.asarray(top_p))

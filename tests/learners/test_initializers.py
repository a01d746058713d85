"""The vmap-safe orthogonal initialiser: same values as flax's, no batched QR."""

import chex
import flax.linen as nn
import jax
import jax.numpy as jnp
import numpy as np
import pytest
from absl.testing import parameterized

import envs
from jaxmarl_llm.config import build_config
from jaxmarl_llm.learners import make_learner
from jaxmarl_llm.learners.initializers import orthogonal
from jaxmarl_llm.shaping.registry import build_shaper

SHAPES = [(8, 5), (5, 8), (6, 6), (3, 4, 5), (32, 1)]


def _qr_input_shapes(jaxpr) -> list[tuple[int, ...]]:
    """Operand shapes of every QR in a jaxpr, nested jaxprs (scan, jit, ...) included."""
    shapes = []
    for eqn in jaxpr.eqns:
        if eqn.primitive.name in ("qr", "geqrf", "householder_product"):
            shapes.append(tuple(eqn.invars[0].aval.shape))
        for param in eqn.params.values():
            for sub in param if isinstance(param, (tuple, list)) else (param,):
                inner = getattr(sub, "jaxpr", sub)
                if hasattr(inner, "eqns"):
                    shapes.extend(_qr_input_shapes(inner))
    return shapes


class OrthogonalTest(parameterized.TestCase):
    @chex.variants(with_jit=True, without_jit=True)
    @parameterized.parameters(*SHAPES)
    def test_matches_flax_orthogonal(self, *shape):
        key = jax.random.PRNGKey(3)
        ours = self.variant(lambda k: orthogonal(1.7)(k, shape))(key)
        ref = nn.initializers.orthogonal(1.7)(key, shape)
        chex.assert_shape(ours, shape)
        np.testing.assert_allclose(ours, ref, atol=1e-5)

    @parameterized.parameters(*SHAPES)
    def test_columns_or_rows_are_orthonormal(self, *shape):
        w = np.asarray(orthogonal(1.0)(jax.random.PRNGKey(0), shape)).reshape(-1, shape[-1])
        gram = w.T @ w if w.shape[0] >= w.shape[1] else w @ w.T
        np.testing.assert_allclose(gram, np.eye(gram.shape[0]), atol=1e-5)

    def test_vmapped_values_equal_per_key_values(self):
        keys = jax.random.split(jax.random.PRNGKey(1), 4)
        batched = jax.jit(jax.vmap(lambda k: orthogonal(2.0)(k, (7, 4))))(keys)
        for i, k in enumerate(keys):
            np.testing.assert_allclose(batched[i], orthogonal(2.0)(k, (7, 4)), atol=1e-5)

    def test_rejects_vectors(self):
        with pytest.raises(ValueError, match="at least 2 dimensions"):
            orthogonal()(jax.random.PRNGKey(0), (5,))

    def test_nested_vmap_runs_only_unbatched_qr(self):
        keys = jnp.stack([jax.random.split(jax.random.PRNGKey(0), 3)] * 2)
        jaxpr = jax.make_jaxpr(jax.vmap(jax.vmap(lambda k: orthogonal()(k, (8, 5)))))(keys)
        assert _qr_input_shapes(jaxpr.jaxpr) == [(8, 5)]


@pytest.mark.parametrize("algo", ["qmix", "mappo"])
def test_seed_vmapped_learner_init_has_no_batched_qr(algo):
    """Several batched QRs in one XLA:CPU program intermittently deadlock; learners must
    initialise N seeds with unbatched ones only (regression: CI hung in QMIX init)."""
    cfg = build_config(
        {"env": {"name": "mpe:simple_spread_3"}, "algo": {"name": algo}},
        ["algo.num_envs=2", "algo.hidden_dim=16"] if algo == "qmix" else ["algo.num_envs=2"],
    )
    env = envs.make_array_env(cfg.env.name)
    learner = make_learner(cfg.algo, env, build_shaper(cfg.shaping, env))
    keys = jax.random.split(jax.random.PRNGKey(0), 2)
    qr_shapes = _qr_input_shapes(jax.make_jaxpr(jax.vmap(learner.init))(keys).jaxpr)
    assert qr_shapes, "expected orthogonal initialisation to use QR"
    assert all(len(s) == 2 for s in qr_shapes), qr_shapes
    state = jax.block_until_ready(jax.jit(jax.vmap(learner.init))(keys))
    chex.assert_tree_all_finite(state.params)

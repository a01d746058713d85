"""Mixers: VDN is the sum, QMIX is monotonic in every agent's utility and state-dependent."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from jaxmarl_llm.config import QLearningConfig
from jaxmarl_llm.learners.mixers import QMixer, VDNMixer, make_mixer

N, S = 4, 6


def _inputs(seed, batch=(5, 3)):
    k1, k2 = jax.random.split(jax.random.PRNGKey(seed))
    return jax.random.normal(k1, (*batch, N)) * 3.0, jax.random.normal(k2, (*batch, S))


def test_vdn_is_the_sum():
    qs, state = _inputs(0)
    mixer = make_mixer("vdn")
    assert isinstance(mixer, VDNMixer)
    params = mixer.init(jax.random.PRNGKey(0), qs, state)
    assert jax.tree.leaves(params) == []
    np.testing.assert_allclose(mixer.apply(params, qs, state), qs.sum(-1), rtol=1e-6)


def test_qmix_is_monotonic_in_every_agent():
    cfg = QLearningConfig(mixer_embed_dim=8, mixer_hypernet_dim=16)
    mixer = make_mixer("qmix", cfg)
    assert isinstance(mixer, QMixer) and mixer.embed_dim == 8 and mixer.hypernet_dim == 16

    @jax.jit
    def q_tot_and_grads(p, qs, state):
        grad = jax.grad(lambda q, s: mixer.apply(p, q, s))
        return mixer.apply(p, qs, state), jax.vmap(jax.vmap(grad))(qs, state)

    init = jax.jit(mixer.init)
    for seed in range(2):
        qs, state = _inputs(seed)
        params = init(jax.random.PRNGKey(seed), qs[0, 0], state[0, 0])
        # random large parameters too, so monotonicity cannot come from a lucky init
        rng = np.random.default_rng(seed)
        noisy = jax.tree.map(
            lambda x, r=rng: jnp.asarray(r.normal(size=x.shape) * 2, x.dtype), params
        )
        for p in (params, noisy):
            q_tot, grads = q_tot_and_grads(p, qs, state)
            assert q_tot.shape == qs.shape[:-1]
            assert grads.shape == qs.shape
            assert bool((grads >= 0).all()), float(grads.min())
            assert float(grads.max()) > 0.0


def test_qmix_depends_on_state():
    mixer = QMixer(init_scale=1.0)  # the default 0.001 starts Q_tot (nearly) state-free
    qs, state = _inputs(3)
    params = jax.jit(mixer.init)(jax.random.PRNGKey(0), qs, state)
    apply = jax.jit(mixer.apply)
    a = apply(params, qs, state)
    b = apply(params, qs, state + 1.0)
    assert float(jnp.abs(a - b).max()) > 1e-3


def test_unknown_mixer():
    with pytest.raises(ValueError, match="unknown mixer 'qplex'"):
        make_mixer("qplex")

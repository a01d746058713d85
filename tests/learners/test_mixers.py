"""Mixers: VDN is the sum, QMIX is monotonic in every agent's utility and state-dependent."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from jaxmarl_llm.learners.mixers import QMixer, VDNMixer, make_mixer
from jaxmarl_llm.learners.qlearning import QLearningConfig

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
    with pytest.raises(ValueError, match="unknown mixer 'qtran'; valid: qmix, vdn, qplex"):
        make_mixer("qtran")


PENALTY = np.array([[8.0, -12.0, -12.0], [-12.0, 0.0, 0.0], [-12.0, 0.0, 0.0]], np.float32)


def _fit_payoff(name: str, steps: int = 3000) -> tuple[np.ndarray, np.ndarray]:
    """Fit per-agent utility tables and the mixer to the 3x3 penalty game by regression
    over all nine joint actions; returns (fitted Q_tot table, greedy joint action).

    What is tested is expressiveness, not exploration: the utilities start with the
    optimum (0, 0) as each agent's greedy action."""
    mixer = make_mixer(name, QLearningConfig(mixer_hypernet_dim=16, mixer_init_scale=1.0))
    a0, a1 = np.meshgrid(np.arange(3), np.arange(3), indexing="ij")
    joint = np.stack([a0.ravel(), a1.ravel()], -1)  # [9, 2]
    one_hot = jax.nn.one_hot(joint, 3)
    state = jnp.ones((9, 1))
    utilities = jnp.array([[1.0, 0.0, 0.0], [1.0, 0.0, 0.0]])

    def q_tot(p):
        chosen = jnp.stack([p["u"][0][joint[:, 0]], p["u"][1][joint[:, 1]]], -1)
        greedy = jnp.broadcast_to(p["u"].max(-1), (9, 2))
        return mixer.apply(p["mixer"], chosen, state, greedy, one_hot)

    mixer_params = mixer.init(
        jax.random.PRNGKey(1), jnp.zeros((9, 2)), state, jnp.zeros((9, 2)), one_hot
    )
    params = {"u": utilities, "mixer": mixer_params}
    import optax

    opt = optax.adam(1e-2)

    @jax.jit
    def fit(params):
        def step(carry, _):
            p, s = carry
            loss, g = jax.value_and_grad(lambda p: ((q_tot(p) - PENALTY.ravel()) ** 2).mean())(p)
            u, s = opt.update(g, s, p)
            return (optax.apply_updates(p, u), s), loss

        (p, _), _ = jax.lax.scan(step, (params, opt.init(params)), None, steps)
        return p

    p = fit(params)
    return np.asarray(q_tot(p)).reshape(3, 3), np.asarray(p["u"].argmax(-1))


@pytest.mark.slow
def test_qplex_represents_the_non_monotonic_penalty_game_qmix_cannot():
    table, greedy = _fit_payoff("qplex")
    np.testing.assert_allclose(table, PENALTY, atol=0.5)
    # IGM: the agents' own greedy actions are the joint optimum (8 at (0, 0))
    np.testing.assert_array_equal(greedy, [0, 0])
    qmix_table, _ = _fit_payoff("qmix")
    assert np.abs(qmix_table - PENALTY).max() > 3.0  # a monotonic mixer cannot fit it


def test_qplex_at_the_greedy_action_is_the_sum_of_values():
    mixer = make_mixer("qplex")
    qs, state = _inputs(4)
    greedy = qs + 1.0
    actions = jax.nn.one_hot(jnp.zeros(qs.shape, jnp.int32), 5)
    params = mixer.init(jax.random.PRNGKey(0), qs, state, greedy, actions)
    at_greedy = mixer.apply(params, greedy, state, greedy, actions)
    below = mixer.apply(params, qs, state, greedy, actions)
    assert bool((below < at_greedy).all())  # positive weights on negative advantages
    with pytest.raises(ValueError, match="needs the greedy utilities"):
        mixer.apply(params, qs, state)

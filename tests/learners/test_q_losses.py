"""TD targets and masked losses against plain Python reference loops."""

import chex
import jax
import jax.numpy as jnp
import numpy as np
import pytest

from jaxmarl_llm.learners.q_losses import (
    lambda_returns,
    masked_argmax,
    masked_max,
    masked_td_loss,
    next_agent_values,
    one_step_targets,
    sequence_targets,
)

GAMMA = 0.9


def _episode(T, B, seed, done_p=0.3):
    rng = np.random.default_rng(seed)
    r = rng.normal(size=(T, B)).astype(np.float32)
    d = rng.random((T, B)) < done_p
    d[2, 0] = True  # a done mid-sequence, so the next step starts a new episode
    v = rng.normal(size=(T, B)).astype(np.float32)
    return r, d, v


def ref_lambda_returns(r, d, v, gamma, lam):
    """Truncated lambda-return as a weighted sum of n-step returns (Sutton & Barto 12.1)."""
    T = len(r)
    out = np.zeros(T)
    for t in range(T):
        # n-step returns until the episode ends or the sequence does
        n_step, ret, disc = [], 0.0, 1.0
        for k in range(t, T):
            ret += disc * r[k]
            disc *= gamma
            if d[k]:
                n_step.append(ret)  # terminal: no bootstrap, longer returns are equal
                break
            n_step.append(ret + disc * v[k])
        h = len(n_step)
        g = sum((1 - lam) * lam ** (n - 1) * n_step[n - 1] for n in range(1, h))
        out[t] = g + lam ** (h - 1) * n_step[h - 1]
    return out


def ref_one_step(r, d, v, gamma):
    return np.array([r[t] + (0.0 if d[t] else gamma * v[t]) for t in range(len(r))])


class TDTargetsTest(chex.TestCase):
    @chex.variants(with_jit=True, without_jit=True)
    def test_one_step_targets(self):
        r, d, v = _episode(7, 3, 0)
        got = self.variant(one_step_targets, static_argnums=3)(r, d, v, GAMMA)
        for b in range(3):
            np.testing.assert_allclose(
                got[:, b], ref_one_step(r[:, b], d[:, b], v[:, b], GAMMA), rtol=1e-5, atol=1e-6
            )

    @chex.variants(with_jit=True, without_jit=True)
    def test_lambda_returns(self):
        r, d, v = _episode(9, 4, 1)
        for lam in (0.0, 0.6, 1.0):
            got = self.variant(lambda_returns, static_argnums=(3, 4))(r, d, v, GAMMA, lam)
            for b in range(4):
                want = ref_lambda_returns(r[:, b], d[:, b], v[:, b], GAMMA, lam)
                np.testing.assert_allclose(got[:, b], want, rtol=1e-5, atol=1e-5)

    @chex.variants(with_jit=True, without_jit=True)
    def test_lambda_zero_is_one_step(self):
        r, d, v = _episode(6, 2, 2)
        got = self.variant(lambda_returns, static_argnums=(3, 4))(r, d, v, GAMMA, 0.0)
        np.testing.assert_allclose(got, one_step_targets(r, d, v, GAMMA), rtol=1e-6, atol=1e-6)

    @chex.variants(with_jit=True, without_jit=True)
    def test_sequence_targets(self):
        r, d, v = _episode(8, 5, 3)
        d[-1, :2] = True  # last step terminal for two columns, open for the rest
        d[-1, 2:] = False
        next_v = v[:-1]
        for lam in (None, 0.8):
            f = self.variant(sequence_targets, static_argnums=(3, 4))
            targets, valid = f(r, d, next_v, GAMMA, lam)
            chex.assert_shape([targets, valid], (8, 5))
            np.testing.assert_array_equal(valid[:-1], True)
            np.testing.assert_array_equal(valid[-1], d[-1])
            np.testing.assert_allclose(targets[-1], r[-1])
            for b in range(5):
                if lam is None:
                    want = ref_one_step(r[:-1, b], d[:-1, b], next_v[:, b], GAMMA)
                else:
                    want = ref_lambda_returns(r[:-1, b], d[:-1, b], next_v[:, b], GAMMA, lam)
                np.testing.assert_allclose(targets[:-1, b], want, rtol=1e-5, atol=1e-5)

    @chex.variants(with_jit=True, without_jit=True)
    def test_single_step_sequence(self):
        r = jnp.array([[1.5, -2.0]])
        d = jnp.array([[True, False]])
        targets, valid = self.variant(sequence_targets, static_argnums=(3, 4))(
            r, d, jnp.zeros((0, 2)), GAMMA, 0.5
        )
        np.testing.assert_allclose(targets, r)
        np.testing.assert_array_equal(valid, d)


def test_masked_loss_ignores_invalid_steps():
    q = jnp.array([1.0, 2.0, 3.0])
    targets = jnp.array([0.0, 2.0, 1e6])
    valid = jnp.array([True, True, False])
    assert float(masked_td_loss(q, targets, valid)) == pytest.approx(0.5)
    assert float(masked_td_loss(q, targets, jnp.zeros(3, bool))) == 0.0
    # targets are constants: no gradient flows into them
    g = jax.grad(lambda t: masked_td_loss(q, t, valid))(targets)
    np.testing.assert_array_equal(g, 0.0)


def test_masked_max_and_double_q_never_pick_illegal_actions():
    rng = np.random.default_rng(0)
    q_target = jnp.asarray(rng.normal(size=(64, 3, 5)), jnp.float32)
    q_online = jnp.asarray(rng.normal(size=(64, 3, 5)), jnp.float32)
    avail = jnp.asarray(rng.random((64, 3, 5)) < 0.5).at[..., 0].set(True)
    # illegal actions carry the largest values: any leak shows up as 100
    q_target = jnp.where(avail, q_target, 100.0)
    q_online = jnp.where(avail, q_online, 100.0)
    a = masked_argmax(q_online, avail)
    assert bool(jnp.take_along_axis(avail, a[..., None], -1).all())
    np.testing.assert_array_less(masked_max(q_target, avail), 100.0)
    ref_max = np.where(avail, q_target, -np.inf).max(-1)
    np.testing.assert_allclose(next_agent_values(q_target, q_online, avail, False), ref_max)
    dq = next_agent_values(q_target, q_online, avail, True)
    ref_dq = np.take_along_axis(np.asarray(q_target), np.asarray(a)[..., None], -1)[..., 0]
    np.testing.assert_allclose(dq, ref_dq)
    np.testing.assert_array_less(dq, 100.0)

"""GAE, n-step returns and PPO losses against plain references, with and without jit."""

import chex
import jax.numpy as jnp
import numpy as np

from jaxmarl_llm.learners.losses import clipped_policy_loss, gae, nstep_returns, value_loss


def gae_reference(rewards, values, dones, last_value, gamma, lam):
    T = len(rewards)
    adv = np.zeros_like(rewards)
    next_adv = np.zeros_like(last_value)
    for t in reversed(range(T)):
        next_v = last_value if t == T - 1 else values[t + 1]
        nd = 1.0 - dones[t]
        delta = rewards[t] + gamma * next_v * nd - values[t]
        next_adv = delta + gamma * lam * nd * next_adv
        adv[t] = next_adv
    return adv, adv + values


class GAETest(chex.TestCase):
    @chex.variants(with_jit=True, without_jit=True)
    def test_matches_reference_loop(self):
        rng = np.random.default_rng(0)
        T, B = 37, 5
        rewards = rng.normal(size=(T, B)).astype(np.float32)
        values = rng.normal(size=(T, B)).astype(np.float32)
        dones = (rng.random((T, B)) < 0.15).astype(np.float32)
        last = rng.normal(size=(B,)).astype(np.float32)
        f = self.variant(lambda *a: gae(*a, gamma=0.97, gae_lambda=0.9))
        adv, targets = f(rewards, values, dones, last)
        ref_adv, ref_t = gae_reference(rewards, values, dones, last, 0.97, 0.9)
        np.testing.assert_allclose(adv, ref_adv, rtol=1e-5, atol=1e-5)
        np.testing.assert_allclose(targets, ref_t, rtol=1e-5, atol=1e-5)

    def test_done_blocks_bootstrap(self):
        # One step, episode ends: advantage is r - V regardless of the next value.
        adv, _ = gae(
            jnp.array([1.0]), jnp.array([0.25]), jnp.array([1.0]), jnp.array(100.0), 0.99, 0.95
        )
        np.testing.assert_allclose(adv, [0.75])


class PPOLossTest(chex.TestCase):
    @chex.variants(with_jit=True, without_jit=True)
    def test_clipped_policy_loss_hand_computed(self):
        # ratios e^{0.5}=1.6487 (clipped to 1.2 for a positive advantage) and
        # e^{-0.5}=0.6065 (min picks the clipped 0.8 for a negative advantage).
        logp = jnp.array([0.5, -0.5])
        old = jnp.zeros(2)
        adv = jnp.array([2.0, -1.0])
        loss, stats = self.variant(lambda *a: clipped_policy_loss(*a, clip_eps=0.2))(logp, old, adv)
        expected = -np.mean(
            [min(np.exp(0.5) * 2.0, 1.2 * 2.0), min(np.exp(-0.5) * -1.0, 0.8 * -1.0)]
        )
        np.testing.assert_allclose(loss, expected, rtol=1e-6)
        np.testing.assert_allclose(stats["clip_frac"], 1.0)

    @chex.variants(with_jit=True, without_jit=True)
    def test_value_loss_clipping(self):
        v, old, tgt = jnp.array([2.0]), jnp.array([0.0]), jnp.array([3.0])
        unclipped = self.variant(lambda *a: value_loss(*a, clip_eps=0.5, clip=False))(v, old, tgt)
        clipped = self.variant(lambda *a: value_loss(*a, clip_eps=0.5, clip=True))(v, old, tgt)
        np.testing.assert_allclose(unclipped, 0.5 * 1.0)
        # pessimistic: the clipped error
        np.testing.assert_allclose(clipped, 0.5 * (3.0 - 0.5) ** 2)


def nstep_reference(rewards, dones, values, last_value, gamma, n):
    """EPyMARL-style loop: sum the rewards of up to n steps, stop after an episode's end,
    bootstrap from the value n steps on (or after the rollout's last step)."""
    T = len(rewards)
    ext = np.concatenate([values, last_value[None]], 0)
    out = np.zeros_like(rewards)
    for t in range(T):
        g, alive = np.zeros_like(last_value), np.ones_like(last_value)
        for k in range(n):
            if t + k >= T:
                break
            g = g + gamma**k * alive * rewards[t + k]
            alive = alive * (1.0 - dones[t + k])
            if k + 1 == n or t + k + 1 == T:
                g = g + gamma ** (k + 1) * alive * ext[t + k + 1]
        out[t] = g
    return out


class NStepTest(chex.TestCase):
    @chex.variants(with_jit=True, without_jit=True)
    def test_matches_reference_loop(self):
        rng = np.random.default_rng(1)
        T, B = 23, 4
        rewards = rng.normal(size=(T, B)).astype(np.float32)
        values = rng.normal(size=(T, B)).astype(np.float32)
        dones = (rng.random((T, B)) < 0.2).astype(np.float32)
        last = rng.normal(size=(B,)).astype(np.float32)
        for n in (1, 5, 40):
            f = self.variant(lambda *a, n=n: nstep_returns(*a, gamma=0.9, n=n))
            np.testing.assert_allclose(
                f(rewards, dones, values, last),
                nstep_reference(rewards, dones, values, last, 0.9, n),
                rtol=1e-5,
                atol=1e-5,
            )

    def test_hand_computed(self):
        r = jnp.array([1.0, 2.0, 3.0, 4.0])
        v = jnp.array([10.0, 20.0, 30.0, 40.0])
        d = jnp.array([0.0, 0.0, 1.0, 0.0])  # the episode ends after step 2
        g = nstep_returns(r, d, v, jnp.array(50.0), gamma=0.5, n=2)
        # t=0: 1 + .5*2 + .25*V2; t=1: 2 + .5*3 (ends); t=2: 3 (ends); t=3: 4 + .5*V_T
        np.testing.assert_allclose(g, [1 + 1 + 7.5, 2 + 1.5, 3.0, 4 + 25.0])
        # one step: the TD target; as many steps as the rollout: the discounted return
        np.testing.assert_allclose(
            nstep_returns(r, d, v, jnp.array(50.0), 0.5, 1), r + 0.5 * jnp.array([20, 30, 0, 50])
        )
        with np.testing.assert_raises(ValueError):
            nstep_returns(r, d, v, jnp.array(50.0), 0.5, 0)

"""The jitted trainer: recovers a known potential's ordering, ensembles stay diverse,
segment and ranking labels train, and a second call does not recompile."""

import jax
import jax.numpy as jnp
import numpy as np

from jaxmarl_llm.lm import teachers
from jaxmarl_llm.preferences import datasets as ds
from jaxmarl_llm.preferences.evaluation import pairwise_ranking_accuracy, preference_accuracy
from jaxmarl_llm.preferences.models import RewardModel
from jaxmarl_llm.preferences.train import FitConfig, ensemble_loss, fit


def true_value(x):  # a nonlinear 2-D potential
    return jnp.tanh(x[..., 0]) + 0.5 * x[..., 1] ** 2


def _key(seed):
    # RBG keys: XLA:CPU compiles them ~3x faster than threefry, and the trainer must work
    # with typed keys too.
    return jax.random.key(seed, impl="rbg")


def _states(key, shape):
    # Uniform states in [-2, 2]: jax.random.normal compiles ~4x slower on XLA:CPU.
    return jax.random.uniform(key, shape, minval=-2.0, maxval=2.0)


MODEL = RewardModel(hidden=(32, 32), ensemble_size=3)
CONFIG = FitConfig(num_steps=400, batch_size=128, learning_rate=3e-3)
CAPACITY = 2048


@jax.jit
def _ranking_acc(params, x, sign=1.0):
    members = MODEL.apply_members(params, x)
    acc = lambda pred: pairwise_ranking_accuracy(pred, sign * true_value(x))
    return acc(members.mean(0)), jax.vmap(acc)(members), members


@jax.jit
def _perfect_dataset(key, n):
    """``n`` (traced) valid pairs labelled by a perfect teacher, padded to ``CAPACITY``."""
    ka, kl = jax.random.split(key)
    xa, xb = _states(ka, (2, CAPACITY, 2))
    labels = teachers.pair_preferences(kl, true_value(xa), true_value(xb), teachers.TeacherNoise())
    data = ds.state_pairs_from_labels(xa, xb, labels)
    valid = data.valid & (jnp.arange(CAPACITY) < n)
    # Padding rows are zeros, as ds.pad_to_capacity leaves them.
    return jax.tree.map(lambda x: jnp.where(valid.reshape(-1, *[1] * (x.ndim - 1)), x, 0), data)


def test_perfect_teacher_recovers_ordering_and_no_recompile():
    key = _key(0)
    data = _perfect_dataset(key, 1500)
    params0 = MODEL.init(_key(1), 2)
    params, losses = fit(MODEL, params0, data, _key(2), CONFIG)
    assert losses.shape == (CONFIG.num_steps, 3)
    assert np.all(np.isfinite(losses))
    assert float(losses[-20:].mean()) < 0.5 * float(losses[:5].mean())

    test_x = np.random.default_rng(3).uniform(-2, 2, size=(400, 2)).astype(np.float32)
    acc, member_acc, members = _ranking_acc(params, test_x)
    assert float(acc) > 0.95, float(acc)
    # Every member learns the ordering, yet the members differ (init + bootstrap).
    assert np.all(member_acc > 0.93), member_acc
    assert not np.allclose(members[0], members[1], atol=1e-3)
    # Held-out labels from the same teacher.
    held = _perfect_dataset(_key(4), 500)
    label_acc = jax.jit(
        lambda p, h: preference_accuracy(
            MODEL.apply(p, h.features_a), MODEL.apply(p, h.features_b), h.label, h.valid
        )
    )(params, held)
    assert float(label_acc) > 0.95
    full = ensemble_loss(MODEL, params, held)
    assert full.shape == (3,) and np.all(full < 0.3)

    # Same shapes, fewer valid rows, other labels and keys: the compiled loop is reused.
    cache = fit._cache_size()
    smaller = _perfect_dataset(_key(5), 700)
    smaller = smaller.replace(label=1.0 - smaller.label)
    params2, _ = fit(MODEL, params0, smaller, _key(6), CONFIG)
    assert fit._cache_size() == cache
    # The flipped labels learned the reversed order: masks kept the padding out.
    acc2, _, _ = _ranking_acc(params2, test_x, -1.0)
    assert float(acc2) > 0.9, float(acc2)


def test_padding_rows_are_ignored_by_training():
    # Padded rows hold features that would wreck training if sampled (huge values) and
    # are invalid: they must never be drawn (mask = 0 weight) nor counted.
    key = _key(10)
    data = _perfect_dataset(key, 1500)
    poison = data.replace(
        features_a=jnp.where(data.valid[:, None], data.features_a, 1e6),
        label=jnp.where(data.valid, data.label, 1.0),
    )
    params0 = MODEL.init(_key(1), 2)
    p_clean, l_clean = fit(MODEL, params0, data, key, CONFIG)
    p_poison, l_poison = fit(MODEL, params0, poison, key, CONFIG)
    np.testing.assert_allclose(l_poison, l_clean, rtol=1e-5, atol=1e-6)
    jax.tree.map(lambda a, b: np.testing.assert_allclose(a, b, rtol=1e-5, atol=1e-6),
                 p_poison, p_clean)  # fmt: skip


SCALE = jnp.array([1.0, 2.0])


def _step_reward(x):  # [..., N, D] -> [..., N]: agent feature 0, agent 1 counts double
    return x[..., 0] * SCALE


@jax.jit
def _dpm_data(key):
    # DPM's scripted teacher: segment returns compared, agents ranked per step.
    k1, k2, k3, k4, k5 = jax.random.split(key, 5)
    n_seg, t, n, d = 256, 4, 2, 3
    fa, fb = _states(k1, (2, n_seg, t, n, d))
    seg_labels = teachers.segment_preferences(
        k3, _step_reward(fa).sum(-1), _step_reward(fb).sum(-1), teachers.TeacherNoise()
    )
    segs = ds.segment_pairs(fa, fb, seg_labels, capacity=300)
    steps = _states(k4, (512, n, d))
    pairs = teachers.agent_rankings(k5, _step_reward(steps), teachers.TeacherNoise())
    return segs, ds.agent_ranking_dataset(steps, pairs, capacity=600)


def test_segments_and_agent_rankings_train_jointly():
    key = _key(20)
    segs, ranks = _dpm_data(key)
    model = RewardModel(hidden=(32,), ensemble_size=2, num_agents=2, agent_one_hot=True)
    params = model.init(_key(0), 3)
    cfg = FitConfig(num_steps=300, batch_size=64, learning_rate=3e-3)
    params, losses = fit(model, params, (segs, ranks), key, cfg)
    assert losses.shape == (300, 2) and np.all(np.isfinite(losses))
    assert float(losses[-20:].mean()) < 0.6 * float(losses[:5].mean())

    @jax.jit
    def accuracy(params, test):
        pred = model.apply_agents(params, test)  # [M, 2]
        return pairwise_ranking_accuracy(pred.reshape(-1), _step_reward(test).reshape(-1))

    acc = accuracy(
        params, np.random.default_rng(9).uniform(-2, 2, size=(300, 2, 3)).astype(np.float32)
    )
    assert float(acc) > 0.9, float(acc)

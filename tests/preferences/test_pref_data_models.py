"""Preference datasets (padding, ring insert, split) and reward models (ensembles, groups)."""

import chex
import jax
import jax.numpy as jnp
import numpy as np
import pytest

from jaxmarl_llm.lm import teachers
from jaxmarl_llm.preferences import datasets as ds
from jaxmarl_llm.preferences.models import RewardModel


def _pairs(n, d=3, seed=0):
    rng = np.random.default_rng(seed)
    a, b = rng.normal(size=(n, d)), rng.normal(size=(n, d))
    return a, b, (a[:, 0] > b[:, 0]).astype(np.float32)


class DatasetTest(chex.TestCase):
    def test_padding_and_labels(self):
        a, b, y = _pairs(5)
        labels = teachers.PairLabels(label=jnp.asarray(y), valid=jnp.array([1, 1, 0, 1, 1], bool))
        d = ds.state_pairs_from_labels(a, b, labels, agent=2, capacity=8)
        chex.assert_shape([d.features_a, d.features_b], (8, 3))
        np.testing.assert_array_equal(d.valid, [1, 1, 0, 1, 1, 0, 0, 0])
        np.testing.assert_array_equal(d.agent[:5], 2)
        np.testing.assert_array_equal(d.features_a[5:], 0.0)
        assert int(ds.num_valid(d)) == 4
        with pytest.raises(ValueError):
            ds.state_pairs(a, b, y, capacity=4)

    def test_confidence_builder(self):
        a, b, _ = _pairs(4)
        conf = jnp.array([0.75, 0.5, 1.0, 0.5])
        count = jnp.array([4, 2, 1, 0])
        d = ds.state_pairs_from_confidence(a, b, conf, count, weight_by_answers=True)
        np.testing.assert_allclose(d.label, conf)
        np.testing.assert_array_equal(d.valid, [True, True, True, False])
        np.testing.assert_allclose(d.weight, [4, 2, 1, 0])

    def test_per_agent_flatten(self):
        rng = np.random.default_rng(1)
        oa, ob = rng.normal(size=(4, 3, 2)), rng.normal(size=(4, 3, 2))
        conf = rng.random((4, 3)).astype(np.float32)
        d = ds.per_agent_state_pairs(oa, ob, jnp.asarray(conf))
        np.testing.assert_array_equal(d.agent, np.tile(np.arange(3), 4))
        np.testing.assert_allclose(d.features_a[7], oa[2, 1])
        np.testing.assert_allclose(d.label[7], conf[2, 1])

    def test_insert_ring_buffer_jitted(self):
        a, b, y = _pairs(3)
        buf = ds.state_pairs(a[:0], b[:0], y[:0], capacity=4)
        new = ds.state_pairs(a, b, y)
        insert = jax.jit(ds.insert)
        buf = insert(buf, new, 0)
        buf = insert(buf, new, 3)  # wraps: rows 3, 0, 1
        np.testing.assert_array_equal(buf.valid, True)
        np.testing.assert_allclose(
            np.asarray(buf.features_a)[[3, 0, 1, 2]], np.concatenate([a, a[2:]])
        )

    def test_split_disjoint_and_complete(self):
        a, b, y = _pairs(50)
        d = ds.state_pairs(a, b, y, capacity=64)
        tr, va = jax.jit(ds.train_val_split, static_argnums=2)(jax.random.PRNGKey(0), d, 0.2)
        assert int(va.valid.sum()) == 10 and int(tr.valid.sum()) == 40
        assert not np.any(tr.valid & va.valid)
        np.testing.assert_array_equal(tr.valid | va.valid, d.valid)
        chex.assert_trees_all_equal_shapes(tr, d)

    def test_segment_and_ranking_builders(self):
        rng = np.random.default_rng(2)
        seg = ds.segment_pairs(rng.normal(size=(5, 4, 2)), rng.normal(size=(5, 4, 2)),
                               jnp.ones(5), capacity=6)  # fmt: skip
        chex.assert_shape(seg.features_a, (6, 4, 1, 2))
        chex.assert_shape(seg.mask_a, (6, 4, 1))
        label = (rng.random((3, 4, 4)) < 0.5).astype(np.float32)
        pairs = teachers.PairLabels(label=label, valid=rng.random((3, 4, 4)) < 0.5)
        rk = ds.agent_ranking_dataset(rng.normal(size=(3, 4, 2)), pairs, capacity=5)
        chex.assert_shape(rk.label, (5, 4, 4))
        assert not np.any(np.asarray(rk.pair_valid)[:, np.arange(4), np.arange(4)])
        np.testing.assert_array_equal(rk.valid[3:], False)


class RewardModelTest(chex.TestCase):
    def test_ensemble_members_differ_at_init(self):
        m = RewardModel(hidden=(16,), ensemble_size=3)
        params = m.init(jax.random.PRNGKey(0), 4)
        chex.assert_shape(params["params"]["Dense_0"]["kernel"], (3, 1, 4, 16))
        x = np.random.default_rng(1).normal(size=(10, 4)).astype(np.float32)
        out = m.apply_members(params, x)
        chex.assert_shape(out, (3, 10))
        for i in range(3):
            for j in range(i):
                assert not np.allclose(out[i], out[j])
        np.testing.assert_allclose(m.apply(params, x), out.mean(0), rtol=1e-6)

    @chex.variants(with_jit=True, without_jit=True)
    def test_groups_use_their_own_parameters(self):
        # Agents 0, 2 in group 0; agent 1 in group 1; one-hot ids appended.
        m = RewardModel(hidden=(8,), ensemble_size=2, num_agents=3, agent_groups=(0, 1, 0),
                        agent_one_hot=True)  # fmt: skip
        params = m.init(jax.random.PRNGKey(0), 2)
        obs = jnp.asarray(np.random.default_rng(1).normal(size=(5, 3, 2)), jnp.float32)
        out = self.variant(m.apply_agents)(params, obs)
        chex.assert_shape(out, (5, 3))
        for agent, group in enumerate((0, 1, 0)):
            x = jnp.concatenate(
                [obs[:, agent], jnp.broadcast_to(jax.nn.one_hot(agent, 3), (5, 3))], -1
            )
            per_member = [
                m.module.apply(jax.tree.map(lambda p, e=e, g=group: p[e, g], params), x)
                for e in range(2)
            ]
            np.testing.assert_allclose(out[:, agent], np.mean(per_member, 0), rtol=1e-5, atol=1e-6)

    @chex.variants(with_jit=True, without_jit=True)
    def test_agent_shared_blocks_match_per_agent_encoding(self):
        # DPM's layout: state and next state (the same for every agent), obs, action.
        blocks, n = (6, 6, 4, 3), 4
        plain = RewardModel(hidden=(8,), ensemble_size=2, num_agents=n, blocks=blocks)
        shared = RewardModel(
            hidden=(8,), ensemble_size=2, num_agents=n, blocks=blocks, agent_shared_blocks=2
        )
        params = plain.init(jax.random.PRNGKey(0), sum(blocks))
        rng = np.random.default_rng(2)
        state = rng.normal(size=(5, 7, 1, 12)).astype(np.float32)
        own = rng.normal(size=(5, 7, n, 7)).astype(np.float32)
        x = jnp.concatenate([jnp.broadcast_to(state, (5, 7, n, 12)), own], -1)

        out = self.variant(shared.apply_agents)(params, x)
        chex.assert_shape(out, (5, 7, n))
        np.testing.assert_allclose(out, plain.apply_agents(params, x), rtol=1e-5, atol=1e-6)

        def loss(model):
            return lambda p: (model.apply_agents(p, x) ** 2).mean()

        g_plain = jax.jit(jax.grad(loss(plain)))(params)  # the reference, compiled once
        g_shared = self.variant(jax.grad(loss(shared)))(params)
        chex.assert_trees_all_close(g_shared, g_plain, rtol=1e-4, atol=1e-6)
        # only agent 0's copy of a shared block is read: the speed-up's contract
        moved = x.at[:, :, 1:, :12].add(1.0)
        np.testing.assert_allclose(shared.apply_agents(params, moved), out, rtol=1e-6)
        assert not np.allclose(plain.apply_agents(params, moved), out)

    def test_agent_shared_blocks_validation(self):
        with pytest.raises(ValueError, match="agent_shared_blocks=3"):
            RewardModel(blocks=(2, 2), agent_shared_blocks=3)
        with pytest.raises(ValueError, match="agent_shared_blocks=1"):
            RewardModel(agent_shared_blocks=1)  # a plain MLP has no blocks
        m = RewardModel(hidden=(4,), blocks=(2, 3), agent_shared_blocks=1)
        params = m.init(jax.random.PRNGKey(0), 5)
        with pytest.raises(ValueError, match="agent axis"):
            m.apply(params, jnp.ones((5,)))
        with pytest.raises(ValueError, match="agent axis"):  # a batch of rows, not agents
            m.apply(params, jnp.ones((3, 5)))

    def test_potential_difference(self):
        m = RewardModel(hidden=(16,), ensemble_size=3)  # as above: init is compiled once
        params = m.init(jax.random.PRNGKey(0), 4)
        o, o2 = jnp.ones((4, 2, 4)), jnp.zeros((4, 2, 4))
        r = m.potential_difference(params, o, o2, gamma=0.9)
        np.testing.assert_allclose(r, 0.9 * m.apply(params, o2) - m.apply(params, o), rtol=1e-6)

    def test_validation(self):
        with pytest.raises(ValueError):
            RewardModel(num_agents=3, agent_groups=(0, 1))
        with pytest.raises(ValueError):
            RewardModel(num_agents=2, agent_groups=(0, 2))
        with pytest.raises(ValueError, match="agent ids"):
            RewardModel(agent_one_hot=True, num_agents=2).apply(None, jnp.ones((3, 1)))
        assert hash(RewardModel(hidden=[4, 4])) == hash(RewardModel(hidden=(4, 4)))

"""DataShards' collectives under ``vmap`` with the ``data`` axis name: each shard's result
is the single-array result of every shard's data put together, with and without jit."""

import chex
import jax
import jax.numpy as jnp
import numpy as np
import pytest
from absl.testing import parameterized

from jaxmarl_llm.errors import ConfigError
from jaxmarl_llm.learners.base import episode_metrics
from jaxmarl_llm.learners.running_stats import RunningMeanStd, update_running_stats
from jaxmarl_llm.learners.shards import DATA_AXIS, SINGLE, DataShards


def per_shard(count: int, size: int = 12, seed: int = 0) -> np.ndarray:
    """``[count, size]``: row ``i`` is shard ``i``'s data (not zero-mean, unit-scale)."""
    rng = np.random.default_rng(seed + count)
    return (3.0 + 2.5 * rng.normal(size=(count, size))).astype(np.float32)


def on_shards(fn):
    return jax.vmap(fn, axis_name=DATA_AXIS)


class CollectivesTest(chex.TestCase):
    @chex.variants(with_jit=True, without_jit=True)
    @parameterized.parameters(2, 3, 4)
    def test_mean_sum_match_the_concatenated_data(self, count):
        x = per_shard(count)
        shards = DataShards(count)
        mean, total, elementwise = self.variant(
            on_shards(lambda v: (shards.mean(v.mean()), shards.sum(v.sum()), shards.sum(v)))
        )(x)
        np.testing.assert_allclose(mean, np.full(count, x.mean()), rtol=1e-5)
        np.testing.assert_allclose(total, np.full(count, x.sum()), rtol=1e-5)
        np.testing.assert_allclose(elementwise, np.tile(x.sum(0), (count, 1)), rtol=1e-5)

    @chex.variants(with_jit=True, without_jit=True)
    @parameterized.parameters(2, 3, 4)
    def test_moments_std_normalize_match_the_concatenated_data(self, count):
        x = per_shard(count)
        shards = DataShards(count)
        mean, var, std, normed = self.variant(
            on_shards(lambda v: (*shards.moments(v), shards.std(v), shards.normalize(v)))
        )(x)
        flat = x.astype(np.float64).ravel()
        np.testing.assert_allclose(mean, np.full(count, flat.mean()), rtol=1e-5)
        np.testing.assert_allclose(var, np.full(count, flat.var()), rtol=1e-5)
        np.testing.assert_allclose(std, np.full(count, flat.std()), rtol=1e-5)
        expected = ((flat - flat.mean()) / (flat.std() + 1e-8)).reshape(x.shape)
        np.testing.assert_allclose(normed, expected, rtol=1e-4, atol=1e-5)
        # the global moments, not each shard's own
        own = (x - x.mean(1, keepdims=True)) / x.std(1, keepdims=True)
        assert not np.allclose(normed, own, atol=1e-3)

    @chex.variants(with_jit=True, without_jit=True)
    @parameterized.parameters(2, 4)
    def test_tree_leaves_reduce_each_on_its_own(self, count):
        x, y = per_shard(count), per_shard(count, size=3, seed=7)
        out = self.variant(on_shards(lambda a, b: DataShards(count).mean({"a": a, "b": (b,)})))(
            x, y
        )
        np.testing.assert_allclose(out["a"], np.tile(x.mean(0), (count, 1)), rtol=1e-5)
        np.testing.assert_allclose(out["b"][0], np.tile(y.mean(0), (count, 1)), rtol=1e-5)

    @chex.variants(with_jit=True, without_jit=True)
    def test_one_shard_is_the_identity(self):
        """``DataShards(1)`` reduces nothing over the vmapped axis: each row keeps its own
        statistics, the plain single-array functions."""
        x = per_shard(3)
        mean, total, (m, v), std, normed = self.variant(
            on_shards(
                lambda a: (
                    SINGLE.mean(a),
                    SINGLE.sum(a),
                    SINGLE.moments(a),
                    SINGLE.std(a),
                    SINGLE.normalize(a),
                )
            )
        )(x)
        np.testing.assert_array_equal(mean, x)
        np.testing.assert_array_equal(total, x)
        np.testing.assert_allclose(m, x.mean(1), rtol=1e-6)
        np.testing.assert_allclose(v, x.var(1), rtol=1e-5)
        np.testing.assert_allclose(std, x.std(1), rtol=1e-5)
        expected = (x - x.mean(1, keepdims=True)) / (x.std(1, keepdims=True) + 1e-8)
        np.testing.assert_allclose(normed, expected, rtol=1e-5, atol=1e-6)


class KeyTest(chex.TestCase):
    @chex.variants(with_jit=True, without_jit=True)
    @parameterized.parameters(2, 3, 4)
    def test_each_shard_draws_its_own_key(self, count):
        key = jax.random.PRNGKey(3)
        keys = self.variant(
            jax.vmap(DataShards(count).key, in_axes=None, axis_size=count, axis_name=DATA_AXIS)
        )(key)
        keys = np.asarray(keys)
        assert keys.shape == (count, 2)
        assert len({tuple(k) for k in keys}) == count
        assert not any((k == np.asarray(key)).all() for k in keys)
        for i, k in enumerate(keys):
            np.testing.assert_array_equal(k, jax.random.fold_in(key, i))

    @chex.variants(with_jit=True, without_jit=True)
    def test_one_shard_keeps_the_key(self):
        key = jax.random.PRNGKey(3)
        np.testing.assert_array_equal(self.variant(SINGLE.key)(key), key)
        # no data axis needs to be bound
        keys = self.variant(jax.vmap(SINGLE.key, in_axes=None, axis_size=2))(key)
        np.testing.assert_array_equal(keys, np.stack([key, key]))


class LocalTest(parameterized.TestCase):
    @parameterized.parameters((1, 7, 7), (2, 16, 8), (4, 16, 4))
    def test_local_share(self, count, total, local):
        assert DataShards(count).local(total, "num_envs") == local

    @parameterized.parameters((2, 15, "num_envs"), (4, 6, "batch_size"), (3, 64, "buffer_size"))
    def test_uneven_split_names_the_key(self, count, total, key):
        with pytest.raises(ConfigError, match=rf"'algo\.{key}'.*{total}.*{count} data shards"):
            DataShards(count).local(total, key)


class ShardedStatisticsTest(chex.TestCase):
    """The learner statistics built on the collectives: every shard's is the single-array
    statistic of all shards' data."""

    @chex.variants(with_jit=True, without_jit=True)
    @parameterized.parameters(2, 4)
    def test_running_stats_count_every_shard(self, count):
        x = per_shard(count, size=10)
        start = RunningMeanStd.create()
        single = update_running_stats(start, jnp.asarray(x.ravel()))
        shards = DataShards(count)
        out = self.variant(on_shards(lambda v: update_running_stats(start, v, shards)))(x)
        for name in ("mean", "var", "count"):
            np.testing.assert_allclose(
                getattr(out, name), np.full(count, getattr(single, name)), rtol=1e-5
            )

    @chex.variants(with_jit=True, without_jit=True)
    @parameterized.parameters(2, 4)
    def test_episode_metrics_average_every_shards_episodes(self, count):
        """Shards that end different numbers of episodes (one ends none): the mean over
        all ended episodes, not the mean of the shards' means."""
        T, E, N = 5, 3, 2
        rng = np.random.default_rng(count)
        done = rng.random((count, T, E)) < 0.3
        done[0] = False
        done[-1, 0] = True
        info = {
            "episode_return": rng.normal(size=(count, T, E, N)).astype(np.float32),
            "episode_length": rng.integers(1, 30, size=(count, T, E)).astype(np.float32),
            "won": rng.random((count, T, E)) < 0.5,
        }
        shards = DataShards(count)
        out = self.variant(on_shards(lambda d, i: episode_metrics(d, i, True, "mean", shards)))(
            done, info
        )
        joined = lambda a: np.concatenate(list(a), axis=1)  # shards' envs side by side
        single = episode_metrics(
            joined(done), {k: joined(v) for k, v in info.items()}, True, "mean"
        )
        for name, value in single.items():
            np.testing.assert_allclose(out[name], np.full(count, value), rtol=1e-5, err_msg=name)


class ExactDrawsTest(chex.TestCase):
    """Exact shards: each shard's draws are its rows of what one device draws for all
    shards' rows with the same key; stratified shards draw other values."""

    def draws(self, shards, key, logits):
        """``(env keys, uniforms, categorical, distrax sample, log_prob)`` of one shard's
        rows (``logits``: that shard's ``[E, N, A]``)."""
        import distrax

        r_env, r_uni, r_cat, r_pi = jax.random.split(shards.key(key), 4)
        pi = distrax.Categorical(logits=logits)
        action, log_prob = shards.sample_and_log_prob(r_pi, pi)
        return (
            shards.env_keys(r_env, logits.shape[0]),
            shards.uniform(r_uni, logits.shape[:-1]),
            shards.categorical(r_cat, logits),
            action,
            log_prob,
        )

    @chex.variants(with_jit=True, without_jit=True)
    def test_exact_shards_draw_their_rows_of_the_one_device_draw(self):
        count, E, N, A = 3, 3, 2, 5
        key = jax.random.PRNGKey(11)
        logits = jax.random.normal(jax.random.PRNGKey(1), (count * E, N, A))
        single = self.variant(lambda k, lg: self.draws(SINGLE, k, lg))(key, logits)
        parts = logits.reshape(count, E, N, A)
        for exact in (True, False):
            shards = DataShards(count, exact=exact)
            out = self.variant(
                jax.vmap(lambda lg, s=shards: self.draws(s, key, lg), axis_name=DATA_AXIS)
            )(parts)
            joined = [np.asarray(x).reshape(count * E, *x.shape[2:]) for x in out]
            same = [np.array_equal(a, np.asarray(b)) for a, b in zip(joined, single, strict=True)]
            if exact:
                assert all(same), same
            else:  # each shard's own key: nothing matches the one-device draw
                assert not any(same), same

    @chex.variants(with_jit=True, without_jit=True)
    def test_gather_and_local_part_invert_each_other(self):
        count, x = 3, per_shard(3, size=12).reshape(3, 4, 3)
        shards = DataShards(count, exact=True)
        gathered, back = self.variant(
            on_shards(lambda v: (shards.gather(v, 1), shards.local_part(shards.gather(v, 1), 1)))
        )(x)
        np.testing.assert_array_equal(gathered, np.tile(np.concatenate(list(x), 1), (3, 1, 1)))
        np.testing.assert_array_equal(back, x)

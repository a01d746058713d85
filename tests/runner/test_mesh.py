"""The run mesh: device counts and splits, one data shard computing exactly what the
unsharded learner does, and virtual data shards keeping replicated state identical."""

from pathlib import Path

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from jax.sharding import PartitionSpec as P
from omegaconf import OmegaConf

from jaxmarl_llm.config import build_config
from jaxmarl_llm.errors import ConfigError
from jaxmarl_llm.learners import make_learner
from jaxmarl_llm.learners.base import run_chunk
from jaxmarl_llm.learners.shards import DATA_AXIS
from jaxmarl_llm.runner.build import make_env, make_shaper_and_learner, seed_keys
from jaxmarl_llm.runner.mesh import (
    REPLICATED,
    RunMesh,
    ShardedLearner,
    _virtual,
    disagreed,
    make_run_mesh,
    resolve_devices,
    seed_spec,
    split_axes,
)

# ----- mesh.devices, mesh.seeds, split axes -----------------------------------------------


@pytest.mark.parametrize(("devices", "n"), [("all", 3), (" ALL ", 3), ("2", 2), (2, 2), (3, 3)])
def test_resolve_devices(devices, n):
    assert resolve_devices(devices, available=3) == n


@pytest.mark.parametrize("devices", [0, -1, "0", "x", "2.0", 2.5, None, ""])
def test_resolve_devices_refuses_what_is_not_a_count(devices):
    with pytest.raises(ConfigError, match=r"'mesh\.devices'.*'all' or a count"):
        resolve_devices(devices, available=3)


def test_resolve_devices_says_how_to_get_more_cpu_devices():
    with pytest.raises(ConfigError, match=r"'mesh\.devices': 4, but only 2 devices") as e:
        resolve_devices("4", available=2)
    assert "XLA_FLAGS=--xla_force_host_platform_device_count=4" in str(e.value)


def mesh_cfg(devices, seeds=1):
    return OmegaConf.create({"devices": devices, "seeds": seeds})


@pytest.fixture
def four_devices(monkeypatch):
    """``jax.devices()`` lists four (the one CPU device four times; the mesh checks run
    before a mesh is made of them)."""
    monkeypatch.setattr(jax, "devices", lambda *a: [jax.local_devices()[0]] * 4)


@pytest.mark.parametrize("seeds", [0, 3, -2])
def test_mesh_seeds_must_divide_the_devices(four_devices, seeds):
    with pytest.raises(ConfigError, match=rf"'mesh\.seeds': {seeds}; it must divide the 4"):
        make_run_mesh(mesh_cfg("all", seeds), num_seeds=12)


def test_mesh_seeds_must_divide_num_seeds(four_devices):
    with pytest.raises(ConfigError, match=r"'mesh\.seeds': 2 does not divide num_seeds=3"):
        make_run_mesh(mesh_cfg(4, 2), num_seeds=3)


def test_mesh_devices_beyond_the_visible_ones(four_devices):
    with pytest.raises(ConfigError, match="XLA_FLAGS"):
        make_run_mesh(mesh_cfg(8), num_seeds=2)


def test_one_device_mesh():
    mesh = make_run_mesh(mesh_cfg("all"), num_seeds=2)
    assert (mesh.seeds, mesh.data, mesh.virtual) == (1, 1, False)
    assert mesh.mesh.axis_names == ("seeds", "data")
    assert not mesh.shards.active
    described = mesh.describe()
    assert described["devices"] == 1 and described["data_axis"] == 1
    assert described["platform"] == jax.devices()[0].platform
    assert RunMesh(2, 3).describe() == {
        "devices": 6,
        "seeds_axis": 2,
        "data_axis": 3,
        "exact_shards": False,
        "virtual": True,
    }
    assert RunMesh(1, 2, exact=True).describe()["exact_shards"] is True
    assert "exact_shards" not in RunMesh(2, 1).describe()  # no data split: nothing to say


def shapes(*shapes_):
    return [jax.ShapeDtypeStruct(s, np.float32) for s in shapes_]


def test_split_axes_reads_splits_from_shapes():
    whole = {"params": shapes((2, 5, 3)), "envs": shapes((2, 8, 3), (2, 7, 8))}
    part = {"params": shapes((2, 5, 3)), "envs": shapes((2, 2, 3), (2, 7, 2))}
    assert split_axes(whole, part, 4) == {"params": [REPLICATED], "envs": [1, 2]}
    assert split_axes(whole, whole, 4) == {"params": [REPLICATED], "envs": [REPLICATED] * 2}


@pytest.mark.parametrize(
    ("whole", "part"),
    [
        ((2, 8, 3), (2, 3, 3)),  # not a quarter
        ((2, 8, 4), (2, 2, 1)),  # split along two axes
        ((2, 8), (2, 16)),  # larger on a shard
    ],
)
def test_split_axes_refuses_other_shapes(whole, part):
    with pytest.raises(ValueError, match=r"state leaf \['buffer'\]\[0\].*not a split"):
        split_axes({"buffer": shapes(whole)}, {"buffer": shapes(part)}, 4)


def test_split_axes_refuses_a_changed_rank():
    with pytest.raises(ValueError):
        split_axes(shapes((2, 8)), shapes((2, 2, 1)), 4)


def test_seed_spec():
    assert seed_spec(REPLICATED) == P("seeds")
    assert seed_spec(1) == P("seeds", "data")
    assert seed_spec(3) == P("seeds", None, None, "data")


def test_virtual_shards_mark_replicated_outputs_that_disagree():
    """With the check on, a replicated output that differs between virtual shards comes
    back filled with the marker of its dtype; one that agrees comes back as it is."""

    def body(x):
        i = jax.lax.axis_index(DATA_AXIS)
        return {
            "same": jax.lax.psum(x.sum(), DATA_AXIS),
            "float": x.sum() + i,
            "int": jnp.full((2,), i, jnp.int32),
            "key": jax.random.fold_in(jax.random.PRNGKey(0), i),
            "nan": jnp.full((2,), jnp.nan),  # a metric without data, on every shard
            "nan_on_one": jnp.where(i == 1, jnp.nan, x.sum() * 0),
            "split": x * 2,
        }

    replicated = ("same", "float", "int", "key", "nan", "nan_on_one")
    specs = {k: P() for k in replicated} | {"split": P("data")}
    x = jnp.arange(8.0)
    checked = jax.jit(_virtual(body, (P("data"),), specs, 4, check=True))(x)
    assert float(checked["same"]) == 28.0
    np.testing.assert_array_equal(checked["split"], x * 2)
    assert np.isnan(checked["float"]) and np.isnan(checked["nan_on_one"])
    assert np.isnan(checked["nan"]).all()
    np.testing.assert_array_equal(checked["int"], [-1, -1])
    np.testing.assert_array_equal(checked["key"], [2**32 - 1] * 2)
    unchecked = jax.jit(_virtual(body, (P("data"),), specs, 4, check=False))(x)
    assert float(unchecked["float"]) == 1.0  # shard 0's: its part [0, 1] sums to 1


# ----- learners on a mesh -------------------------------------------------------------------

TINY_PPO = [
    "algo.num_envs=4",
    "algo.num_steps=9",
    "algo.total_timesteps=360",
    "algo.num_minibatches=2",
    "algo.update_epochs=2",
    "algo.hidden_sizes=[16,16]",
]
TINY = {
    "ippo": TINY_PPO,
    "qmix": [
        "algo.num_envs=4",
        "algo.num_steps=9",
        "algo.total_timesteps=360",
        "algo.learning_starts=0",
        "algo.batch_size=4",
        "algo.buffer_size=64",
        "algo.hidden_dim=16",
        "algo.mixer_embed_dim=8",
        "algo.mixer_hypernet_dim=16",
        "algo.updates_per_rollout=2",
    ],
    "happo": TINY_PPO,
    "maddpg": [
        "algo.num_envs=4",
        "algo.num_steps=9",
        "algo.total_timesteps=360",
        "algo.learning_starts=0",
        "algo.batch_size=8",
        "algo.buffer_size=64",
        "algo.hidden_sizes=[16,16]",
        "algo.updates_per_rollout=2",
    ],
}
TINY["mappo"] = TINY["ippo"]
CHUNK = 3  # 27 steps: MPE's 25-step episodes end in the third update


def build(algo, data, *extra):
    """``(cfg, whole, part)``: the tiny config's learner as one shard and as one of
    ``data``, on MPE spread with 2 seeds."""
    cfg = build_config(
        {"name": f"mesh_{algo}", "env": {"name": "mpe:simple_spread_3"}, "algo": {"name": algo}},
        [*TINY[algo], *extra, "num_seeds=2"],
    )
    env = make_env(cfg)
    shaper, whole = make_shaper_and_learner(cfg, env, Path("unused"))
    part = whole if data == 1 else make_learner(cfg.algo, env, shaper, RunMesh(1, data).shards)
    return cfg, whole, part


def assert_trees_equal(a, b):
    for (path, x), y in zip(
        jax.tree_util.tree_leaves_with_path(a), jax.tree.leaves(b), strict=True
    ):
        name = jax.tree_util.keystr(path)
        np.testing.assert_array_equal(np.asarray(x), np.asarray(y), err_msg=name)


# Each case compiles its learner twice (10-50 s on a 2-core CPU): the timed suite checks
# IPPO on a one-device mesh (every run's path), ``-m slow`` the rest.
SLOW = pytest.mark.slow


@pytest.mark.parametrize("algo", ["ippo", pytest.param("qmix", marks=SLOW)])
def test_one_shard_is_the_unsharded_learner(algo):
    """On a one-device mesh the sharded functions (placed keys and state, donated chunks)
    compute, bit for bit, the plain seed-vmapped jitted learner."""
    cfg, whole, _ = build(algo, 1)
    keys = seed_keys(cfg)
    sharded = ShardedLearner(whole, whole, make_run_mesh(mesh_cfg(1), int(cfg.num_seeds)))
    assert set(jax.tree.leaves(sharded.axes)) == {REPLICATED}

    state = jax.jit(jax.vmap(whole.init))(keys)
    state, metrics = jax.jit(jax.vmap(lambda s: run_chunk(whole, s, CHUNK)))(state)
    mesh_state = sharded.init()(sharded.place_keys(keys))
    mesh_state, mesh_metrics = sharded.chunk(CHUNK)(mesh_state)

    assert_trees_equal(state, mesh_state)
    assert set(metrics) == set(mesh_metrics)
    assert_trees_equal(metrics, mesh_metrics)
    assert np.isfinite(metrics["episode_return"][:, -1]).all()


def assert_trees_close(a, b, rtol=2e-3):
    """Every float leaf within ``rtol`` of the leaf's largest value (float summation order
    differs); every other leaf equal."""
    for (path, x), y in zip(
        jax.tree_util.tree_leaves_with_path(a), jax.tree.leaves(b), strict=True
    ):
        x, y, name = np.asarray(x), np.asarray(y), jax.tree_util.keystr(path)
        if x.dtype.kind == "f":
            scale = np.nanmax(np.abs(x), initial=0.0) + 1e-6
            np.testing.assert_allclose(x, y, rtol=0, atol=rtol * scale, err_msg=name)
        else:
            np.testing.assert_array_equal(x, y, err_msg=name)


EXACT_CASES = {
    "ippo": ("ippo",),
    "mappo_recurrent": ("mappo", "algo.recurrent=true", "algo.gru_hidden_dim=16"),
    "qmix": ("qmix",),
}


# the exact draws themselves are checked in the suite (tests/learners/test_shards.py)
@pytest.mark.parametrize("case", [pytest.param(c, marks=SLOW) for c in EXACT_CASES])
def test_exact_shards_compute_the_one_device_learner(case):
    """``mesh.exact``: two virtual data shards end a chunk of updates in the state, and
    with the metrics, of the one-device learner, to float summation order: the same env
    keys, actions, minibatches (replay samples) and gradients."""
    algo, *extra = EXACT_CASES[case]
    cfg, whole, _ = build(algo, 1, *extra)
    env = make_env(cfg)
    shaper, whole = make_shaper_and_learner(cfg, env, Path("unused"))
    part = make_learner(cfg.algo, env, shaper, RunMesh(1, 2, exact=True).shards)
    keys = seed_keys(cfg)
    state = jax.jit(jax.vmap(whole.init))(keys)
    state, metrics = jax.jit(jax.vmap(lambda s: run_chunk(whole, s, CHUNK)))(state)

    sharded = ShardedLearner(whole, part, RunMesh(1, 2, exact=True), check_replicas=True)
    mesh_state = sharded.init()(sharded.place_keys(keys))
    mesh_state, mesh_metrics = sharded.chunk(CHUNK)(mesh_state)
    assert replica_problems(mesh_state, sharded.axes) == []
    assert_trees_close(state, mesh_state)
    assert set(metrics) == set(mesh_metrics)
    for name in metrics:
        np.testing.assert_allclose(
            metrics[name], mesh_metrics[name], rtol=2e-3, atol=1e-5, err_msg=name
        )
    # trained: the parameters moved from their initial values
    init_params = jax.tree.leaves(jax.jit(jax.vmap(whole.init))(keys).params)
    params = jax.tree.leaves(state.params)
    assert any(not np.allclose(a, b) for a, b in zip(params, init_params, strict=True))


def test_exact_shards_are_refused_where_a_learner_has_none():
    cfg, _, _ = build("maddpg", 1)
    env = make_env(cfg)
    shaper, _ = make_shaper_and_learner(cfg, env, Path("unused"))
    with pytest.raises(ConfigError, match=r"'mesh\.exact'.*'maddpg'.*ippo, mappo, qmix"):
        make_learner(cfg.algo, env, shaper, RunMesh(1, 2, exact=True).shards)


def replica_problems(state, axes) -> list[str]:
    """The replicated leaves that came back marked: their shards disagreed (boolean
    leaves, such as a buffer's ``is_full``, have no value free for a marker)."""
    bad = []
    for (path, x), axis in zip(
        jax.tree_util.tree_leaves_with_path(state), jax.tree.leaves(axes), strict=True
    ):
        x = np.asarray(x)
        if axis != REPLICATED or x.size == 0 or x.dtype == bool:  # no free marker
            continue
        marker = np.asarray(disagreed(x.dtype))
        if np.array_equal(x, np.full_like(x, marker), equal_nan=True):
            bad.append(jax.tree_util.keystr(path))
    return bad


CASES = {
    "ippo": ("ippo",),
    "mappo": ("mappo",),
    "mappo_recurrent": ("mappo", "algo.recurrent=true", "algo.gru_hidden_dim=16"),
    "qmix": ("qmix",),
    "happo": ("happo",),
    "maddpg": ("maddpg",),
}


# every case compiles two learners (15-20 s each on 2 cores): the default suite's learners
# on devices are checked by test_mesh_devices' quick test
@pytest.mark.parametrize("case", [pytest.param(c, marks=SLOW) for c in CASES])
def test_virtual_shards_keep_replicated_state_identical(case):
    """Two virtual data shards, every replicated leaf checked across them: parameters,
    optimiser states, target networks, counters and metrics agree on both shards after
    a few updates (a leaf whose shards disagree would come back NaN or -1)."""
    algo, *extra = CASES[case]
    cfg, whole, part = build(algo, 2, *extra)
    sharded = ShardedLearner(whole, part, RunMesh(1, 2), check_replicas=True)
    axes = jax.tree.leaves(sharded.axes)
    assert REPLICATED in axes and any(a != REPLICATED for a in axes)  # env states split
    state = sharded.init()(sharded.place_keys(seed_keys(cfg)))
    assert replica_problems(state, sharded.axes) == []
    state, metrics = sharded.chunk(CHUNK)(state)
    assert replica_problems(state, sharded.axes) == []
    # params really trained (identical only because every shard took the same step)
    params = jax.tree.leaves(state.params)
    init_params = jax.tree.leaves(sharded.init()(seed_keys(cfg)).params)
    assert any(not np.array_equal(a, b) for a, b in zip(params, init_params, strict=True))
    for name, value in metrics.items():
        value = np.asarray(value)
        assert value.shape == (2, CHUNK), name
        # the third update ends the first episodes; learning runs from the first update
        assert np.isfinite(value[:, -1]).all(), name
        if not name.startswith(("episode", "win", "stat_")) and name != "episodes":
            assert np.isfinite(value).all(), name


@pytest.mark.parametrize("saved_exact, now_exact", [(False, True), (True, False)])
def test_a_replay_run_resumes_only_with_the_buffer_layout_it_was_saved_with(
    tmp_path, saved_exact, now_exact
):
    """Exact shards keep the whole buffer on every device, stratified ones a part each:
    a resumed replay learner must keep the saved ``mesh.exact``; a PPO learner may switch."""
    import json
    from types import SimpleNamespace

    from jaxmarl_llm.runner.loop import MESH_FILE, _check_mesh

    (tmp_path / MESH_FILE).write_text(json.dumps(RunMesh(1, 2, exact=saved_exact).describe()))

    def run(replay):
        return SimpleNamespace(
            run_dir=tmp_path,
            cfg=SimpleNamespace(resume=str(tmp_path), algo=SimpleNamespace(name="qmix")),
            learner=SimpleNamespace(shard_local_state=replay),
            sharded=SimpleNamespace(run_mesh=RunMesh(1, 2, exact=now_exact)),
        )

    with pytest.raises(ConfigError, match=r"mesh\.exact=" + str(saved_exact).lower()):
        _check_mesh(run(replay=True))
    _check_mesh(run(replay=False))  # PPO's state has no per-device buffer
    assert json.loads((tmp_path / MESH_FILE).read_text())["exact_shards"] is now_exact

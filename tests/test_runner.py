"""The chunked runner: run folder contents, vmapped seeds, exact resume after a kill."""

import csv
import json

import jax
import numpy as np
import pytest

from jaxmarl_llm.config import ConfigError, build_config
from jaxmarl_llm.runner import run_experiment

TINY = {
    "ippo": [
        "algo.num_envs=8",
        "algo.num_steps=8",
        "algo.total_timesteps=384",
        "algo.num_minibatches=2",
        "algo.hidden_sizes=[16,16]",
    ],
    "qmix": [
        "algo.num_envs=4",
        "algo.num_steps=8",
        "algo.total_timesteps=192",
        "algo.learning_starts=32",
        "algo.batch_size=4",
        "algo.buffer_size=64",
        "algo.hidden_dim=16",
        "algo.updates_per_rollout=1",
    ],
}


def tiny_cfg(tmp_path, algo="ippo", *extra):
    return build_config(
        {"name": f"tiny_{algo}", "env": {"name": "mpe:simple_spread_3"}, "algo": {"name": algo}},
        [
            *TINY[algo],
            "num_seeds=2",
            "log_every=2",
            "progress=false",
            f"out_dir={tmp_path / 'run'}",
            *extra,
        ],
    )


class Killed(Exception):
    pass


EVAL = ["eval.every=2", "eval.episodes=4", "eval.max_steps=30"]


def test_run_folder_contents(tmp_path):
    result = run_experiment(tiny_cfg(tmp_path, "ippo", *EVAL))
    d = result.run_dir
    for f in ("config.yaml", "metrics.csv", "summary.json", "curve.png", "eval.csv"):
        assert (d / f).exists(), f
    # 3 chunks of 2 updates, an evaluation every 2 chunks and one at the end
    evals = list(csv.DictReader((d / "eval.csv").open()))
    assert [int(r["update"]) for r in evals] == [4, 6]
    assert {"eval_return/seed0", "eval_return/seed1", "eval_length"} <= set(evals[0])
    assert [float(r["eval_episodes"]) for r in evals] == [4.0, 4.0]  # MPE: 25 steps
    rows = list(csv.DictReader((d / "metrics.csv").open()))
    assert [int(r["update"]) for r in rows] == [1, 2, 3, 4, 5, 6]
    assert int(rows[-1]["env_steps"]) == 6 * 64
    assert {"episode_return/seed0", "episode_return/seed1", "policy_loss", "steps_per_s"} <= set(
        rows[0]
    )
    summary = json.loads((d / "summary.json").read_text())
    assert summary["num_seeds"] == 2 and summary["env_steps"] == 384
    assert len(summary["final_return_per_seed"]) == 2
    assert np.isfinite(summary["final_return_mean"]) and summary["compile_s"] > 0
    # seeds are independent: different returns
    assert summary["final_return_per_seed"][0] != summary["final_return_per_seed"][1]
    assert summary["final_eval_env_steps"] == 384
    assert summary["final_eval_return_per_seed"] == [
        float(evals[-1][f"eval_return/seed{i}"]) for i in range(2)
    ]
    assert any((d / "checkpoints").iterdir())


def _leaves(state):
    return [np.asarray(x) for x in jax.tree.leaves(state)]


@pytest.mark.parametrize("algo", ["ippo", "qmix"])
def test_resume_matches_uninterrupted_run(tmp_path, algo):
    eval_every_chunk = ["eval.every=1", "eval.episodes=4", "eval.max_steps=30"]
    full = run_experiment(tiny_cfg(tmp_path / "full", algo, *eval_every_chunk))

    def kill_after_first_chunk(updates_done, state, rows):
        if updates_done == 2:
            raise Killed

    with pytest.raises(Killed):
        run_experiment(
            tiny_cfg(tmp_path / "killed", algo, *eval_every_chunk),
            on_chunk=kill_after_first_chunk,
        )
    killed_dir = tmp_path / "killed" / "run"
    assert len(list(csv.DictReader((killed_dir / "metrics.csv").open()))) == 2

    resumed = run_experiment(
        tiny_cfg(tmp_path / "other", algo, *eval_every_chunk, f"resume={killed_dir}")
    )
    assert resumed.run_dir == killed_dir
    for a, b in zip(_leaves(full.state), _leaves(resumed.state), strict=True):
        np.testing.assert_array_equal(a, b)
    rows_full = list(csv.DictReader((full.run_dir / "metrics.csv").open()))
    rows_res = list(csv.DictReader((killed_dir / "metrics.csv").open()))
    assert [r["episode_return"] for r in rows_full] == [r["episode_return"] for r in rows_res]
    evals_full = list(csv.DictReader((full.run_dir / "eval.csv").open()))
    evals_res = list(csv.DictReader((killed_dir / "eval.csv").open()))
    assert [r["update"] for r in evals_res] == ["2", "4", "6"]
    assert evals_full == evals_res


def test_resume_refuses_changed_config(tmp_path):
    first = run_experiment(tiny_cfg(tmp_path))
    with pytest.raises(ConfigError, match="algo.lr"):
        run_experiment(tiny_cfg(tmp_path, "ippo", "algo.lr=0.1", f"resume={first.run_dir}"))


def test_existing_run_folder_is_not_overwritten(tmp_path):
    run_experiment(tiny_cfg(tmp_path))
    with pytest.raises(ConfigError, match="resume="):
        run_experiment(tiny_cfg(tmp_path))


def test_a_checkpoint_of_another_code_version_is_refused_with_the_differing_arrays(tmp_path):
    """Resuming a checkpoint whose train state has other arrays (e.g. a replay buffer that
    stored next observations) names them instead of failing inside orbax."""
    import jax.numpy as jnp
    import orbax.checkpoint as ocp
    from flax import struct

    from jaxmarl_llm.runner import _checkpoints, restore_checkpoint

    @struct.dataclass
    class Buffer:
        obs: jax.Array
        next_obs: jax.Array | None = None

    @struct.dataclass
    class State:
        buffer: Buffer
        step: jax.Array

    saved = State(Buffer(jnp.arange(6.0).reshape(2, 3), jnp.ones((2, 3))), jnp.array(7))
    with _checkpoints(tmp_path / "ckpt", create=True) as mgr:
        mgr.save(4, args=ocp.args.StandardSave(saved))
    abstract = lambda tree: jax.tree.map(ocp.utils.to_shape_dtype_struct, tree)
    without_next = State(Buffer(jnp.zeros((2, 3))), jnp.array(0))
    wider = State(Buffer(jnp.zeros((2, 4)), jnp.zeros((2, 3))), jnp.array(0))
    with _checkpoints(tmp_path / "ckpt") as mgr:
        with pytest.raises(
            ConfigError, match=r"update 4 .*buffer\.next_obs is only in the checkpoint"
        ):
            restore_checkpoint(mgr, 4, abstract(without_next), tmp_path)
        with pytest.raises(
            ConfigError, match=r"buffer\.obs is \(2, 3\) float32 in the checkpoint, \(2, 4\)"
        ):
            restore_checkpoint(mgr, 4, abstract(wider), tmp_path)
        restored = restore_checkpoint(mgr, 4, abstract(saved), tmp_path)  # left intact
    for a, b in zip(jax.tree.leaves(saved), jax.tree.leaves(restored), strict=True):
        np.testing.assert_array_equal(a, b)

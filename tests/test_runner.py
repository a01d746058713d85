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


def test_run_folder_contents(tmp_path):
    result = run_experiment(tiny_cfg(tmp_path))
    d = result.run_dir
    for f in ("config.yaml", "metrics.csv", "summary.json", "curve.png"):
        assert (d / f).exists(), f
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
    assert any((d / "checkpoints").iterdir())


def _leaves(state):
    return [np.asarray(x) for x in jax.tree.leaves(state)]


@pytest.mark.parametrize("algo", ["ippo", "qmix"])
def test_resume_matches_uninterrupted_run(tmp_path, algo):
    full = run_experiment(tiny_cfg(tmp_path / "full", algo))

    def kill_after_first_chunk(updates_done, state, rows):
        if updates_done == 2:
            raise Killed

    with pytest.raises(Killed):
        run_experiment(tiny_cfg(tmp_path / "killed", algo), on_chunk=kill_after_first_chunk)
    killed_dir = tmp_path / "killed" / "run"
    assert len(list(csv.DictReader((killed_dir / "metrics.csv").open()))) == 2

    resumed = run_experiment(tiny_cfg(tmp_path / "other", algo, f"resume={killed_dir}"))
    assert resumed.run_dir == killed_dir
    for a, b in zip(_leaves(full.state), _leaves(resumed.state), strict=True):
        np.testing.assert_array_equal(a, b)
    rows_full = list(csv.DictReader((full.run_dir / "metrics.csv").open()))
    rows_res = list(csv.DictReader((killed_dir / "metrics.csv").open()))
    assert [r["episode_return"] for r in rows_full] == [r["episode_return"] for r in rows_res]


def test_resume_refuses_changed_config(tmp_path):
    first = run_experiment(tiny_cfg(tmp_path))
    with pytest.raises(ConfigError, match="algo.lr"):
        run_experiment(tiny_cfg(tmp_path, "ippo", "algo.lr=0.1", f"resume={first.run_dir}"))


def test_existing_run_folder_is_not_overwritten(tmp_path):
    run_experiment(tiny_cfg(tmp_path))
    with pytest.raises(ConfigError, match="resume="):
        run_experiment(tiny_cfg(tmp_path))

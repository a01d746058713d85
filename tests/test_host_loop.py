"""The runner's host loop (``runner.host_loop``) driving a ``HostTrainer``: run folder,
checkpoints, bit-exact resume and extension, comparisons (a toy random-walk trainer,
``host_counter_trainer``; Verco's own runs are in tests/methods/test_verco_train.py)."""

from __future__ import annotations

import csv
import json
import shutil

import host_counter_trainer
import numpy as np
import pytest
import yaml

from jaxmarl_llm.config import build_config
from jaxmarl_llm.errors import ConfigError
from jaxmarl_llm.learners import registry
from jaxmarl_llm.runner import load_run_config, run_experiment

TIMING = {"wall_s", "steps_per_s"}


@pytest.fixture(autouse=True)
def counter():
    registry.register_algorithm(host_counter_trainer.SPEC)
    yield
    registry.unregister_algorithm("host_counter")


def counter_config(out, **top):
    raw = {"name": "counter", "algo": {"name": "host_counter"}, "num_seeds": 2,
           "progress": False, "plot": False, "checkpoint_every": 2, **top}  # fmt: skip
    cfg = build_config(raw)
    if out is not None:
        cfg.out_dir = str(out)
    return cfg


def rows_of(run_dir):
    with open(run_dir / "metrics.csv") as f:
        return [{k: v for k, v in r.items() if k not in TIMING} for r in csv.DictReader(f)]


def assert_same_states(a, b):
    for x, y in zip(a, b, strict=True):
        for k in x:
            np.testing.assert_array_equal(np.asarray(x[k]), np.asarray(y[k]))


def test_a_host_run_writes_the_run_folder(tmp_path):
    result = run_experiment(counter_config(tmp_path))
    rows = rows_of(tmp_path)
    assert [int(r["env_steps"]) for r in rows] == [10, 20, 30, 40]
    assert {"episode_return/seed0", "episode_return/seed1", "win_rate"} <= set(rows[0])
    summary = json.loads((tmp_path / "summary.json").read_text())
    assert summary["algo"] == "host_counter" and summary["iterations"] == 4
    assert summary["iterations_in_this_process"] == 4 and summary["env_steps"] == 40
    assert summary["final_return_mean"] == pytest.approx(
        np.mean([float(rows[-1][f"episode_return/seed{s}"]) for s in range(2)]), abs=1e-4
    )
    assert sorted(int(p.name) for p in (tmp_path / "checkpoints").iterdir()) == [2, 4]
    assert int(result.state[1]["moves"]) == 4


def test_resume_continues_bit_for_bit(tmp_path):
    whole = run_experiment(counter_config(tmp_path / "whole"))

    class Stop(Exception):
        pass

    def stop_at_three(done, states, rows):
        if done == 3:
            raise Stop

    with pytest.raises(Stop):
        run_experiment(counter_config(tmp_path / "cut"), stop_at_three)
    # the unsaved iteration 3 was checkpointed on the way out
    assert sorted(int(p.name) for p in (tmp_path / "cut" / "checkpoints").iterdir()) == [2, 3]
    resumed = run_experiment(counter_config(None, resume=str(tmp_path / "cut")))
    assert rows_of(tmp_path / "cut") == rows_of(tmp_path / "whole")
    assert_same_states(resumed.state, whole.state)
    assert resumed.summary["iterations_in_this_process"] == 1


def test_extending_a_finished_run_matches_a_fresh_run_of_the_longer_budget(tmp_path):
    run_experiment(counter_config(tmp_path / "short"))
    longer = {"algo": {"name": "host_counter", "total_timesteps": 60}}
    fresh = run_experiment(counter_config(tmp_path / "fresh", **longer))
    shutil.copytree(tmp_path / "short", tmp_path / "extended")
    extended = run_experiment(counter_config(None, resume=str(tmp_path / "extended"), **longer))
    assert rows_of(tmp_path / "extended") == rows_of(tmp_path / "fresh")
    assert_same_states(extended.state, fresh.state)
    assert load_run_config(tmp_path / "extended").algo.total_timesteps == 60


def test_comparisons_run_with_the_runs_seeds_and_budget(tmp_path):
    other = tmp_path / "other.yaml"
    other.write_text(yaml.safe_dump({"name": "other", "seed": 5, "algo": {"name": "host_counter"}}))
    result = run_experiment(counter_config(tmp_path / "run", compare_with=[str(other)]))
    compared = tmp_path / "run" / "compare" / "other"
    assert result.summary["compare"][str(other)]["env_steps"] == 40
    assert load_run_config(compared).seed == load_run_config(tmp_path / "run").seed
    assert len(rows_of(compared)) == 4


def test_evaluation_between_iterations_is_refused(tmp_path):
    cfg = counter_config(tmp_path)
    cfg.eval.every = 1
    with pytest.raises(ConfigError, match="eval.every"):
        run_experiment(cfg)
    assert not (tmp_path / "config.yaml").exists()

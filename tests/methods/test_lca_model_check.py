"""experiments/lca_model_check.py: learned rankings on scripted-play moves, bad runs refused."""

import json
import sys
from pathlib import Path

import pytest
from omegaconf import OmegaConf

from jaxmarl_llm.config import build_config

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))
from experiments.lca_model_check import main  # noqa: E402

SMALL = {"num_pairs": 400, "fit_steps": 300, "batch_size": 64, "hidden": [32], "rollout_envs": 8}


def _run_dir(tmp_path, shaping):
    cfg = build_config(
        {
            "name": "check",
            "env": {"name": "two_switch"},
            "algo": {"name": "ippo"},
            "shaping": shaping,
        },
        [f"out_dir={tmp_path / 'run'}"],
    )
    run = tmp_path / "run"
    run.mkdir()
    OmegaConf.save(cfg, run / "config.yaml")
    return run


@pytest.mark.slow  # an experiment-script run: fits a potential model and plays 8 episodes
def test_reports_accuracy_per_agent_and_stage(tmp_path):
    run = _run_dir(tmp_path, {"name": "lca", "kwargs": SMALL})
    assert main(["--run", str(run), "--episodes", "8", "--out", str(tmp_path / "out")]) == 0
    record = json.loads((tmp_path / "out" / "model_check_two_switch.json").read_text())
    rows = record["rows"]
    assert {r["agent"] for r in rows} == {0, 1}
    assert all(r["moves"] >= 20 and 0.0 <= r["accuracy"] <= 1.0 for r in rows)
    # even a small model ranks the first stage (walking to a switch) better than chance
    first = [r["accuracy"] for r in rows if r["objects_done"] == 0]
    assert first and min(first) > 0.6
    assert (run / "lca" / "report.json").exists()  # fitted once, reused by later checks


def test_refuses_a_run_without_lca(tmp_path, capsys):
    run = _run_dir(tmp_path, {"name": "individual"})
    assert main(["--run", str(run), "--out", str(tmp_path / "out")]) == 2
    assert "not an LCA run" in capsys.readouterr().err
    assert main(["--run", str(tmp_path / "missing")]) == 2

"""The preference benchmark scripts run (tiny settings) and print their JSON fields."""

import json

import pytest
from scripts import load_script

# benchmark-script runs
pytestmark = pytest.mark.slow


def _load(name):
    return load_script(f"benchmarks/{name}.py")


def test_preference_training_json(capfd):
    argv = ["--pairs", "300", "--dim", "4", "--hidden", "8", "--ensemble", "2", "--steps", "20",
            "--batch", "32", "--repeats", "1", "--json"]  # fmt: skip
    out = _load("preference_training").main(argv)
    printed = json.loads(capfd.readouterr().out.strip().splitlines()[-1])
    assert printed == out
    for key in ("compile_s", "train_s", "steps_per_s", "final_loss", "heldout_ranking_accuracy"):
        assert key in printed, key
    assert printed["train_s"] > 0


def test_preference_synthetic_json(capfd):
    argv = ["--pairs", "200", "--test-states", "50", "--seeds", "2", "--hidden", "8",
            "--steps", "20", "--batch", "32", "--accuracies", "0.8", "--queries", "2",
            "--json"]  # fmt: skip
    out = _load("preference_synthetic").main(argv)
    printed = json.loads(capfd.readouterr().out.strip().splitlines()[-1])
    assert printed["results"] == out["results"]
    assert [(r["teacher_accuracy"], r["queries"]) for r in printed["results"]] == [(0.8, 2)]
    for r in printed["results"]:
        assert 0.0 <= r["ranking_accuracy_mean"] <= 1.0 and len(r["per_seed"]) == 2


def test_dpm_refit_json(capfd):
    argv = ["--map", "3m", "--fit-steps", "4", "--rounds", "1", "--repeats", "1", "--json"]
    out = _load("dpm_refit").main(argv)
    printed = json.loads(capfd.readouterr().out.strip().splitlines()[-1])
    assert printed == out
    assert out["agents"] == 3 and out["labels_per_seed"] == {"trajectory": 75, "agent": 75}
    once, per_agent = out["state_once_per_step"], out["state_per_agent"]
    assert once["refit_s"] > 0 and per_agent["refit_s"] > 0 and out["speedup"] > 0
    # same parameters, data and keys: the shared state encoding changes only the speed
    assert abs(once["final_loss"] - per_agent["final_loss"]) < 1e-4 * max(
        1.0, per_agent["final_loss"]
    )

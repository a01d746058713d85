"""LCA through ``run.py``'s runner: config validation, artifacts, comparison runs, resume."""

import json

import pytest
import yaml
from toy_envs import RaceLine

import envs
from jaxmarl_llm.config import ConfigError, build_config
from jaxmarl_llm.runner import run_experiment

ENV = "test:race_line"


@pytest.fixture(autouse=True)
def race_line_registered(monkeypatch):
    # registered per test, not at import: the registry is global and other test modules
    # parametrize over envs.names() when they are collected
    spec = envs.EnvSpec(ENV, RaceLine, "toy credit-assignment race", won_fn=lambda e, s: e.won(s))
    monkeypatch.setitem(envs.registry._REGISTRY, ENV, spec)


ALGO = {
    "name": "ippo",
    "num_envs": 8,
    "num_steps": 8,
    "total_timesteps": 256,
    "num_minibatches": 2,
    "hidden_sizes": [16],
}
LCA = {"num_pairs": 200, "fit_steps": 100, "batch_size": 64, "hidden": [16], "rollout_envs": 8}


def _cfg(tmp_path, shaping, *over):
    raw = {"name": "race_lca", "env": {"name": ENV}, "algo": ALGO, "shaping": shaping}
    return build_config(
        raw, [f"out_dir={tmp_path / 'run'}", "num_seeds=2", "log_every=2", "progress=false", *over]
    )


def test_lca_kwargs_are_checked_when_the_config_loads(tmp_path):
    with pytest.raises(ConfigError, match="shaping.kwargs.num_pair"):
        _cfg(tmp_path, {"name": "lca", "kwargs": {"num_pair": 10}})
    with pytest.raises(ConfigError, match="labeler='oracle'; valid choices: heuristic, backend"):
        _cfg(tmp_path, {"name": "lca", "kwargs": {"labeler": "oracle"}})
    with pytest.raises(ConfigError, match="compare_with"):
        _cfg(tmp_path, {"name": "lca", "kwargs": LCA}, "compare_with=[no_such_config]")
    cfg = _cfg(tmp_path, {"name": "lca", "kwargs": LCA})
    assert cfg.shaping.kwargs.accuracy == 1.0  # defaults filled in, recorded in config.yaml


def test_lca_run_writes_artifacts_and_compares_with_a_baseline(tmp_path):
    baseline = tmp_path / "race_team.yaml"
    baseline.write_text(yaml.safe_dump({"name": "race_team", "env": {"name": ENV}, "algo": ALGO}))
    cfg = _cfg(tmp_path, {"name": "lca", "kwargs": LCA}, f"compare_with=[{baseline}]")
    result = run_experiment(cfg)
    run = result.run_dir
    report = json.loads((run / "lca" / "report.json").read_text())
    assert report["pairs"] == 200 and report["label_accuracy_vs_heuristic"] == 1.0
    assert (run / "lca" / "reward_model.msgpack").exists()
    assert (run / "comparison.png").exists()
    assert (run / "compare" / "race_team" / "summary.json").exists()
    assert result.summary["compare"][str(baseline)]["name"] == "race_team"
    # a rerun of the comparison reuses the finished baseline instead of training it again
    mtime = (run / "compare" / "race_team" / "summary.json").stat().st_mtime
    from jaxmarl_llm.runner import run_comparisons

    run_comparisons(cfg, run)
    assert (run / "compare" / "race_team" / "summary.json").stat().st_mtime == mtime


def test_individual_shaper_needs_an_env_that_has_individual_rewards(tmp_path):
    cfg = build_config(
        {
            "name": "pb",
            "env": {"name": "pistonball"},
            "algo": ALGO,
            "shaping": {"name": "individual"},
        },
        [f"out_dir={tmp_path}", "progress=false"],
    )
    with pytest.raises(ValueError, match="Pistonball has no simple hand-crafted individual"):
        run_experiment(cfg)

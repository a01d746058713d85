"""The algorithm registry: one entry per algorithm, read by config, runner and feedback."""

import json
from types import SimpleNamespace

import pytest
import uniform_learner

from jaxmarl_llm.config import build_config
from jaxmarl_llm.errors import ConfigError
from jaxmarl_llm.learners import registry
from jaxmarl_llm.learners.base import TrainState
from jaxmarl_llm.runner import extend_budget, run_experiment
from jaxmarl_llm.shaping.feedback import check_feedback


@pytest.fixture
def uniform():
    registry.register_algorithm(uniform_learner.SPEC)
    yield uniform_learner.SPEC
    registry.unregister_algorithm("uniform")


def test_every_entry_names_a_module_with_schema_check_and_factory():
    for name, spec in registry.ALGORITHMS.items():
        module = spec.load()
        schema = spec.config_class()
        assert schema(name=name).name == name
        assert callable(module.check_config) and callable(module.make_learner), name


def test_an_unknown_algorithm_is_a_config_error_listing_the_registered_ones():
    with pytest.raises(ConfigError, match="'algo.name': 'ppo'; valid choices: ippo, mappo"):
        build_config({"algo": {"name": "ppo"}})


def test_a_registered_learner_runs_end_to_end_through_config_and_runner(tmp_path, uniform):
    cfg = build_config(
        {"name": "u", "env": {"name": "mpe:simple_spread_3"}, "algo": {"name": "uniform"}},
        ["algo.total_timesteps=256", "num_seeds=2", "log_every=2", "progress=false",
         "plot=false", f"out_dir={tmp_path / 'run'}"],
    )  # fmt: skip
    result = run_experiment(cfg)
    summary = json.loads((result.run_dir / "summary.json").read_text())
    assert summary["algo"] == "uniform" and summary["env_steps"] == 256
    assert isinstance(result.state, TrainState)
    assert len(summary["final_return_per_seed"]) == 2
    assert all(r < 0 for r in summary["final_return_per_seed"])  # MPE spread: a cost
    with pytest.raises(ConfigError, match="'algo.total_timesteps': must be > 0"):
        build_config({"algo": {"name": "uniform"}}, ["algo.total_timesteps=0"])


def test_feedback_is_refused_for_a_learner_without_collect(uniform):
    rounds = SimpleNamespace(every=4, rounds=2, collect_steps=8)
    with pytest.raises(ConfigError, match="algo 'uniform' has no collect \\(use one of ippo,"):
        check_feedback(rounds, 2, "uniform")
    check_feedback(rounds, 2, "qmix")  # every built-in learner collects


def test_budget_annealed_learning_rates_come_from_the_registry():
    cfg = build_config({"algo": {"name": "ippo"}}, ["algo.anneal_lr=true"])
    with pytest.raises(ConfigError, match="algo.anneal_lr anneals the learning rate"):
        extend_budget(cfg, 2 * int(cfg.algo.total_timesteps))
    cfg = build_config({"algo": {"name": "ippo"}}, ["algo.anneal_lr=false"])
    assert extend_budget(cfg, 2_000_000).algo.total_timesteps == 2_000_000


def test_run_list_names_every_registered_algorithm_with_its_summary(capsys, uniform):
    from scripts import load_script

    assert load_script("experiments/run.py").main(["--list"]) == 0
    out = capsys.readouterr().out
    for name, spec in registry.ALGORITHMS.items():
        assert f"{name:<8} {spec.summary}" in out
    assert "uniform  uniformly random legal actions" in out

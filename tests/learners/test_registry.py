"""The algorithm registry: one entry per algorithm, read by config, runner and feedback."""

import dataclasses
import importlib.metadata
import json
from types import SimpleNamespace

import pytest
import uniform_learner

import envs
from jaxmarl_llm.config import build_config
from jaxmarl_llm.errors import ConfigError
from jaxmarl_llm.learners import registry
from jaxmarl_llm.learners.base import TrainState
from jaxmarl_llm.learners.mixers import VDNMixer
from jaxmarl_llm.learners.ppo import PPO
from jaxmarl_llm.learners.qlearning import QLearning
from jaxmarl_llm.runner import extend_budget, run_experiment
from jaxmarl_llm.runner.feedback import check_feedback
from jaxmarl_llm.shaping import identity_shaper


@pytest.fixture
def uniform():
    registry.register_algorithm(uniform_learner.SPEC)
    yield uniform_learner.SPEC
    registry.unregister_algorithm("uniform")


@pytest.fixture
def fresh_registry(monkeypatch):
    """The registry as a process starts it: the built-in algorithms, entry points unread."""
    builtin = {spec.name: spec for spec in registry.BUILTIN_ALGORITHMS}
    monkeypatch.setattr(registry, "_registered", builtin)
    monkeypatch.setattr(registry, "_plugins_loaded", False)


def entry_points_of_the_group(monkeypatch, *values: str) -> None:
    """``importlib.metadata.entry_points`` as if installed packages declared ``values``
    (``module:attribute``) in the algorithms' group; other groups are read as they are."""
    group = registry.PLUGIN_GROUP
    declared = importlib.metadata.EntryPoints(
        importlib.metadata.EntryPoint(name=f"plugin{i}", value=value, group=group)
        for i, value in enumerate(values)
    )
    real = importlib.metadata.entry_points

    def entry_points(**params):
        return declared if params.get("group") == group else real(**params)

    monkeypatch.setattr(importlib.metadata, "entry_points", entry_points)


def test_the_builtin_algorithms_need_no_entry_points(monkeypatch, fresh_registry):
    entry_points_of_the_group(monkeypatch)  # installed metadata without the group
    builtin = [spec.name for spec in registry.BUILTIN_ALGORITHMS]
    assert registry.algo_names() == builtin
    assert {"ippo", "mappo", "qmix", "maddpg", "happo", "verco"} <= set(builtin)
    assert build_config({"algo": {"name": "happo"}}).algo.name == "happo"


def test_an_entry_point_of_the_group_registers_its_algorithms(monkeypatch, fresh_registry):
    entry_points_of_the_group(monkeypatch, "uniform_learner:SPEC")
    assert registry.algo_spec("uniform") is uniform_learner.SPEC
    assert registry.algo_names()[-1] == "uniform"  # after the built-in ones
    cfg = build_config({"algo": {"name": "uniform"}}, ["algo.num_envs=2"])
    assert cfg.algo.num_envs == 2


def test_an_entry_point_may_name_a_list_of_algorithms(monkeypatch, fresh_registry):
    other = dataclasses.replace(uniform_learner.SPEC, name="uniform_too")
    monkeypatch.setattr(uniform_learner, "SPECS", [uniform_learner.SPEC, other], raising=False)
    entry_points_of_the_group(monkeypatch, "uniform_learner:SPECS")
    assert registry.algo_names()[-2:] == ["uniform", "uniform_too"]


def test_an_entry_point_cannot_replace_a_builtin_algorithm(monkeypatch, fresh_registry):
    clash = dataclasses.replace(uniform_learner.SPEC, name="ippo")
    monkeypatch.setattr(uniform_learner, "CLASH", clash, raising=False)
    entry_points_of_the_group(monkeypatch, "uniform_learner:CLASH")
    with pytest.raises(ValueError, match="algorithm 'ippo' .*plugin0.* is already registered"):
        registry.algo_spec("ippo")


def test_an_entry_point_that_is_no_algorithm_is_refused(monkeypatch, fresh_registry):
    entry_points_of_the_group(monkeypatch, "uniform_learner:UniformConfig")
    with pytest.raises(TypeError, match="must be an AlgoSpec or a list of them"):
        registry.algo_names()


def test_learners_read_the_facts_of_the_spec_not_the_name(fresh_registry):
    """An algorithm under a new name on the PPO and Q-learning modules behaves as its
    declared facts say: a centralised critic, a summing mixer."""
    mappo = registry.algo_spec("mappo")
    vdn = registry.algo_spec("vdn")
    registry.register_algorithm(dataclasses.replace(mappo, name="state_critic_ppo"))
    registry.register_algorithm(dataclasses.replace(vdn, name="summed_q"))
    env = envs.make_array_env("mpe:simple_spread_3")
    ppo_cfg = build_config({"algo": {"name": "state_critic_ppo"}}).algo
    assert PPO(ppo_cfg, env, identity_shaper()).centralized
    q_cfg = build_config({"algo": {"name": "summed_q"}}).algo
    assert isinstance(QLearning(q_cfg, env, identity_shaper()).mixer, VDNMixer)
    ippo_cfg = build_config({"algo": {"name": "ippo"}}).algo
    assert not PPO(ippo_cfg, env, identity_shaper()).centralized


def test_every_entry_names_a_module_with_schema_check_and_factory():
    for name, spec in registry.algorithms().items():
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
    for name, spec in registry.algorithms().items():
        assert f"{name:<8} {spec.summary}" in out
    assert "uniform  uniformly random legal actions" in out

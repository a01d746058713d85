"""LCA through ``run.py``'s runner: config validation, artifacts, comparison runs, resume."""

import json
import logging

import jax
import numpy as np
import pytest
import yaml
from toy_envs import RaceLine

import envs
from jaxmarl_llm.config import ConfigError, build_config
from jaxmarl_llm.runner import run_experiment

ENV = "test:race_line"


def _register_race_line(monkeypatch):
    spec = envs.EnvSpec(ENV, RaceLine, "toy credit-assignment race", won_fn=lambda e, s: e.won(s))
    monkeypatch.setitem(envs.registry._REGISTRY, ENV, spec)


@pytest.fixture(autouse=True)
def race_line_registered(monkeypatch):
    # registered per test, not at import: the registry is global and other test modules
    # parametrize over envs.names() when they are collected
    _register_race_line(monkeypatch)


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


def test_lca_run_writes_artifacts_and_compares_with_a_baseline(tmp_path, caplog):
    baseline = tmp_path / "race_team.yaml"
    baseline.write_text(yaml.safe_dump({"name": "race_team", "env": {"name": ENV}, "algo": ALGO}))
    cfg = _cfg(tmp_path, {"name": "lca", "kwargs": LCA}, f"compare_with=[{baseline}]")
    with caplog.at_level(logging.INFO, logger="jaxmarl_llm"):
        result = run_experiment(cfg)
    run = result.run_dir
    report = json.loads((run / "lca" / "report.json").read_text())
    assert report["pairs"] == 200 and report["label_accuracy_vs_heuristic"] == 1.0
    assert "LCA: 200 pairs (heuristic), labels 1.000 accurate" in caplog.text
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


ONLINE = {
    **LCA,
    "online_rounds": 2,
    "online_every": 2,
    "online_pairs": 32,
    "online_collect_steps": 4,
    "online_fit_steps": 50,
}


def _online_cfg(path, *over):
    algo = {**ALGO, "total_timesteps": 384}  # 6 updates: rounds after updates 2 and 4
    raw = {"name": "race_online", "env": {"name": ENV}, "algo": algo}
    raw["shaping"] = {"name": "lca", "kwargs": ONLINE}
    return build_config(
        raw, [f"out_dir={path}", "num_seeds=2", "log_every=2", "progress=false", *over]
    )


def _leaves(state):
    return [np.asarray(x) for x in jax.tree.leaves(state)]


@pytest.fixture(scope="module")
def online_run(tmp_path_factory):
    """An uninterrupted run with online rounds, trained once for the tests that read it."""
    with pytest.MonkeyPatch.context() as monkeypatch:
        _register_race_line(monkeypatch)
        return run_experiment(_online_cfg(tmp_path_factory.mktemp("lca_online") / "run"))


@pytest.mark.slow  # a second LCA run, with online rounds
def test_online_rounds_refit_each_seed_on_its_own_rollouts(online_run):
    result = online_run
    run = result.run_dir
    rounds = json.loads((run / "feedback.json").read_text())
    assert sorted(rounds) == ["0", "1"]
    first = json.loads((run / "lca" / "report.json").read_text())["pairs"]
    assert rounds["0"]["pairs"] == 2 * 32  # two seeds, 32 (transition, agent) pairs each
    assert rounds["0"]["pairs_total_per_seed"] == first + 32
    assert rounds["1"]["pairs_total_per_seed"] == first + 64
    assert rounds["1"]["label_accuracy_vs_heuristic"] == [1.0, 1.0]
    for k in (0, 1):
        assert (run / "lca" / "online" / f"round_{k}.npz").exists()
    assert result.summary["feedback_s"] > 0
    # each seed's model was refitted on its own pairs: the seeds' parameters now differ,
    # and both differ from the model fitted before training
    model = result.state.shaper_params.model
    leaf = jax.tree.leaves(model)[0]
    assert not np.allclose(leaf[0], leaf[1])
    from jaxmarl_llm.methods.lca import load_run

    _, _, before = load_run(run)
    assert not np.allclose(leaf[0], jax.tree.leaves(before.params.model)[0])


@pytest.mark.slow  # two more LCA runs
def test_online_rounds_resume_to_the_uninterrupted_result(tmp_path, online_run):
    full = online_run

    def kill_after_first_round(updates_done, state, rows):
        if updates_done == 2:
            raise RuntimeError("killed")

    with pytest.raises(RuntimeError, match="killed"):
        run_experiment(_online_cfg(tmp_path / "killed"), on_chunk=kill_after_first_round)
    killed = tmp_path / "killed"
    assert sorted(json.loads((killed / "feedback.json").read_text())) == ["0"]
    # a new process: round 1 must refit on round 0's pairs read back from disk
    resumed = run_experiment(_online_cfg(tmp_path / "other", f"resume={killed}"))
    for a, b in zip(_leaves(full.state), _leaves(resumed.state), strict=True):
        np.testing.assert_array_equal(a, b)


def test_online_rounds_are_refused_where_they_cannot_run(tmp_path):
    with pytest.raises(ConfigError, match="'log_every': 4 does not divide the 6 updates"):
        run_experiment(_online_cfg(tmp_path / "e", "log_every=4", "shaping.kwargs.online_every=6"))
    small = ["shaping.kwargs.online_pairs=1000"]
    with pytest.raises(ValueError, match="online_pairs=1000 needs 500 transitions per seed"):
        run_experiment(_online_cfg(tmp_path / "p", *small))


def test_api_key_never_lands_in_the_run_folder_or_the_label_store(tmp_path, monkeypatch):
    """A labelling round through the http backend, against the local server with faults
    to recover from and a key it demands, read from the environment variable the backend
    is told about: the key is in no file the run writes (config, reports, label store)."""
    from jaxmarl_llm.lm.backend import Backend, Completion
    from jaxmarl_llm.lm.server import LLMServer
    from jaxmarl_llm.testing.fault_server import Fault, FaultPlan

    key_env, secret = "JAXMARL_LLM_RUN_TEST_KEY", "sk-run-test-5f1e0c9a7b3d-secret"
    monkeypatch.setenv(key_env, secret)

    class SaysTwo(Backend):
        kind, model = "says_two", "two"

        def generate(self, requests):
            return [Completion("Answer: **2**", 7, 3) for _ in requests]

    faults = FaultPlan([Fault("429", retry_after=0.01), Fault("500"), Fault("malformed")])
    with LLMServer(SaysTwo(), before_request=faults, api_key=secret) as server:
        options = {"base_url": server.url, "model": "two", "api_key_env": key_env}
        options |= {"backoff_s": 0.01, "max_retries": 5}
        lca = {**LCA, "num_pairs": 20, "fit_steps": 10}
        lca |= {"labeler": "backend", "backend": "http", "backend_options": options}
        result = run_experiment(_cfg(tmp_path, {"name": "lca", "kwargs": lca}, "num_seeds=1"))
    assert server.stats.unauthorized == 0 and server.stats.backend_calls > 0  # key was sent
    assert [kind for kind, _ in faults.injected] == ["429", "500", "malformed"]
    report = json.loads((result.run_dir / "lca" / "report.json").read_text())
    assert report["labeling"]["answered"] == 20
    store = result.run_dir / "lca" / "labels.sqlite"
    assert b"Answer: **2**" in store.read_bytes()  # the scan below would see a stored string
    files = [p for p in result.run_dir.rglob("*") if p.is_file()]
    assert store in files and (result.run_dir / "config.yaml") in files
    holding = [str(p) for p in files if secret.encode() in p.read_bytes()]
    assert holding == []
    assert key_env in (result.run_dir / "config.yaml").read_text()  # the name is recorded

"""Config loading: every shipped config resolves; bad input names the key."""

import pytest

from jaxmarl_llm.config import ConfigError, available_configs, build_config, load_config

BASE = {"algo": {"name": "ippo"}}


@pytest.mark.parametrize("name", available_configs())
def test_shipped_configs_load(name):
    cfg = load_config(name)
    assert cfg.algo.total_timesteps > 0


def test_overrides_apply_and_floats_become_ints():
    cfg = build_config(
        BASE,
        [
            "algo.lr=3e-4",
            "algo.total_timesteps=2e6",
            "num_seeds=4",
            "env.kwargs.num_agents=4",
            "env.name=mpe:simple_spread",
        ],
    )
    assert cfg.algo.lr == pytest.approx(3e-4)
    assert cfg.algo.total_timesteps == 2_000_000 and isinstance(cfg.algo.total_timesteps, int)
    assert cfg.num_seeds == 4 and cfg.env.kwargs.num_agents == 4


@pytest.mark.parametrize(
    "override, fragments",
    [
        (["algo.lrr=1"], ["algo.lrr", "Did you mean 'lr'", "Valid keys under 'algo'"]),
        (["algo.activation=swish"], ["algo.activation", "tanh, relu, gelu"]),
        (["env.name=mpe:spread"], ["env.name", "Known environments", "mpe:simple_spread_3"]),
        (["algo.name=dqn"], ["algo.name", "ippo, mappo, qmix, vdn"]),
        (["nope=1"], ["'nope'", "top level"]),
        (["algo.num_envs=-2"], ["algo.num_envs", "> 0"]),
        (["algo.num_minibatches=3"], ["algo.num_minibatches", "does not divide"]),
        (["algo.grad_chunk_rows=-1"], ["algo.grad_chunk_rows", "null = by backend"]),
        (["algo.num_envs=many"], ["algo.num_envs"]),
        (["shaping.name=magic"], ["shaping.name", "identity"]),
        (["shaping.mode=multiply"], ["shaping.mode", "add, replace"]),
        (["resume=/no/such/run"], ["resume", "not a run folder"]),
        (["algo.lr"], ["key=value"]),
        (["eval.every=-1"], ["eval.every", "0 turns them off"]),
        (["eval.episodes=0"], ["eval.episodes", "> 0"]),
        (["eval.epsiodes=8"], ["eval.epsiodes", "Did you mean 'episodes'"]),
    ],
)
def test_bad_input_names_the_key(override, fragments):
    with pytest.raises(ConfigError) as e:
        build_config(BASE, override)
    for f in fragments:
        assert f in str(e.value), (f, str(e.value))


def test_qlearning_schema_for_qmix():
    cfg = build_config({"algo": {"name": "qmix"}}, ["algo.eps_finish=0.1"])
    assert cfg.algo.eps_finish == pytest.approx(0.1)
    with pytest.raises(ConfigError, match="clip_eps"):
        build_config({"algo": {"name": "qmix"}}, ["algo.clip_eps=0.1"])


def test_unknown_config_name_lists_available():
    with pytest.raises(ConfigError, match="Available in"):
        load_config("no_such_experiment")


@pytest.mark.parametrize(
    "config, override, fragment",
    [
        ("qmix_smax_3m", "algo.schedule_timesteps=0", "'algo.schedule_timesteps'"),
        ("maddpg_spread_3", "algo.tau=2", "'algo.tau'"),
        ("maddpg_lbf", "algo.batch_size=999999999", "'algo.batch_size'"),
        ("dpm_smax_3m", "algo.tau=0", "'algo.tau'"),
    ],
)
def test_run_script_reports_a_learner_check_as_a_config_error(
    config, override, fragment, tmp_path, capsys
):
    """The learners' own checks (values no schema can judge alone) end run.py with exit
    code 2 and one line naming the key, not a traceback, before the run folder (and a
    shaper's labels) exist: they used to run after config.yaml was written."""
    from scripts import load_script

    run = load_script("experiments/run.py")
    out = tmp_path / "run"
    argv = [config, "algo.total_timesteps=30720", override, f"out_dir={out}", "compare_with=[]"]
    assert run.main(argv) == 2
    err = capsys.readouterr().err
    assert err.startswith("config error: bad value for config key") and fragment in err, err
    assert "Traceback" not in err
    assert not out.exists()


@pytest.mark.parametrize(
    "override, fragment",
    [
        ("env.kwargs.world_state=scaled", "unknown SMAX world_state 'scaled'"),
        ("env.kwargs.reward=sparse", "unknown SMAX reward setting 'sparse'"),
        ("env.kwargs.no_such_kwarg=1", "bad kwargs for environment 'smax:3m'"),
    ],
)
def test_run_script_reports_a_bad_env_kwarg_before_writing_the_run(
    override, fragment, tmp_path, capsys
):
    from scripts import load_script

    run = load_script("experiments/run.py")
    out = tmp_path / "run"
    assert run.main(["qmix_smax_3m", override, f"out_dir={out}"]) == 2
    err = capsys.readouterr().err
    assert err.startswith("config error: bad value for config key 'env.kwargs'"), err
    assert fragment in err and "Traceback" not in err, err
    assert not out.exists()


def test_run_script_reports_feedback_rounds_that_fall_inside_a_chunk(tmp_path, capsys):
    from scripts import load_script

    run = load_script("experiments/run.py")
    argv = ["dpm_smax_3m", "shaping.kwargs.every=15", f"out_dir={tmp_path / 'run'}"]
    assert run.main([*argv, "compare_with=[]"]) == 2
    err = capsys.readouterr().err
    assert err.startswith("config error: bad value for config key 'log_every': 10 does not "), err
    assert "divide the 15 updates between" in err and "Traceback" not in err, err


def test_run_script_reports_a_language_model_failure_without_a_traceback(tmp_path, capsys):
    """A planning-function answer that cannot be used (here: its file is missing) ends
    run.py with exit code 1 and the reason, before any training."""
    from scripts import load_script

    run = load_script("experiments/run.py")
    argv = [
        "yolo_lbf_mappo",
        "shaping.kwargs.planner=file",
        f"shaping.kwargs.answer_file={tmp_path / 'no_such_answer.md'}",
        f"out_dir={tmp_path / 'run'}",
        "compare_with=[]",
    ]
    assert run.main(argv) == 1
    err = capsys.readouterr().err
    assert "error: NoUsablePlan: YOLO-MARL: no usable planning function" in err, err
    assert "no_such_answer.md' does not exist" in err and "Traceback" not in err

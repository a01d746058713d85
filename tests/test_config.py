"""Config loading: every shipped config resolves; bad input names the key."""

import tomllib
from importlib import resources
from pathlib import Path

import pytest

import jaxmarl_llm
from jaxmarl_llm import config
from jaxmarl_llm.config import ConfigError, available_configs, build_config, load_config

ROOT = Path(__file__).resolve().parents[1]

BASE = {"algo": {"name": "ippo"}}


@pytest.mark.parametrize("name", available_configs())
def test_shipped_configs_load(name):
    cfg = load_config(name)
    assert cfg.algo.total_timesteps > 0


def test_named_configs_are_package_data_found_through_importlib_resources():
    folder = resources.files("jaxmarl_llm").joinpath("configs")
    assert folder.is_dir() and config.CONFIG_DIR == Path(str(folder))
    assert config.CONFIG_DIR.parent == Path(jaxmarl_llm.__file__).parent
    assert "ippo_mpe_spread" in available_configs()
    assert config.resolve_config_path("ippo_mpe_spread").parent == config.CONFIG_DIR
    # every file of the folder goes into the wheel: matched by a package-data glob
    pyproject = tomllib.loads((ROOT / "pyproject.toml").read_text())
    package = config.CONFIG_DIR.parent
    globs = pyproject["tool"]["setuptools"]["package-data"]["jaxmarl_llm"]
    shipped = {p for g in globs for p in package.glob(g)}
    files = {p for p in config.CONFIG_DIR.rglob("*") if p.is_file()}
    assert files <= shipped, f"not package data (pyproject.toml): {sorted(files - shipped)}"


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


def _write(path, text):
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text)


@pytest.fixture
def config_dir(tmp_path, monkeypatch):
    """A configs folder with two partial blocks in base/ and a runnable config naming both."""
    monkeypatch.setattr(config, "CONFIG_DIR", tmp_path)
    learner = "algo: {name: ippo, lr: 1.0e-3, num_envs: 8, num_steps: 32}\nnum_seeds: 2\n"
    _write(tmp_path / "base" / "learner.yaml", learner)
    _write(tmp_path / "base" / "faster.yaml", "algo: {lr: 2.0e-3}\nnum_seeds: 3\nlog_every: 7\n")
    _write(tmp_path / "top.yaml", "base: [learner, faster]\nname: top\nalgo: {num_envs: 4}\n")
    return tmp_path


def test_bases_merge_in_order_then_the_file_then_overrides(config_dir):
    cfg = load_config("top", ["log_every=9"])
    assert cfg.name == "top" and cfg.algo.name == "ippo"
    assert cfg.algo.num_steps == 32  # from the first base only
    assert cfg.algo.lr == pytest.approx(2e-3) and cfg.num_seeds == 3  # the later base wins
    assert cfg.algo.num_envs == 4  # the file wins over its bases
    assert cfg.log_every == 9  # an override wins over everything
    assert available_configs() == ["top"]  # base/ holds blocks, not runnable configs


def test_a_base_is_a_runnable_config_or_a_relative_path_and_its_name_is_not_inherited(
    config_dir,
):
    _write(config_dir / "child.yaml", "base: top\nalgo: {name: mappo}\n")
    _write(config_dir / "sub" / "path.yaml", "base: ../base/learner.yaml\nname: path\n")
    child = load_config("child")
    assert child.name == "experiment" and child.algo.name == "mappo"
    assert child.algo.num_envs == 4 and child.algo.lr == pytest.approx(2e-3)
    by_path = load_config(str(config_dir / "sub" / "path.yaml"))
    assert by_path.name == "path" and by_path.algo.lr == pytest.approx(1e-3)


@pytest.mark.parametrize(
    "files, fragments",
    [
        ({"a.yaml": "base: nowhere\n"}, ["a.yaml", "base 'nowhere' is unknown"]),
        (
            {"a.yaml": "base: b\n", "b.yaml": "base: [learner, a]\n"},
            ["b.yaml", "cycle of bases: a.yaml -> b.yaml -> a.yaml"],
        ),
        ({"a.yaml": "base: a\n"}, ["cycle of bases: a.yaml -> a.yaml"]),
        (
            {"a.yaml": "base: listed\n", "base/listed.yaml": "- 1\n"},
            ["base of", "a.yaml", "listed.yaml must hold a mapping"],
        ),
        ({"a.yaml": "base: {learner: 1}\n"}, ["a.yaml", "'base' must be a config name"]),
        ({"a.yaml": "base: top\n", "base/top.yaml": "num_seeds: 1\n"}, ["'top' is ambiguous"]),
    ],
)
def test_bad_bases_name_the_file(config_dir, files, fragments):
    for name, text in files.items():
        _write(config_dir / name, text)
    with pytest.raises(ConfigError) as e:
        load_config("a")
    for f in fragments:
        assert f in str(e.value), (f, str(e.value))


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

"""experiments/verco_figures.py: every language-model run gets the same arguments, and the
staged budgets grow the runs together."""

import pytest
from scripts import load_script

figures = load_script("experiments/verco_figures.py")


def test_stage_targets_end_at_the_budget():
    assert figures.stage_targets(640, None) == [640]
    assert figures.stage_targets(640, 256) == [256, 512, 640]
    assert figures.stage_targets(512, 256) == [256, 512]
    assert figures.stage_targets(640, 1024) == [640]


@pytest.fixture
def calls(monkeypatch, tmp_path):
    """The (config, overrides, folder) of each ``run_into`` call; reports as budgets. The
    runs go under ``tmp_path``, which holds none yet."""
    import jaxmarl_llm.runner as runner

    monkeypatch.setattr(figures, "RUNS", tmp_path)
    made, reports = [], []
    monkeypatch.setattr(runner, "run_into", lambda c, o, out, note=None: made.append((c, o, out)))
    monkeypatch.setattr(figures, "write_report", lambda m, runs, budget: reports.append(budget))
    return made, reports


def test_stages_take_every_language_model_run_to_each_budget_before_the_next(calls):
    made, reports = calls
    args = ["a", "algo.lora_layers=last:4", "num_seeds=3", "algo.total_timesteps=384"]
    assert figures.main([*args, "--stage", "128", "--zero-shot-steps", "192"]) == 0
    # the symbolic baselines first, at their own budget
    assert [(c, o) for c, o, _ in made[:2]] == [("ppo_salad_a", []), ("commnet_salad_a", [])]
    lm = [(c, o[-1], out.name) for c, o, out in made[2:]]
    assert lm == [
        ("verco_salad_a", "algo.total_timesteps=128", "lm"),
        ("verco_teacher_salad_a", "algo.total_timesteps=128", "verco_teacher_salad_a"),
        ("twosome_salad_a", "algo.total_timesteps=128", "twosome_salad_a"),
        ("lm_zero_shot_salad_a", "algo.total_timesteps=128", "lm_zero_shot_salad_a"),
        ("verco_salad_a", "algo.total_timesteps=256", "lm"),
        ("verco_teacher_salad_a", "algo.total_timesteps=256", "verco_teacher_salad_a"),
        ("twosome_salad_a", "algo.total_timesteps=256", "twosome_salad_a"),
        ("lm_zero_shot_salad_a", "algo.total_timesteps=192", "lm_zero_shot_salad_a"),
        ("verco_salad_a", "algo.total_timesteps=384", "lm"),
        ("verco_teacher_salad_a", "algo.total_timesteps=384", "verco_teacher_salad_a"),
        ("twosome_salad_a", "algo.total_timesteps=384", "twosome_salad_a"),
        ("lm_zero_shot_salad_a", "algo.total_timesteps=192", "lm_zero_shot_salad_a"),
    ]
    for _, overrides, _ in made[2:]:
        assert overrides[:3] == args[1:] and "compare_with=[]" in overrides
    assert reports == [128, 256, 384]  # after each stage


def test_a_stage_that_splits_an_iteration_is_refused_before_anything_runs(calls, capsys):
    made, _ = calls
    with pytest.raises(SystemExit):
        figures.main(["a", "algo.total_timesteps=640", "--stage", "100"])
    assert made == []
    assert "not a whole number of iterations" in capsys.readouterr().err


def test_a_comparison_stopped_in_a_stage_goes_on_from_that_stage(calls, tmp_path):
    """Verco's run was extended to the second stage when the comparison stopped: the same
    command skips Verco's first stage (a run is not shortened) and goes on."""
    made, reports = calls
    from omegaconf import OmegaConf

    from jaxmarl_llm.config import load_config

    run = tmp_path / "a" / "lm"
    run.mkdir(parents=True)
    saved = load_config("verco_salad_a", ["algo.total_timesteps=256"])
    OmegaConf.save(saved, run / "config.yaml")
    assert figures.started_budget(run) == 256 and figures.started_budget(tmp_path) is None
    figures.main(["a", "algo.total_timesteps=384", "--stage", "128"])
    lm = [(c, o[-1]) for c, o, _ in made[2:]]
    assert lm[:4] == [
        ("verco_teacher_salad_a", "algo.total_timesteps=128"),
        ("twosome_salad_a", "algo.total_timesteps=128"),
        ("lm_zero_shot_salad_a", "algo.total_timesteps=128"),
        ("verco_salad_a", "algo.total_timesteps=256"),
    ]
    assert reports == [256, 384]  # the first stage's report was written before the stop


def test_each_reported_value_averages_the_episodes_of_the_last_window():
    """A language-model run logs every 64 env steps and most rows end no episode (NaN):
    each value is the mean over the rows of the last 1,024 env steps that ended one."""
    import numpy as np

    steps = np.arange(64, 64 * 40, 64)
    values = np.full((len(steps), 2), np.nan)
    values[5, 0], values[10, 0], values[20, 1] = 1.0, 3.0, 2.0  # at 384, 704, 1344 steps
    w = figures.windowed(steps, values)
    np.testing.assert_array_equal(w[10], [2.0, np.nan])  # 704: both of seed 0's episodes
    np.testing.assert_array_equal(w[21], [3.0, 2.0])  # 1408: the 384 one left the window
    np.testing.assert_array_equal(w[37], [np.nan, np.nan])  # 2432: none in the window
    cell = figures.at_step(steps, values, 1024)
    assert cell["env_steps"] == 1024 and cell["per_seed"][0] == 2.0
    assert np.isnan(cell["per_seed"][1]) and figures.at_step(steps, values, 5000) is None
    sparse = np.array([6400, 12800])  # a symbolic run: each update its own window
    one_seed = np.array([[0.2], [0.5]])
    np.testing.assert_array_equal(figures.windowed(sparse, one_seed), one_seed)


def test_the_second_half_averages_every_row_after_half_the_budget_up_to_its_update():
    import numpy as np

    steps = np.arange(64, 64 * 40, 64)  # to 2,496
    values = np.full((len(steps), 2), np.nan)
    values[5, 0], values[10, 0], values[20, 0], values[25, 1] = 9.0, 1.0, 3.0, 2.0
    cell = figures.second_half(steps, values, 1400)  # rows after 700 up to 1,408
    assert (cell["env_steps_from"], cell["env_steps"]) == (700, 1408)
    assert cell["per_seed"][0] == 2.0  # 704 and 1,344; not 384, before half the budget
    assert np.isnan(cell["per_seed"][1])  # its one episode ended at 1,664, past the update
    assert figures.second_half(steps, values, 5000) is None
    sparse = np.array([6400, 12800, 19200, 25600])  # a symbolic run: up to 25,600
    one_seed = np.array([[0.1], [0.2], [0.4], [0.6]])
    cell = figures.second_half(sparse, one_seed, 20480)
    assert cell["env_steps"] == 25600 and np.isclose(cell["per_seed"][0], 0.4)
    assert figures.fmt(cell) == "0.400 [0.400, 0.400] @ 10,240-25,600"

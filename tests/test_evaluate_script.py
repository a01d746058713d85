"""experiments/evaluate.py: greedy evaluation of a finished run's checkpoint."""

import json

import numpy as np
import pytest
from scripts import load_script


def _script():
    return load_script("experiments/evaluate.py")


@pytest.mark.slow  # an experiment-script run
def test_evaluates_the_last_checkpoint_like_the_runs_own_evaluation(finished, capsys):
    run = finished("qmix")[1].run_dir
    # the run's last evaluation used 4 episodes and these keys; the script's own seed
    # and episode count differ, so compare what must agree: shapes, counts, ranges
    assert _script().main([str(run), "--episodes", "8", "--max-steps", "30"]) == 0
    result = json.loads((run / "evaluation.json").read_text())
    assert result["env_steps"] == 192 and result["algo"] == "qmix"
    assert result["eval_episodes_per_seed"] == [8.0, 8.0]  # MPE episodes last 25 steps
    assert len(result["eval_return_per_seed"]) == 2
    assert all(np.isfinite(x) and x < 0 for x in result["eval_return_per_seed"])  # MPE costs
    assert json.loads(capsys.readouterr().out.strip().splitlines()[-1]) == result


def test_a_folder_that_is_no_run_is_refused_by_name(tmp_path, capsys):
    assert _script().main([str(tmp_path)]) == 2
    assert "is not a run folder" in capsys.readouterr().err


def test_episodes_not_won_are_split_into_lost_and_timed_out():
    from jaxmarl_llm.learners.evaluation import EpisodeEnds

    # seed 0: two wins (20, 30 steps), a loss at 18, a time-out (101 = SMAX's 100 + 1);
    # seed 1: one win, one episode still running at the step cap (not counted)
    ends = EpisodeEnds(
        episode_return=np.zeros((2, 4)),
        length=np.array([[20, 30, 18, 101], [16, 0, 0, 0]]),
        won=np.array([[True, True, False, False], [True, False, False, False]]),
        finished=np.array([[True, True, True, True], [True, False, False, False]]),
    )
    out = _script()._outcomes(ends, time_limit=100)
    np.testing.assert_allclose(out["lost_rate"], [0.25, 0.0])
    np.testing.assert_allclose(out["timeout_rate"], [0.25, 0.0])
    np.testing.assert_allclose(out["won_length"], [25.0, 16.0])
    np.testing.assert_allclose(out["lost_length"], [18.0, np.nan])
    # an env without a time limit: every episode not won counts as lost
    np.testing.assert_allclose(_script()._outcomes(ends, None)["lost_rate"], [0.5, 0.0])

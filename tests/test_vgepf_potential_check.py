"""experiments/vgepf_potential_check.py: the statistics of the potential over played states."""

import numpy as np
import pytest
from scripts import load_script

check = load_script("experiments/vgepf_potential_check.py")


def test_auc_counts_pairs_and_ties_and_needs_both_sides():
    assert check.auc([2.0, 3.0], [1.0]) == 1.0
    assert check.auc([1.0], [2.0, 3.0]) == 0.0
    # pairs: (1 vs 1) tie, (1 vs 0) win, (2 vs 1) win, (2 vs 0) win
    assert check.auc([1.0, 2.0], [1.0, 0.0]) == pytest.approx(3.5 / 4)
    assert check.auc([], [1.0]) is None and check.auc([1.0], []) is None


def test_correlation_is_none_for_a_constant_side():
    x = np.arange(6.0)
    assert check.correlation(x, 2 * x + 1) == pytest.approx(1.0)
    assert check.correlation(x, -x) == pytest.approx(-1.0)
    assert check.correlation(x, np.ones(6)) is None
    assert check.correlation(x[:0], x[:0]) is None  # no state where blue owns the ball


def test_episodes_start_after_an_end_and_the_first_is_open():
    done = np.array([0, 1, 0, 0, 1, 1, 0], bool)
    won = np.array([0, 0, 0, 0, 1, 0, 0], bool)
    # the episode ending at 1 began before the window; 6 has not ended
    assert check.episodes(done, won) == [(None, 1, False), (2, 4, True), (5, 5, False)]


def test_skill_stats_on_a_potential_that_rises_toward_wins():
    # one seed, one env: episode A (steps 0-2, won) climbs, episode B (3-5, lost) falls
    cos = np.array([0.0, 0.5, 1.0, 0.2, 0.1, 0.0]).reshape(1, 6, 1)
    done = np.array([0, 0, 1, 0, 0, 1], bool).reshape(1, 6, 1)
    won = np.array([0, 0, 1, 0, 0, 0], bool).reshape(1, 6, 1)
    owned = np.array([1, 1, 0, 1, 1, 0], bool).reshape(1, 6, 1)
    ball_x = np.where(owned, 1 - cos, cos)  # carried forward, the cosine falls
    pred = -cos
    stats = check.skill_stats(cos, pred, ball_x, owned, done, won, gamma=0.5)
    assert stats["auc_won"] == 1.0
    assert stats["corr_predicate"] == pytest.approx(-1.0)
    assert stats["corr_ball_x_owned"] == pytest.approx(-1.0)
    assert stats["predicate_corr_ball_x"] == pytest.approx(check.correlation(-cos, ball_x))
    assert stats["predicate_corr_ball_x_owned"] == pytest.approx(1.0)
    assert stats["predicate_holds"] == 0.0  # -cos is never positive
    # only B starts inside the window: it falls by 0.2 = 0.2 / std in std units
    assert stats["rise_won"] is None
    assert stats["rise_lost"] == pytest.approx(-0.2 / cos.std())
    assert stats["cos_mean"] == pytest.approx(cos.mean())
    phi = (cos - cos.mean()) / cos.std()
    assert stats["end_pay"] == pytest.approx(-(phi[0, 2, 0] + phi[0, 5, 0]) / 2)
    f = check.shaping_rewards(phi, done, 0.5)
    assert stats["shaping_std"] == pytest.approx(f.std())
    # on the raw cosine: ending A at 1.0 and B at 0.0 pays -0.5 on average
    assert stats["raw_end_pay"] == pytest.approx(-0.5)
    assert stats["raw_shaping_std"] == pytest.approx(check.shaping_rewards(cos, done, 0.5).std())


def test_shaping_rewards_drop_the_next_state_after_an_end():
    phi = np.array([1.0, 2.0, 3.0, 4.0]).reshape(1, 4, 1)
    done = np.array([0, 1, 0, 0], bool).reshape(1, 4, 1)
    f = check.shaping_rewards(phi, done, 0.5)
    # 0.5 * 2 - 1; the episode ends at step 1: 0 - 2; 0.5 * 4 - 3
    np.testing.assert_allclose(f.ravel(), [0.0, -2.0, -1.0])


def test_table_has_a_row_per_policy_and_skill():
    stats = dict.fromkeys((k for k, _ in check.COLUMNS), 0.5) | {"auc_won": None}
    skills = {"ball location": stats, "encourage attack": stats}
    policy = {"env_steps": 4000, "won_rate": 0.25, "env_reward_std": 0.1, "skills": skills}
    result = {"policies": {"mappo": policy}}
    lines = check.table(result).strip().split("\n")
    assert len(lines) == 2 + 2
    assert lines[2].startswith(
        "| mappo (4,000 steps, won 0.25, env reward std 0.100) | ball location | 0.50 |"
    )
    assert lines[3].count("| - |") == 1  # the missing AUC

import json

from tests.scripts import load_script


def test_random_policy_episodes_end_within_the_step_limit_and_some_succeed(tmp_path):
    script = load_script("experiments/verco_random_policy.py")
    out = tmp_path / "random.json"
    assert script.main(["--maps", "A", "--envs", "64", "--steps", "450", "--out", str(out)]) == 0
    (row,) = json.loads(out.read_text())
    # every kitchen ends at least two episodes in 450 steps (the limit is 200)
    assert row["env"] == "salad:A" and row["episodes"] >= 2 * 64
    assert 0.0 < row["success_rate"] < 0.5  # a correct delivery happens, but rarely
    assert row["episode_length"] <= 200.0
    # -0.001 per step, at most -0.1 per wrong delivery, +1.2 at most for a dish; an
    # episode that fails pays for its steps
    assert -5.0 < row["episode_return"] < 1.0

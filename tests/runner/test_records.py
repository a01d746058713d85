"""runner/records.py: reading a run's wall time back from its files."""

from jaxmarl_llm.runner.records import training_wall_s


def _metrics(path, walls):
    path.write_text("update,wall_s\n" + "".join(f"{i + 1},{w}\n" for i, w in enumerate(walls)))
    return path


def test_training_wall_s_adds_the_stretches_a_restarted_clock_cut_off(tmp_path):
    # two resumes whose clocks restarted: stretches of 30 and 25 s before the last process
    restarted = _metrics(tmp_path / "a.csv", [10, 20, 30, 5, 25, 4, 8])
    assert training_wall_s(restarted, {"wall_s": 9.0}) == 30 + 25 + 9.0
    # a clock carried over a resume (or no resume): the summary's own time
    carried = _metrics(tmp_path / "b.csv", [10, 20, 30, 31, 40])
    assert training_wall_s(carried, {"wall_s": 41.0}) == 41.0
    assert training_wall_s(tmp_path / "missing.csv", {"wall_s": 7.0}) == 7.0

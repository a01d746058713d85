"""experiments/plot.py and plotting.plot_runs: several runs' curves in one PNG."""

import numpy as np
import pytest
from scripts import load_script

from jaxmarl_llm import plotting


def _script():
    return load_script("experiments/plot.py")


def _run(folder, train_win, eval_win):
    """A run folder with two seeds' ``win_rate`` (metrics.csv) and ``eval_win_rate`` (eval.csv)."""
    folder.mkdir(parents=True)
    rows = ["env_steps,win_rate,win_rate/seed0,win_rate/seed1"]
    rows += [f"{(i + 1) * 100},{np.mean(w)},{w[0]},{w[1]}" for i, w in enumerate(train_win)]
    (folder / "metrics.csv").write_text("\n".join(rows) + "\n")
    rows = ["update,env_steps,eval_win_rate,eval_win_rate/seed0,eval_win_rate/seed1"]
    rows += [f"{i},{(i + 1) * 1000},{np.mean(w)},{w[0]},{w[1]}" for i, w in enumerate(eval_win)]
    (folder / "eval.csv").write_text("\n".join(rows) + "\n")
    return folder


def test_plot_runs_reads_eval_metrics_from_eval_csv_and_others_from_metrics_csv(
    tmp_path, monkeypatch
):
    run = _run(tmp_path / "a", [(0.1, 0.2), (0.3, 0.4), (0.5, 0.6)], [(0.25, 0.75), (1.0, 0.5)])
    seen = {}

    def capture(runs, out_path, **kwargs):
        seen.update(runs)
        return out_path

    monkeypatch.setattr(plotting, "plot_curves", capture)
    plotting.plot_runs({"A": run}, tmp_path / "x.png", metric="eval_win_rate")
    steps, values = seen["A"]
    np.testing.assert_array_equal(steps, [1000, 2000])
    np.testing.assert_array_equal(values, [[0.25, 0.75], [1.0, 0.5]])
    plotting.plot_runs({"A": run}, tmp_path / "x.png", metric="win_rate")
    steps, values = seen["A"]
    np.testing.assert_array_equal(steps, [100, 200, 300])
    np.testing.assert_array_equal(values[:, 1], [0.2, 0.4, 0.6])


def test_the_script_draws_labelled_and_unlabelled_runs(tmp_path, capsys):
    a = _run(tmp_path / "dpm", [(0.1, 0.2), (0.3, 0.4)], [(0.5, 0.5), (0.9, 0.8)])
    b = _run(tmp_path / "dense", [(0.0, 0.2), (0.4, 0.4)], [(0.6, 0.5), (0.7, 0.8)])
    out = tmp_path / "win.png"
    argv = [f"DPM, strong sparse={a}", str(b), "--metric", "eval_win_rate", "--out", str(out)]
    assert _script().main(argv) == 0
    assert out.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n" and out.stat().st_size > 10_000
    assert capsys.readouterr().out.strip() == str(out)


def test_parse_runs_labels_by_folder_name_unless_given():
    runs = _script().parse_runs(["runs/a", "QMIX, lr=1e-3=runs/b"])
    assert [(k, list(map(str, v))) for k, v in runs.items()] == [
        ("a", ["runs/a"]),
        ("QMIX, lr=1e-3", ["runs/b"]),
    ]
    with pytest.raises(ValueError, match="two runs are labelled 'a'"):
        _script().parse_runs(["runs/a", "x/a"])
    with pytest.raises(ValueError, match="two runs are labelled 'a'"):
        _script().parse_runs(["runs/a", "a=x/b"])
    with pytest.raises(ValueError, match="given twice under 'A'"):
        _script().parse_runs(["A=runs/a", "A=runs/a"])


def test_one_label_on_several_folders_pools_their_seeds_at_common_steps(tmp_path, monkeypatch):
    a = _run(tmp_path / "a", [(0.1, 0.2)], [(0.25, 0.75), (1.0, 0.5), (0.0, 0.0)])
    b = _run(tmp_path / "b", [(0.1, 0.2)], [(0.5, 0.0), (0.5, 1.0)])
    runs = _script().parse_runs([f"DPM={a}", f"DPM={b}"])
    assert list(runs) == ["DPM"] and runs["DPM"] == [a, b]
    seen = {}

    def capture(curves, out_path, **kwargs):
        seen.update(curves)
        return out_path

    monkeypatch.setattr(plotting, "plot_curves", capture)
    plotting.plot_runs(runs, tmp_path / "x.png", metric="eval_win_rate")
    steps, values = seen["DPM"]
    np.testing.assert_array_equal(steps, [1000, 2000])  # b has no evaluation at 3000
    np.testing.assert_array_equal(values, [[0.25, 0.75, 0.5, 0.0], [1.0, 0.5, 0.5, 1.0]])


def test_a_run_without_the_metric_is_refused_by_name_and_nothing_is_written(tmp_path, capsys):
    a = _run(tmp_path / "a", [(0.1, 0.2)], [(0.5, 0.5)])
    (tmp_path / "b").mkdir()
    out = tmp_path / "x.png"
    with pytest.raises(SystemExit) as e:
        _script().main([str(a), str(tmp_path / "b"), "--metric", "eval_return", "--out", str(out)])
    assert e.value.code == 2
    err = capsys.readouterr().err
    assert "a: " in err and "has no per-seed 'eval_return' columns" in err
    assert f"b: no {tmp_path / 'b' / 'eval.csv'}" in err
    assert not out.exists()


def test_pooled_folders_without_a_common_step_are_refused(tmp_path, capsys):
    a = _run(tmp_path / "a", [(0.1, 0.2)], [(0.25, 0.75)])
    b = _run(tmp_path / "b", [(0.1, 0.2)], [(0.5, 0.0)])
    rows = (b / "eval.csv").read_text().replace("\n0,1000,", "\n0,1500,")
    (b / "eval.csv").write_text(rows)
    out = tmp_path / "x.png"
    with pytest.raises(SystemExit) as e:
        _script().main([f"A={a}", f"A={b}", "--metric", "eval_win_rate", "--out", str(out)])
    assert e.value.code == 2
    assert "no env-step count in common" in capsys.readouterr().err
    assert not out.exists()

"""experiments/vgepf_figures.py: rows, tables and the radar chart from run folders."""

import json
import subprocess

import pytest
from scripts import load_script

figures = load_script("experiments/vgepf_figures.py")


def _run(path, evals, train_win):
    """A run folder with two seeds: ``evals`` = {update: (win seed0, win seed1)}."""
    path.mkdir(parents=True)
    steps = 1000
    with (path / "eval.csv").open("w") as f:
        f.write("update,env_steps,eval_win_rate/seed0,eval_win_rate/seed1,"
                "eval_stat_shots/seed0,eval_stat_shots/seed1\n")  # fmt: skip
        for u, (a, b) in evals.items():
            f.write(f"{u},{u * steps},{a},{b},{2 * a},{2 * b}\n")
    with (path / "metrics.csv").open("w") as f:
        f.write("update,env_steps,stat_win,stat_shots\n")
        for u in range(1, 11):
            f.write(f"{u},{u * steps},{train_win * u / 10},{u}\n")
    summary = {"num_seeds": 2, "env_steps": 10 * steps, "wall_s": 5.0,
               "final_win_rate_mean": train_win}  # fmt: skip
    (path / "summary.json").write_text(json.dumps(summary))
    return path


def test_rows_average_the_last_evaluations_per_seed_and_the_last_training_updates(tmp_path):
    run = _run(tmp_path / "a", {2: (0.0, 0.0), 8: (0.5, 0.25), 10: (1.0, 0.75)}, 0.4)
    row = figures.method_row("V-GEPF", run)
    # evaluations at updates 8 and 10 are in the last 20% of 10,000 steps
    assert row["eval"]["win_rate"]["per_seed"] == [0.75, 0.5]
    assert row["eval"]["win_rate"]["mean"] == pytest.approx(0.625)
    assert row["eval"]["shots"]["mean"] == pytest.approx(1.25)
    # training statistics: updates 8-10 (steps >= 8,000)
    assert row["train"]["shots"] == pytest.approx(9.0)
    assert row["train"]["win"] == pytest.approx(0.36)
    other = figures.method_row("MAPPO", _run(tmp_path / "b", {10: (0.0, 0.5)}, 0.1))
    table = figures.markdown([row, other])
    assert "| V-GEPF | 0.62 ± 0.12 |" in table  # greedy win rate, mean ± std over seeds
    assert "| MAPPO | 0.09 |  | 9.00 |" in table  # training: win, no goals logged, shots
    out = figures.radar([row, other], tmp_path / "radar.png", "t")
    assert out.stat().st_size > 0


def test_baseline_labels_name_the_learner():
    assert [figures.baseline_label(n) for n in (
        "mappo_football_counterattack_easy", "happo_football_11v11_hard",
        "mappo_xt_counterattack_easy", "ippo_football_counterattack_easy",
    )] == ["MAPPO", "HAPPO", "MAPPO-xT", "IPPO"]  # fmt: skip
    assert set(figures.SKILL_TARGETS) == set(figures.FIGURES["skills"])


def test_each_fixed_skill_is_read_against_mappo_on_its_statistic():
    rows = [
        {"method": "MAPPO", "train": {"shots": 1.0, "goals_conceded": 0.2}},
        {"method": "encourage attack", "train": {"shots": 1.5, "shot_success": 0.4}},
        {"method": "encourage defense", "train": {"goals_conceded": 0.3}},
    ]
    table = figures.skill_targets(rows)
    assert "| encourage attack | shots | 1.50 | 1.00 | True |" in table
    assert "| encourage defense | goals_conceded | 0.30 | 0.20 | False |" in table
    assert "shot_success" not in table  # MAPPO's row lacks it


def test_reference_rows_come_from_the_counterattack_figure_only_at_its_budget(
    tmp_path, monkeypatch
):
    from omegaconf import OmegaConf

    import jaxmarl_llm.runner as runner

    results = tmp_path / "results"
    results.mkdir()
    counterattack = [
        {"method": m, "seeds": 2, "env_steps": 10_000, "train": {}} for m in ("V-GEPF", "MAPPO")
    ]
    (results / "counterattack.json").write_text(json.dumps(counterattack))
    monkeypatch.setattr(figures, "RESULTS", results)
    monkeypatch.setattr(figures, "ROOT", tmp_path)
    trained = []

    def fake_run_into(config, overrides, out, note=None):
        trained.append((config, overrides))
        if not out.exists():
            _run(out, {10: (0.0, 0.5)}, 0.1)

    monkeypatch.setattr(runner, "run_into", fake_run_into)
    cfg = OmegaConf.create({"num_seeds": 2, "seed": 0, "algo": {"total_timesteps": 10_000}})
    variant = {"method": "rho=1.0", "seeds": 2, "env_steps": 10_000}
    monkeypatch.setattr(figures, "same_code", lambda record: True)
    rows = figures.shared_rows("rho", [variant], cfg, ["x=1"], quiet=True)
    assert [r["method"] for r in rows] == ["rho=0.5 (V-GEPF)", "rho=1.0"] and not trained

    # the same seeds and steps, but run on other code: trained again
    monkeypatch.setattr(figures, "same_code", lambda record: False)
    figures.shared_rows("rho", [variant], cfg, ["x=1"], quiet=True)
    assert [c for c, _ in trained] == ["vgepf_counterattack_easy"]
    trained.clear()
    monkeypatch.setattr(figures, "same_code", lambda record: True)

    cfg.algo.total_timesteps = 5_000  # another budget: the references are trained at it
    small = {**variant, "env_steps": 10_000 // 2}
    with pytest.raises(SystemExit, match="delete it"):  # the fake runs 10,000 steps
        figures.shared_rows("skills", [small], cfg, ["x=1"], quiet=True)
    assert trained[0][0] == "vgepf_counterattack_easy"
    assert "x=1" in trained[0][1] and "algo.total_timesteps=5000" in trained[0][1]

    # the counterattack runs' records, started as a 5,000-step run would: their first
    # 5,000 steps stand in for it
    shaping = {"name": "vgepf", "kwargs": {"selection": {"every": 5}}}
    config = OmegaConf.create(
        {"seed": 0, "num_seeds": 2, "algo": {"anneal_lr": False}, "shaping": shaping}
    )
    cfg.shaping = shaping
    cfg.algo.anneal_lr = False
    for rel in figures.SHARED_RECORDS.values():
        _run(results / rel, {4: (0.0, 1.0), 5: (0.5, 0.5), 10: (1.0, 1.0)}, 0.3)
        OmegaConf.save(config, results / rel / "config.yaml")
    trained.clear()
    rows = figures.shared_rows("skills", [small], cfg, [], quiet=True)
    assert not trained and [r["method"] for r in rows] == ["V-GEPF", "MAPPO", "rho=1.0"]
    assert rows[0]["env_steps"] == 5_000 and rows[0]["wall_s"] is None
    assert rows[0]["eval"]["win_rate"]["per_seed"] == [0.25, 0.75]  # updates 4 and 5 only
    cfg.shaping.kwargs.selection.every = 2  # another selection period: trained instead
    with pytest.raises(SystemExit, match="delete it"):
        figures.shared_rows("skills", [small], cfg, [], quiet=True)


@pytest.mark.parametrize("level", ["easy", "hard"])
def test_fig12_runs_the_appendixs_counterattack_setting_against_mappo(level):
    from jaxmarl_llm.config import load_config

    name, extra = figures.FIGURES[f"fig12_{level}"]["V-GEPF"]
    cfg = load_config(name, extra)
    algo = cfg.algo
    assert cfg.env.name == f"football:academy_counterattack_{level}"
    # 80 workers x 400 steps x 200 epochs = 6.4M; rho 1; Table 1's PPO
    assert (algo.num_envs, algo.num_steps, algo.total_timesteps) == (80, 400, 6_400_000)
    updates = algo.total_timesteps // (algo.num_envs * algo.num_steps)
    assert updates == 200 and cfg.eval.every * cfg.log_every == updates // 20
    assert cfg.shaping.name == "vgepf" and cfg.shaping.coef == 1.0
    assert (algo.lr, algo.gamma, algo.update_epochs, list(algo.hidden_sizes)) == (
        5e-4, 0.995, 10, [256, 128, 64])  # fmt: skip
    selection = cfg.shaping.kwargs.selection
    assert selection.every * (selection.rounds + 1) <= updates  # every selection is used
    assert selection.every % cfg.log_every == 0  # selections run between chunks
    (baseline,) = cfg.compare_with
    assert figures.baseline_label(baseline) == "MAPPO"
    base = load_config(baseline)
    assert base.shaping.name == "identity" and base.env.name == cfg.env.name
    for key in ("num_envs", "num_steps", "lr", "update_epochs", "hidden_sizes", "gamma"):
        assert base.algo[key] == algo[key], key
    # any other variant is that run with one setting changed, read against the same MAPPO
    for label, (other, overrides) in figures.FIGURES[f"fig12_{level}"].items():
        if label != "V-GEPF":
            variant = load_config(other, overrides)
            assert variant.algo == cfg.algo and variant.shaping.coef == cfg.shaping.coef
            assert not variant.compare_with


def test_same_code_reads_the_records_commit_against_the_run_code(tmp_path):
    head = subprocess.run(["git", "-C", str(figures.ROOT), "rev-parse", "HEAD"],
                          capture_output=True, text=True).stdout.strip()  # fmt: skip
    record = tmp_path / "run"
    record.mkdir()
    assert not figures.same_code(record)  # no summary: cannot tell
    (record / "summary.json").write_text(json.dumps({"commit": "d184ab3"}))
    assert not figures.same_code(record)  # the football env has changed since
    (record / "summary.json").write_text(json.dumps({"commit": head}))
    clean = subprocess.run(["git", "-C", str(figures.ROOT), "diff", "--quiet", "HEAD", "--",
                            *figures.RUN_CODE]).returncode == 0  # fmt: skip
    assert figures.same_code(record) == clean


def test_report_reads_the_finished_variants_records_and_their_baselines(tmp_path, monkeypatch):
    monkeypatch.setattr(figures, "RESULTS", tmp_path)
    vgepf = _run(tmp_path / "fig12_hard" / "V-GEPF", {10: (0.5, 0.25)}, 0.4)
    (vgepf / "config.yaml").write_text("compare_with: [configs/mappo_football_x.yaml]\n")
    _run(vgepf / "compare" / "mappo_football_x", {10: (1.0, 0.75)}, 0.6)
    # a variant still running has no summary: left out
    (tmp_path / "fig12_hard" / "V-GEPF_normalised").mkdir()
    rows = figures.report_rows("fig12_hard")
    assert [r["method"] for r in rows] == ["V-GEPF", "MAPPO"]
    assert rows[1]["eval"]["win_rate"]["per_seed"] == [1.0, 0.75]
    with pytest.raises(SystemExit, match="no finished fig12_easy records"):
        figures.report_rows("fig12_easy")


def test_running_one_variant_keeps_the_others_in_the_figures_tables(tmp_path, monkeypatch):
    import jaxmarl_llm.runner as runner

    monkeypatch.setattr(figures, "ROOT", tmp_path)
    monkeypatch.setattr(figures, "RESULTS", tmp_path / "results")
    vgepf = _run(tmp_path / "results" / "fig12_hard" / "V-GEPF", {10: (0.5, 0.25)}, 0.4)
    (vgepf / "config.yaml").write_text("compare_with: [configs/mappo_football_x.yaml]\n")
    _run(vgepf / "compare" / "mappo_football_x", {10: (1.0, 0.75)}, 0.6)
    runs = tmp_path / "runs" / "vgepf" / "fig12_hard"
    normalised = _run(runs / "V-GEPF_normalised", {10: (0, 1)}, 0.2)
    (normalised / "config.yaml").write_text("compare_with: []\n")
    monkeypatch.setattr(runner, "run_into", lambda *a, **k: None)  # the run is finished
    monkeypatch.setattr(runner, "run_comparisons", lambda *a, **k: None)
    rows = figures.run_figure("fig12_hard", [], True, ["V-GEPF normalised"])
    assert [r["method"] for r in rows] == ["V-GEPF", "MAPPO", "V-GEPF normalised"]
    table = (tmp_path / "results" / "fig12_hard.md").read_text()
    assert "| V-GEPF | " in table and "| V-GEPF normalised | " in table
    for curves in ("fig12_hard_win.png", "fig12_hard_test_win.png"):
        assert (tmp_path / "results" / curves).stat().st_size > 0

"""experiments/status.py: values read from result files, the legend's rules, the pages."""

import json

import pytest
from scripts import load_script


@pytest.fixture(scope="module")
def status():
    return load_script("experiments/status.py")


@pytest.fixture
def results(tmp_path, status, monkeypatch):
    """A results folder with one list-of-rows file and one CSV, in place of the real one."""
    rows = [
        {"env": "a", "variant": "method", "mean": 4.5, "per_seed": [4.0, 5.0], "commit": "abc1234"},
        {"env": "a", "variant": "baseline", "mean": 2.0, "per_seed": [2.0, 2.0]},
    ]
    (tmp_path / "fig.json").write_text(json.dumps(rows))
    (tmp_path / "eval.csv").write_text(
        "update,env_steps,win,win/seed0,win/seed1,episodes\n"
        "1,10,0.1,0.0,0.2,2\n2,99,0.5,0.7,0.3,0\n3,100,0.7,0.5,0.9,6\n"
    )
    monkeypatch.setattr(status, "RESULTS_DIR", tmp_path)
    return tmp_path


def _claim(**over):
    claim = {
        "id": "X1",
        "paper": "P",
        "claim": "the method beats the baseline",
        "paper_number": "4.5 vs 2.0",
        "paper_ref": {"line": 1, "quote": "4.5"},
        "labels": "heuristic oracle",
        "budget": {"seeds": 2, "env_steps": 100, "paper_env_steps": 100},
        "values": {
            "m": {"file": "fig.json", "row": {"variant": "method"}, "field": "per_seed"},
            "b": {"file": "fig.json", "row": {"variant": "baseline"}, "field": "mean",
                  "seeds": "per_seed"},
            "gain": {"expr": "(m - b) / abs(b)"},
        },
        "ours": "{m} vs {b:.1f}, {gain:%}",
        "holds": ["m > b"],
        "verdict": "reproduced",
    }  # fmt: skip
    claim.update(over)
    return claim


def _spec(*claims):
    return {"papers": [{"key": "P", "file": "p.txt", "detail": "d.md"}], "claims": list(claims)}


def test_values_are_read_from_the_files(status, results):
    rows = status.build_rows(_spec(_claim()), status.Resolver({}))
    (row,) = rows
    assert row.ours == "4.50 ± 0.50 vs 2.0, +125.0%"
    assert row.values["m"].seeds == [4.0, 5.0]
    assert row.budget == "2 × 100 (100%)"
    # the selected row's own commit wins; a file without one is not yet committed
    assert row.commits == ["abc1234", "uncommitted"]


@pytest.mark.parametrize(
    "spec, seeds",
    [
        ({}, [0.5, 0.9]),  # each seed column's last row
        ({"tail": 0.95}, [0.6, 0.6]),  # the rows at 99 and 100 env steps
        ({"where": {"env_steps_lt": 100}, "reduce": "mean"}, [0.35, 0.25]),
        ({"reduce": "sum"}, [1.2, 1.4]),
        ({"reduce": "weighted_mean:episodes"}, [0.375, 0.725]),  # the 0-episode row drops
    ],
)
def test_csv_reductions(status, results, spec, seeds):
    value = status.Resolver({}).value({"file": "eval.csv", "csv_column": "win", **spec}, "t")
    assert value.seeds == pytest.approx(seeds)
    assert value.mean == pytest.approx(sum(seeds) / 2)


def test_list_counts(status, results):
    rows = [{"k": "a", "x": 1}, {"k": "b", "x": 3}, {"k": "a", "x": 2}]
    (results / "cases.json").write_text(json.dumps({"rows": rows}))
    r = status.Resolver({})
    assert r.value({"file": "cases.json", "field": "rows", "reduce": "len"}, "t").mean == 3
    assert r.value({"file": "cases.json", "field": "rows", "reduce": "distinct:k"}, "t").mean == 2
    assert r.value({"file": "cases.json", "field": "rows", "reduce": "max:x"}, "t").mean == 3


@pytest.mark.parametrize(
    "over, message",
    [
        ({"verdict": "NOT reproduced"}, "not one of"),
        ({"holds": ["m < b"]}, "no longer support"),
        ({"holds": []}, "rests on conditions"),
        ({"verdict": "partly"}, "what it rests on"),
        ({"verdict": "not run", "why": "no model"}, "no numbers of ours"),
        ({"verdict": "running", "holds": []}, "what is left"),
        ({"verdict": "running", "why": "3 seeds left"}, "no verdict to rest"),
        ({"verdict": "running", "why": "3 seeds left", "values": {}, "holds": []}, "needs numbers"),
        ({"budget": {"seeds": 2, "env_steps": 10, "paper_env_steps": 100}}, "50%"),
        ({"labels": "a guess"}, "label source"),
        ({"paper_ref": None}, "paper's line"),
        ({"ours": "{missing}"}, "not among its values"),
        ({"holds": ["__import__('os')"]}, "only"),
        ({"holds": ["m.__class__ == b"]}, "is not one of"),
        (
            {"values": {"m": {"file": "fig.json", "row": {"env": "a"}, "field": "mean"}}},
            "2 rows match",
        ),
        ({"values": {"m": {"file": "nope.json", "field": "x"}}}, "does not exist"),
        (
            {"values": {"m": {"file": "fig.json", "row": {"variant": "method"}, "field": "env"}}},
            "not a number",
        ),
    ],
)
def test_rules_refuse_what_the_legend_forbids(status, results, over, message):
    with pytest.raises(status.StatusError, match=message):
        status.build_rows(_spec(_claim(**over)), status.Resolver({}))


def test_not_run_rows_carry_the_reason(status, results):
    claim = _claim(verdict="not run", why="no model of the paper's size", values={}, ours=None,
                   holds=[])  # fmt: skip
    (row,) = status.build_rows(_spec(claim), status.Resolver({}))
    assert row.ours == "not run: no model of the paper's size"


def test_running_rows_show_their_numbers_and_what_is_left(status, results):
    claim = _claim(verdict="running", why="one seed of three", holds=[])
    (row,) = status.build_rows(_spec(claim), status.Resolver({}))
    assert row.ours.startswith("4.50 ± 0.50 vs 2.0")
    assert "| running: one seed of three |" in status.claims_table([row])


def test_a_long_commit_list_is_cut_on_the_status_page_only(status, results):
    (row,) = status.build_rows(_spec(_claim()), status.Resolver({}))
    row.commits = [f"{k:07x}" for k in range(status.COMMITS_SHOWN + 3)]
    short = status.claims_table([row])
    assert f"`{status.COMMITS_SHOWN - 2:07x}` and 4 more (detail page)" in short
    assert f"`{status.COMMITS_SHOWN - 1:07x}`" not in short
    assert all(f"`{c}`" in status.claims_table([row], full=True) for c in row.commits)
    row.commits = row.commits[: status.COMMITS_SHOWN]
    assert "more (detail page)" not in status.claims_table([row])


def test_steps_text(status):
    assert [status.steps_text(n) for n in (999, 88_064, 1_000_000, 6_400_000)] == [
        "999", "88k", "1M", "6.4M",
    ]  # fmt: skip


def test_blocks_are_replaced_between_markers(status):
    text = "head\n" + status.BEGIN.format(name="x") + "\nold\n" + status.END.format(name="x")
    new = status.replace_block(text + "\ntail", "x", "new", "page")
    assert "new" in new and "old" not in new and new.endswith("tail")
    with pytest.raises(status.StatusError, match="markers"):
        status.replace_block("no markers", "x", "new", "page")


def test_paper_quotes_are_checked_against_the_line(status, tmp_path, monkeypatch):
    (tmp_path / "p.txt").write_text("intro\nthe method reaches 4.5 on the task\n")
    monkeypatch.setattr(status, "PAPERS", tmp_path)
    good = _claim(paper_ref={"line": 2, "quote": "reaches 4.5"})
    wrong_line = _claim(id="X2", paper_ref={"line": 1, "quote": "reaches 4.5"})
    assert status.check_paper_quotes(_spec(good)) == []
    (problem,) = status.check_paper_quotes(_spec(good, wrong_line))
    assert problem.startswith("X2:")


@pytest.fixture
def project(tmp_path, status, monkeypatch):
    """A whole project in miniature: claims, one result file, README and a detail page."""
    experiments = tmp_path / "experiments"
    results = experiments / "results"
    (results / "m").mkdir(parents=True)
    (results / "fig.json").write_text(
        json.dumps([{"variant": "method", "per_seed": [4.0, 5.0]},
                    {"variant": "baseline", "per_seed": [2.0, 2.0]}])
    )  # fmt: skip
    block = lambda name: f"{status.BEGIN.format(name=name)}\n{status.END.format(name=name)}"
    (tmp_path / "README.md").write_text(f"# project\n\n{block('results')}\n\nmore\n")
    (results / "m" / "README.md").write_text(f"# detail\n\n{block('claims')}\n")
    claim = _claim(values={
        "m": {"file": "fig.json", "row": {"variant": "method"}, "field": "per_seed"},
        "b": {"file": "fig.json", "row": {"variant": "baseline"}, "field": "per_seed"},
    }, ours="{m} vs {b}", figure="results/m/curve.png")  # fmt: skip
    paper = {"key": "P", "name": "Paper", "file": "p.txt", "detail": "results/m/README.md",
             "setting": "s", "language_model": "none"}  # fmt: skip
    legend = {v: "rule" for v in status.VERDICTS}
    spec = {"legend": legend, "papers": [paper], "claims": [claim]}
    (experiments / "claims.yaml").write_text(status.yaml.safe_dump(spec))
    for name, value in {
        "ROOT": tmp_path, "EXPERIMENTS": experiments, "RESULTS_DIR": results,
        "CLAIMS": experiments / "claims.yaml", "PAGE": experiments / "RESULTS.md",
        "README": tmp_path / "README.md", "PROVENANCE": results / "provenance.json",
        "PAPERS": tmp_path / "no_papers",
    }.items():  # fmt: skip
        monkeypatch.setattr(status, name, value)
    return tmp_path


def test_check_fails_when_a_file_or_a_page_drifts(status, project, capsys):
    assert status.main([]) == 0
    page = (project / "experiments" / "RESULTS.md").read_text()
    assert "4.50 ± 0.50 vs 2.00" in page and "| P | 1 | 0 | 0 | 0 | 0 |" in page
    assert "| P | 1 | 0 | 0 | 0 | 0 |" in (project / "README.md").read_text()
    detail = (project / "experiments" / "results" / "m" / "README.md").read_text()
    assert "[curve.png](curve.png)" in detail  # links relative to the detail page
    assert status.main(["--check"]) == 0

    readme = project / "README.md"
    readme.write_text(readme.read_text().replace("| P | 1 |", "| P | 2 |"))
    assert status.main(["--check"]) == 1
    assert "README.md: differs" in capsys.readouterr().err
    assert status.main([]) == 0

    fig = project / "experiments" / "results" / "fig.json"
    fig.write_text(fig.read_text().replace("5.0", "5.5"))
    assert status.main(["--check"]) == 1
    assert "fig.json: changed since the page was written" in capsys.readouterr().err
    fig.write_text(fig.read_text().replace("[4.0, 5.5]", "[1.0, 1.5]"))
    assert status.main([]) == 1  # the data no longer support "m > b"
    assert "no longer support" in capsys.readouterr().err


def test_narration_in_a_results_page_is_refused(status, tmp_path):
    page = tmp_path / "experiments" / "results" / "m" / "README.md"
    page.parent.mkdir(parents=True)
    page.write_text(
        "LCA 4.67 (`fig3.json`), after the last round of feedback.\n"
        "The env now saves more shots; fixed in issue 42, superseded by the rerun.\n"
    )
    found = status.check_wording(tmp_path)
    assert [p.split(": ", 1)[1] for p in found] == ["'now'", "'issue 42'", "'superseded'"]
    assert all(p.startswith("experiments/results/m/README.md:2:") for p in found)


def test_a_malformed_claims_file_is_named_with_its_line(status, tmp_path):
    bad = tmp_path / "claims.yaml"
    bad.write_text("claims:\n  - id: X1\n    why: running (`x`: one run at a time)\n")
    where = r"(?s)claims.yaml is not valid YAML.*line 3, column 22"
    with pytest.raises(status.StatusError, match=where):
        status.load_claims(bad)
    bad.write_text("claims:\n  - id: X1\n")
    assert status.load_claims(bad) == {"claims": [{"id": "X1"}]}

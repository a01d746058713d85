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
        ({"budget": {"seeds": 2, "env_steps": 10, "paper_env_steps": 100}}, "50%"),
        ({"labels": "a guess"}, "label source"),
        ({"paper_ref": None}, "paper's line"),
        ({"ours": "{missing}"}, "not among its values"),
        ({"holds": ["__import__('os')"]}, "only"),
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


def test_the_stored_pages_match_the_files(status):
    """What CI's `status.py --check` asserts, on the repository's own files."""
    assert status.main(["--check"]) == 0

"""experiments/label_ladder.py: the label-source ladder files as one table and figures."""

import copy
import json

import pytest
from scripts import load_script


@pytest.fixture(scope="module")
def ladder():
    return load_script("experiments/label_ladder.py")


def _record(method="lca"):
    return {
        "method": method,
        "queries": [
            {
                "name": "two_switch pairs",
                "env": "two_switch",
                "kind": "state-pair ranking per agent",
                "held_out": 200,
                "how_built": "mixed pairs, seed 7",
            }
        ],
        "sources": [
            {
                "query_set": "two_switch pairs",
                "source": "heuristic oracle",
                "accuracy": 1.0,
                "abstention": 0.0,
                "labels_per_s": 12345.6,
                "n": 200,
                "command": "measure oracle",
            },
            {
                "query_set": "two_switch pairs",
                "source": "Gemma 3 270M",
                "accuracy": None,
                "abstention": 1.0,
                "labels_per_s": 0.25,
                "n": 64,
                "command": "measure gemma",
            },
        ],
        "training": [
            {
                "env": "two_switch",
                "source": source,
                "label_accuracy": acc,
                "metric": "train ret",
                "final": final,
                "final_per_seed": [final - 0.1, final, final + 0.1],
                "baseline_name": "MAPPO team reward",
                "baseline": 2.87,
                "seeds": 3,
                "env_steps": 250000,
                "command": f"train {source}",
            }
            for source, acc, final in (("heuristic oracle", 1.0, 4.68), ("scripted 60%", 0.58, 2.5))
        ],
    }


def _write(folder, record):
    (folder / f"{record['method']}.json").write_text(json.dumps(record))


def test_table_rows_for_present_methods_and_a_note_for_missing_ones(ladder, tmp_path):
    _write(tmp_path, _record("lca"))
    _write(tmp_path, _record("yolo"))
    notes = []
    records = ladder.build(tmp_path, log=notes.append)

    assert list(records) == ["lca", "yolo"]
    assert any("dpm.json not found" in n for n in notes)
    text = (tmp_path / "README.md").read_text()
    assert "`dpm.json`" in text
    assert "| lca | two_switch pairs | heuristic oracle | 1.00 | 0.00 | 12,346 | 200 |" in text
    assert "| yolo | two_switch pairs | Gemma 3 270M | n/a | 1.00 | 0.25 | 64 |" in text
    # training table: the distance to the baseline and how many seeds beat it
    oracle = "| two_switch | heuristic oracle | 1.00 | train ret | 4.68 (4.58, 4.68, 4.78) "
    assert oracle + "| MAPPO team reward 2.87 | +1.81 (3/3) | 3 × 250,000 |" in text
    noisy = "| two_switch | scripted 60% | 0.58 | train ret | 2.50 (2.40, 2.50, 2.60) "
    assert noisy + "| MAPPO team reward 2.87 | -0.37 (0/3) |" in text
    assert text.count("### ") == 2
    for method in ("lca", "yolo"):
        assert (tmp_path / f"{method}.png").stat().st_size > 1000
        assert f"![{method}]({method}.png)" in text
    assert not (tmp_path / "dpm.png").exists()


def test_no_files_writes_a_readme_that_says_so(ladder, tmp_path):
    assert ladder.build(tmp_path, log=lambda _: None) == {}
    text = (tmp_path / "README.md").read_text()
    assert "`lca.json`, `dpm.json`, `yolo.json`" in text
    assert "## Label quality" not in text


def test_training_rows_without_label_accuracy_get_no_figure(ladder, tmp_path):
    record = _record()
    for r in record["training"]:
        r["label_accuracy"] = None
    _write(tmp_path, record)
    ladder.build(tmp_path, log=lambda _: None)
    assert not (tmp_path / "lca.png").exists()
    assert "| two_switch | heuristic oracle | n/a |" in (tmp_path / "README.md").read_text()


def test_a_source_not_measured_is_listed_with_its_reason(ladder, tmp_path):
    record = _record()
    record["sources"][1].update(accuracy=None, abstention=None, labels_per_s=None, n=0)
    record["sources"][1]["note"] = "not measured: stopped before any answer"
    _write(tmp_path, record)
    ladder.build(tmp_path, log=lambda _: None)
    assert "| not measured: stopped before any answer |" in (tmp_path / "README.md").read_text()


@pytest.mark.parametrize(
    "corrupt, field",
    [
        (lambda r: r["sources"][1].update(accuracy="high"), "sources[1].accuracy"),
        (lambda r: r["sources"][0].update(abstention=1.5), "sources[0].abstention"),
        (lambda r: r["sources"][0].update(abstention=None), "sources[0].note"),
        (lambda r: r["sources"][0].pop("labels_per_s"), "sources[0].labels_per_s"),
        (lambda r: r["training"][1].update(final_per_seed=[]), "training[1].final_per_seed"),
        (lambda r: r["training"][0].update(final=float("nan")), "training[0].final"),
        (lambda r: r["training"][0].update(seeds=True), "training[0].seeds"),
        (lambda r: r["queries"][0].pop("how_built"), "queries[0].how_built"),
        (lambda r: r.update(training={}), "training"),
        (lambda r: r.update(method="dpm"), "method"),
        (lambda r: r["sources"][0].update(query_set="pistonball pairs"), "sources[0].query_set"),
    ],
)
def test_a_malformed_file_names_the_file_and_the_field(ladder, tmp_path, corrupt, field):
    record = copy.deepcopy(_record())
    corrupt(record)
    path = tmp_path / "lca.json"
    path.write_text(json.dumps(record))
    with pytest.raises(ladder.LadderFileError) as err:
        ladder.build(tmp_path, log=lambda _: None)
    assert str(path) in str(err.value)
    assert f": {field}: expected" in str(err.value)
    assert not (tmp_path / "README.md").exists()


def test_invalid_json_and_main_exit_code(ladder, tmp_path, capsys):
    (tmp_path / "dpm.json").write_text("{not json")
    assert ladder.main(["--dir", str(tmp_path)]) == 2
    err = capsys.readouterr().err
    assert "dpm.json: not valid JSON" in err

"""The label-source ladder of every method in one table, and one figure per method.

    python experiments/label_ladder.py [--dir experiments/results/labels]

Reads whichever of ``lca.json``, ``dpm.json`` and ``yolo.json`` exist in ``--dir`` (the
shared format: ``queries``, ``sources`` with each source's accuracy against the oracle on
held-out queries, ``training`` with the final metric of runs trained from each source) and
writes ``README.md`` there (the label quality of every method and source in one table, then
each method's training table) and ``<method>.png`` (final metric against label accuracy, one
marker per source, the seeds as dots, the baseline as a dashed line). A missing file is
skipped with a note; a malformed one stops with an error naming the file and the field.
"""

from __future__ import annotations

import argparse
import json
import math
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

METHODS = ("lca", "dpm", "yolo")
DEFAULT_DIR = ROOT / "experiments" / "results" / "labels"


class LadderFileError(ValueError):
    """A ladder file that does not follow the shared format."""


def _number(x) -> bool:
    return isinstance(x, int | float) and not isinstance(x, bool) and math.isfinite(x)


def _check(cond: bool, path: Path, field: str, want: str, got) -> None:
    if not cond:
        raise LadderFileError(f"{path}: {field}: expected {want}, got {got!r}")


_TEXT = (lambda x: isinstance(x, str) and x.strip() != "", "a non-empty string")
_COUNT = (lambda x: isinstance(x, int) and not isinstance(x, bool) and x >= 0, "an integer >= 0")
_NUMBER = (_number, "a finite number")
_FRACTION = (lambda x: _number(x) and 0.0 <= x <= 1.0, "a number in [0, 1]")
_FRACTION_OR_NULL = (lambda x: x is None or _FRACTION[0](x), "a number in [0, 1] or null")
_RATE_OR_NULL = (lambda x: x is None or (_number(x) and x >= 0), "a number >= 0 or null")
_NUMBERS = (
    lambda x: isinstance(x, list) and len(x) > 0 and all(_number(v) for v in x),
    "a non-empty list of finite numbers",
)

QUERY_FIELDS = {"name": _TEXT, "env": _TEXT, "kind": _TEXT, "held_out": _COUNT, "how_built": _TEXT}
SOURCE_FIELDS = {
    "query_set": _TEXT,
    "source": _TEXT,
    "accuracy": _FRACTION_OR_NULL,
    "abstention": _FRACTION_OR_NULL,  # null only for a source not measured, with a "note" why
    "labels_per_s": _RATE_OR_NULL,
    "n": _COUNT,
    "command": _TEXT,
}
TRAINING_FIELDS = {
    "env": _TEXT,
    "source": _TEXT,
    "label_accuracy": _FRACTION_OR_NULL,
    "metric": _TEXT,
    "final": _NUMBER,
    "final_per_seed": _NUMBERS,
    "baseline_name": _TEXT,
    "baseline": _NUMBER,
    "seeds": _COUNT,
    "env_steps": _COUNT,
    "command": _TEXT,
}


def validate(record, path: Path, method: str) -> dict:
    """``record`` if it follows the shared format, else a ``LadderFileError``."""
    _check(isinstance(record, dict), path, "(top level)", "a JSON object", type(record).__name__)
    _check(record.get("method") == method, path, "method", repr(method), record.get("method"))
    for section, fields in (
        ("queries", QUERY_FIELDS),
        ("sources", SOURCE_FIELDS),
        ("training", TRAINING_FIELDS),
    ):
        rows = record.get(section)
        _check(isinstance(rows, list), path, section, "a list", rows)
        for i, row in enumerate(rows):
            _check(isinstance(row, dict), path, f"{section}[{i}]", "an object", row)
            for name, (ok, want) in fields.items():
                _check(name in row, path, f"{section}[{i}].{name}", want, "missing")
                _check(ok(row[name]), path, f"{section}[{i}].{name}", want, row[name])
    names = {q["name"] for q in record["queries"]}
    for i, row in enumerate(record["sources"]):
        if row["abstention"] is None:
            _check(
                _TEXT[0](row.get("note")),
                path,
                f"sources[{i}].note",
                "a non-empty string saying why the source was not measured (abstention is null)",
                row.get("note"),
            )
        _check(
            row["query_set"] in names,
            path,
            f"sources[{i}].query_set",
            f"one of the query sets named in queries {sorted(names)}",
            row["query_set"],
        )
    return record


def load_method(directory: Path, method: str) -> dict | None:
    """The validated ladder file of ``method`` in ``directory``, ``None`` if there is none."""
    path = Path(directory) / f"{method}.json"
    if not path.exists():
        return None
    try:
        record = json.loads(path.read_text())
    except json.JSONDecodeError as e:
        raise LadderFileError(f"{path}: not valid JSON ({e})") from None
    return validate(record, path, method)


def _fmt(x, digits: int = 2) -> str:
    return "n/a" if x is None else f"{x:.{digits}f}"


def _rate(x) -> str:
    if x is None:
        return "n/a"
    return f"{x:,.0f}" if x >= 100 else f"{x:.3g}"


def _seeds(values: list[float]) -> str:
    return ", ".join(f"{v:.2f}" for v in values)


def sources_table(records: dict[str, dict]) -> str:
    lines = [
        "| method | query set | source | accuracy vs oracle | abstention | labels/s | queries |",
        "|---|---|---|---|---|---|---|",
    ]
    for method, record in records.items():
        for r in record["sources"]:
            lines.append(
                f"| {method} | {r['query_set']} | {r['source']} | {_fmt(r['accuracy'])} "
                f"| {r['note'] if r['abstention'] is None else _fmt(r['abstention'])} "
                f"| {_rate(r['labels_per_s'])} | {r['n']} |"
            )
    return "\n".join(lines) + "\n"


def training_table(record: dict) -> str:
    lines = [
        "| env | source | label accuracy | metric | final (per seed) | baseline "
        "| final - baseline (seeds above) | seeds × env steps | command |",
        "|---|---|---|---|---|---|---|---|---|",
    ]
    for r in record["training"]:
        above = sum(v > r["baseline"] for v in r["final_per_seed"])
        lines.append(
            f"| {r['env']} | {r['source']} | {_fmt(r['label_accuracy'])} | {r['metric']} "
            f"| {r['final']:.2f} ({_seeds(r['final_per_seed'])}) "
            f"| {r['baseline_name']} {r['baseline']:.2f} "
            f"| {r['final'] - r['baseline']:+.2f} ({above}/{len(r['final_per_seed'])}) "
            f"| {r['seeds']} × {r['env_steps']:,} | `{r['command']}` |"
        )
    return "\n".join(lines) + "\n"


def readme(records: dict[str, dict], missing: list[str], figures: dict[str, str]) -> str:
    out = [
        "# How good must labels be: the label-source ladder\n",
        "Written by `python experiments/label_ladder.py` from the per-method files in this "
        "folder. Each source answers the same held-out queries of its method; accuracy is "
        "agreement with the method's oracle over the answered queries, abstention the "
        "share of queries left without a usable label, labels/s answered labels per wall "
        "second on the machine that measured them.\n",
    ]
    if missing:
        out.append(
            "Not in this table (no file yet): " + ", ".join(f"`{m}.json`" for m in missing) + ".\n"
        )
    if not records:
        return "\n".join(out)
    out.append("## Label quality on held-out queries\n")
    out.append(sources_table(records))
    for method, record in records.items():
        for q in record["queries"]:
            out.append(
                f"- {method}, **{q['name']}** ({q['env']}, {q['kind']}, {q['held_out']} "
                f"held out): {q['how_built']}"
            )
    out.append("")
    out.append("## Training from each source\n")
    for method, record in records.items():
        out.append(f"### {method}\n")
        if not record["training"]:
            out.append("No training rows.\n")
            continue
        out.append(training_table(record))
        if method in figures:
            out.append(f"![{method}]({figures[method]})\n")
    return "\n".join(out)


def plot_method(record: dict, out_path: Path) -> Path | None:
    """Final metric against label accuracy, one panel per (env, metric); ``None`` when no
    training row has a label accuracy to place it at."""
    import matplotlib.pyplot as plt

    import jaxmarl_llm.plotting  # noqa: F401  (the project's non-interactive backend)

    rows = [r for r in record["training"] if r["label_accuracy"] is not None]
    if not rows:
        return None
    panels: dict[tuple[str, str], list[dict]] = {}
    for r in rows:
        panels.setdefault((r["env"], r["metric"]), []).append(r)
    fig, axes = plt.subplots(
        1, len(panels), figsize=(4.6 * len(panels), 3.8), dpi=120, squeeze=False
    )
    for ax, ((env, metric), group) in zip(axes[0], panels.items(), strict=True):
        for k, r in enumerate(group):
            x = r["label_accuracy"]
            color = f"C{k % 10}"
            seeds = r["final_per_seed"]
            ax.scatter([x] * len(seeds), seeds, s=12, color=color, alpha=0.45, linewidths=0)
            ax.scatter([x], [r["final"]], s=50, color=color, marker="o", zorder=3)
            ax.annotate(
                r["source"],
                (x, r["final"]),
                textcoords="offset points",
                xytext=(5, 4),
                fontsize=7,
                color=color,
            )
        for j, (name, value) in enumerate(
            sorted({(r["baseline_name"], r["baseline"]) for r in group})
        ):
            ax.axhline(
                value,
                color="0.35",
                linestyle=(0, (4, 2 + 2 * j)),
                linewidth=1,
                label=f"{name} ({value:.2f})",
            )
        # differences far below the metric's scale (seed noise) are not blown up to full height
        values = [v for r in group for v in r["final_per_seed"]] + [r["baseline"] for r in group]
        lo, hi = min(values), max(values)
        span = 0.2 * max(abs(hi), abs(lo), 1.0)
        if hi - lo < span:
            middle = (hi + lo) / 2
            ax.set_ylim(middle - span / 2, middle + span / 2)
        ax.set_xlabel("label accuracy vs oracle (held out)")
        ax.set_ylabel(metric)
        ax.set_title(f"{record['method']}: {env}", fontsize=10)
        ax.grid(alpha=0.3)
        ax.spines[["top", "right"]].set_visible(False)
        ax.legend(loc="lower right", fontsize="small", frameon=False)
    fig.tight_layout()
    fig.savefig(out_path)
    plt.close(fig)
    return out_path


def build(directory: Path = DEFAULT_DIR, log=print) -> dict[str, dict]:
    """Read the method files in ``directory``, write its README and figures; the records."""
    directory = Path(directory)
    records, missing, figures = {}, [], {}
    for method in METHODS:
        record = load_method(directory, method)
        if record is None:
            log(f"note: {directory / f'{method}.json'} not found, {method} skipped")
            missing.append(method)
            continue
        records[method] = record
        png = plot_method(record, directory / f"{method}.png")
        if png is not None:
            figures[method] = png.name
    directory.mkdir(parents=True, exist_ok=True)
    (directory / "README.md").write_text(readme(records, missing, figures))
    log(f"wrote {directory / 'README.md'} ({', '.join(records) or 'no methods'})")
    return records


def main(argv=None) -> int:
    p = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    p.add_argument("--dir", type=Path, default=DEFAULT_DIR, help="folder of the method files")
    args = p.parse_args(argv)
    try:
        build(args.dir)
    except LadderFileError as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

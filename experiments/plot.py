"""Several runs' learning curves in one PNG:

    python experiments/plot.py RUN_DIR [RUN_DIR ...] --out curves.png
    python experiments/plot.py "DPM=runs/dpm_smax_3m" "QMIX dense=runs/qmix_smax_3m_dense" \\
        --metric eval_win_rate --out win_rate.png --title "SMAX 3m"

Each argument is a run folder, or ``LABEL=RUN_DIR`` to name its line (the folder's name
otherwise). One line per run: the mean over its seeds, with a min-max band. ``--metric``
names a per-seed column of ``metrics.csv`` (``episode_return``, ``win_rate``, ``loss``...)
or of the greedy evaluations' ``eval.csv`` (``eval_return``, ``eval_win_rate``).
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))


def parse_runs(items: list[str]) -> dict[str, Path]:
    """``LABEL=RUN_DIR`` or ``RUN_DIR`` arguments as ``{label: run_dir}``, in order."""
    runs: dict[str, Path] = {}
    for item in items:
        label, sep, path = item.rpartition("=")
        run_dir = Path(path if sep else item)
        label = label if sep and label else run_dir.name
        if label in runs:
            raise ValueError(f"two runs are labelled {label!r}: give one a LABEL=RUN_DIR label")
        runs[label] = run_dir
    return runs


def missing_files(runs: dict[str, Path], metric: str) -> list[str]:
    """What each run lacks for ``metric``: its CSV, or the metric's per-seed columns."""
    from jaxmarl_llm.plotting import load_metrics, metrics_file, seed_columns

    source = metrics_file(metric)
    problems = []
    for label, run_dir in runs.items():
        csv = run_dir / source
        if not csv.is_file():
            problems.append(f"{label}: no {csv}")
        elif not seed_columns(load_metrics(csv)[0], metric):
            problems.append(f"{label}: {csv} has no per-seed {metric!r} columns")
    return problems


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(
        description=__doc__.split("\n\n")[0], formatter_class=argparse.RawTextHelpFormatter
    )
    p.add_argument("runs", nargs="+", help="run folders, each optionally as LABEL=RUN_DIR")
    p.add_argument("--metric", default="episode_return", help="default: episode_return")
    p.add_argument("--out", required=True, help="the PNG to write")
    p.add_argument("--title", default="")
    args = p.parse_args(argv)
    try:
        runs = parse_runs(args.runs)
    except ValueError as e:
        p.error(str(e))
    problems = missing_files(runs, args.metric)
    if problems:
        p.error("cannot plot " + args.metric + ":\n  " + "\n  ".join(problems))

    from jaxmarl_llm.plotting import plot_runs

    out = plot_runs(runs, args.out, metric=args.metric, title=args.title)
    print(out)
    return 0


if __name__ == "__main__":
    sys.exit(main())

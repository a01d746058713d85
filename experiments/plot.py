"""Several runs' learning curves in one PNG:

    python experiments/plot.py RUN_DIR [RUN_DIR ...] --out curves.png
    python experiments/plot.py "DPM=runs/dpm_smax_3m" "QMIX dense=runs/qmix_smax_3m_dense" \\
        --metric eval_win_rate --out win_rate.png --title "SMAX 3m"

Each argument is a run folder, or ``LABEL=RUN_DIR`` to name its line (the folder's name
otherwise). One line per label: the mean over its seeds, with a min-max band. A label
given to several folders pools their seeds (one config run with ``seed=0`` and ``seed=3``:
``"DPM=runs/a" "DPM=runs/b"``), at the env steps every one of them logged. ``--metric``
names a per-seed column of ``metrics.csv`` (``episode_return``, ``win_rate``, ``loss``...)
or of the greedy evaluations' ``eval.csv`` (``eval_return``, ``eval_win_rate``).
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))


def parse_runs(items: list[str]) -> dict[str, list[Path]]:
    """``LABEL=RUN_DIR`` or ``RUN_DIR`` arguments as ``{label: [run_dir, ...]}``, in
    order; folders given the same explicit label share it (their seeds are pooled)."""
    runs: dict[str, list[Path]] = {}
    named: set[str] = set()
    for item in items:
        label, sep, path = item.rpartition("=")
        run_dir = Path(path if sep else item)
        explicit = bool(sep and label)
        label = label if explicit else run_dir.name
        if label in runs and not (explicit and label in named):
            raise ValueError(
                f"two runs are labelled {label!r}: give one a LABEL=RUN_DIR label "
                "(the same LABEL on both pools their seeds)"
            )
        if run_dir in runs.get(label, []):
            raise ValueError(f"{run_dir} is given twice under {label!r}")
        runs.setdefault(label, []).append(run_dir)
        if explicit:
            named.add(label)
    return runs


def missing_files(runs: dict[str, list[Path]], metric: str) -> list[str]:
    """What each run lacks for ``metric``: its CSV, or the metric's per-seed columns."""
    from jaxmarl_llm.plotting import load_metrics, metrics_file, seed_columns

    source = metrics_file(metric)
    problems = []
    for label, run_dirs in runs.items():
        for run_dir in run_dirs:
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

    try:
        out = plot_runs(runs, args.out, metric=args.metric, title=args.title)
    except ValueError as e:  # folders pooled under one label that share no logged step
        p.error(f"cannot plot {args.metric}: {e}")
    print(out)
    return 0


if __name__ == "__main__":
    sys.exit(main())

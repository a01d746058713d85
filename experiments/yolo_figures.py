"""YOLO-MARL's experiments: Table 1 / Fig. 2 (LBF), Fig. 3-4 (MPE spread), Fig. 5 (SMAX 3m).

    python experiments/yolo_figures.py lbf     # MAPPO, QMIX, MADDPG with and without the bonus
    python experiments/yolo_figures.py mpe     # spread 3 and 4 agents, QMIX and MADDPG
    python experiments/yolo_figures.py smax    # 3m, recurrent MAPPO (win rate)

Every pair is one ``run.py`` run of ``yolo_<env>_<algo>`` in ``runs/yolo/<config>/``, whose
baseline runs with the same seeds and budget into ``compare/``; a finished run is reused
(delete its folder to rerun). Extra ``key=value`` arguments go to every run (e.g.
``algo.total_timesteps=1000000``); ``--only TEXT`` runs only the configs whose name holds
TEXT and reports the other pairs only where they have finished. Results:
``--tag TAG ...`` reports, without running anything, the variants run by hand into
``runs/yolo/<config>/<TAG>/`` (rows named ``<config>/<TAG>``). Results:
``experiments/results/yolo/<figure>.md`` (mean return of the exploring policy at the
paper's marks: the mean over seeds of the logged updates in the last 2.5% of steps
before each mark; win rate on SMAX; and, for runs with greedy evaluations, the mean of
the evaluations in the last 5% before each mark, as the paper reports evaluation
returns) and ``<config>/comparison.png`` curves.
"""

from __future__ import annotations

import argparse
import json
import logging
import shutil
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
RESULTS = ROOT / "experiments" / "results" / "yolo"
FIGURES = {
    "lbf": ["yolo_lbf_mappo", "yolo_lbf_mappo_epymarl", "yolo_lbf_qmix", "yolo_lbf_maddpg"],
    "mpe": [
        "yolo_spread_3_qmix",
        "yolo_spread_3_maddpg",
        "yolo_spread_4_qmix",
        "yolo_spread_4_maddpg",
    ],
    "smax": ["yolo_smax_3m_mappo"],
}
EVAL_METRIC = {"episode_return": "eval_return", "win_rate": "eval_win_rate"}
MARKS = (200_000, 400_000, 1_500_000, 2_000_000)  # Table 1's columns
WINDOW = 0.025  # fraction of the run's steps averaged before each mark
EVAL_WINDOW = 0.05  # the same for greedy evaluations, which are sparser than updates


def value_at(run_dir: Path, step: int, metric: str) -> float | None:
    """Mean over seeds and over the logged updates in ``(step - WINDOW * total, step]``."""
    import numpy as np

    from jaxmarl_llm.plotting import load_metrics, seed_columns

    header, data = load_metrics(run_dir / "metrics.csv")
    steps = data["env_steps"]
    if steps[-1] < step * 0.99:
        return None
    lo = step - WINDOW * steps[-1]
    rows = (steps > lo) & (steps <= step * 1.001)
    cols = seed_columns(header, metric) or [metric]
    values = np.stack([data[c][rows] for c in cols], 1)
    return None if np.isnan(values).all() else float(np.nanmean(values))


def eval_value_at(run_dir: Path, step: int, metric: str) -> float | None:
    """Mean over seeds of the evaluations (``eval.csv``: greedy, or ``eval_sampled_*`` for
    the sampled policy) in ``(step - EVAL_WINDOW * total, step]``; None for runs without
    evaluations there."""
    import numpy as np

    from jaxmarl_llm.plotting import load_metrics, seed_columns

    if not (run_dir / "eval.csv").exists():
        return None
    header, data = load_metrics(run_dir / "eval.csv")
    _, train = load_metrics(run_dir / "metrics.csv")
    steps = data["env_steps"]
    rows = (steps > step - EVAL_WINDOW * train["env_steps"][-1]) & (steps <= step * 1.001)
    cols = seed_columns(header, metric)
    if not rows.any() or not cols:
        return None
    values = np.stack([data[c][rows] for c in cols], 1)
    return None if np.isnan(values).all() else float(np.nanmean(values))


def run_figure(
    figure: str,
    overrides: list[str],
    quiet: bool,
    only: str | None = None,
    tags: list[str] = (),
) -> list[dict]:
    from omegaconf import OmegaConf

    from jaxmarl_llm.config import load_config
    from jaxmarl_llm.runner import finished_summary, run_comparisons, run_into

    rows = []
    for config in FIGURES[figure] if not tags else []:
        out = ROOT / "runs" / "yolo" / config
        common = [f"progress={not quiet}", *overrides]
        requested = load_config(config, common)
        baseline_config = requested.compare_with[0]
        base_out = out / "compare" / Path(baseline_config).stem
        budget = [f"algo.total_timesteps={requested.algo.total_timesteps}"]  # as run_comparisons
        finished = finished_summary(config, common, out) is not None and (
            finished_summary(baseline_config, budget, base_out) is not None
        )
        if only and only not in config and not finished:
            continue  # --only: run just the matching pairs, report the finished ones
        summary = run_into(config, common, out, f"[{figure}] {config}")
        cfg = OmegaConf.load(out / "config.yaml")
        run_comparisons(cfg, out)  # the baseline too, if a kill stopped the run before it
        metric = "win_rate" if figure == "smax" else "episode_return"
        total = int(summary["env_steps"])
        marks = [m for m in MARKS if m <= total * 1.001] or [total]
        # the run's end, unless a mark already stands there (1,999,872 steps is the 2M mark)
        if figure != "lbf" and all(abs(m - total) > total * 0.001 for m in marks):
            marks.append(total)
        # the config's baseline: a pair run side by side saved compare_with=[] in the run
        runs = {"YOLO-MARL": out, "baseline": base_out}
        rows += pair_rows(figure, cfg, config, baseline_config, runs, metric, marks, total)
        dest = RESULTS / config
        base_dest = dest / f"baseline_{Path(baseline_config).stem}"
        for run_dir, to in ((out, dest), (base_out, base_dest)):
            to.mkdir(parents=True, exist_ok=True)
            for name in ("comparison.png", "summary.json", "config.yaml", "eval.csv"):
                if (run_dir / name).exists():
                    shutil.copy(run_dir / name, to / name)
        record = out / "yolo" / "planning_function.py"
        if record.exists():
            shutil.copy(record, dest / "planning_function.py")
    for tag in tags:
        rows += tagged_rows(figure, tag, only)
    previous = RESULTS / f"{figure}.json"
    if previous.exists():  # keep the rows of pairs not run or reported this time
        done = {r["config"] for r in rows}
        from jaxmarl_llm.runner.provenance import stamp_kept_rows

        kept = [r for r in json.loads(previous.read_text()) if r["config"] not in done]
        kept = stamp_kept_rows(kept, previous)
        rows = [{**r, "eval_marks": r.get("eval_marks", {})} for r in kept] + rows
    RESULTS.mkdir(parents=True, exist_ok=True)
    previous.write_text(json.dumps(rows, indent=2))
    tables = "Exploring policy during training:\n\n" + markdown_table(rows)
    if any(v is not None for r in rows for v in r["eval_marks"].values()):
        tables += "\nGreedy evaluation (eval.csv):\n\n" + markdown_table(rows, "eval_marks")
    sampled = [r for r in rows if any(v is not None for v in r.get("sampled_marks", {}).values())]
    if sampled:
        tables += "\nSampled-policy evaluation (eval.csv; EPyMARL's test mode):\n\n"
        tables += markdown_table(sampled, "sampled_marks")
    (RESULTS / f"{figure}.md").write_text(tables)
    print(tables)
    return rows


def pair_rows(figure, cfg, config, baseline_config, runs, metric, marks, total, tag=None):
    """One table row per run of a pair (``runs``: variant -> run folder)."""
    kwargs = cfg.shaping.kwargs
    rows = []
    for label, run_dir in runs.items():
        name = config if label == "YOLO-MARL" else Path(baseline_config).stem
        rows.append(
            {
                "figure": figure,
                "env": cfg.env.name,
                "algo": cfg.algo.name,
                "variant": label + (f" [{tag}]" if tag else ""),
                "config": f"{name}/{tag}" if tag else name,
                "bonus": f"r'={kwargs.reward}, p'={kwargs.penalty}" if label != "baseline" else "",
                "metric": metric,
                "marks": {str(m): value_at(run_dir, m, metric) for m in marks},
                "eval_marks": {
                    str(m): eval_value_at(run_dir, m, EVAL_METRIC[metric]) for m in marks
                },
                # the sampled policy's test episodes: EPyMARL's MAPPO tests this way, so
                # these are the figures comparable with the paper's Table 1
                "sampled_marks": {
                    str(m): eval_value_at(
                        run_dir, m, EVAL_METRIC[metric].replace("eval_", "eval_sampled_")
                    )
                    for m in marks
                },
                "env_steps": total,
                "seeds": int(cfg.num_seeds),
                **{
                    k: json.loads((run_dir / "summary.json").read_text()).get(k)
                    for k in ("wall_s", "commit")
                },
            }
        )
    return rows


def tagged_rows(figure: str, tag: str, only: str | None) -> list[dict]:
    """Rows of variants run by hand into ``runs/yolo/<config>/<tag>/`` (e.g. other
    settings for both runs of a pair; its baseline, if it has its own, in
    ``compare/<baseline>``): reported, never started; kept under
    ``experiments/results/yolo/<config>/<tag>/``."""
    from omegaconf import OmegaConf

    from jaxmarl_llm.config import resolve_config_path

    rows = []
    for config in FIGURES[figure]:
        out = ROOT / "runs" / "yolo" / config / tag
        if (only and only not in config) or not (out / "summary.json").exists():
            continue
        cfg = OmegaConf.load(out / "config.yaml")
        baseline_config = OmegaConf.load(resolve_config_path(config))
        baseline_config = baseline_config.compare_with[0]
        runs = {"YOLO-MARL": out}
        base_out = out / "compare" / Path(baseline_config).stem
        if (base_out / "summary.json").exists():
            runs["baseline"] = base_out
        total = int(json.loads((out / "summary.json").read_text())["env_steps"])
        marks = [m for m in MARKS if m <= total * 1.001] or [total]
        rows += pair_rows(figure, cfg, config, baseline_config, runs, "episode_return", marks,
                          total, tag)  # fmt: skip
        if len(runs) == 2:
            from jaxmarl_llm.plotting import plot_runs

            (RESULTS / config / tag).mkdir(parents=True, exist_ok=True)
            named = {f"{config} [{tag}]": out, f"{baseline_config} [{tag}]": base_out}
            plot_runs(named, RESULTS / config / tag / "comparison.png", title=cfg.env.name)
        for variant, run_dir in runs.items():
            dest = RESULTS / config / tag
            if variant == "baseline":
                dest = dest / "compare" / Path(baseline_config).stem
            dest.mkdir(parents=True, exist_ok=True)
            for name in ("summary.json", "config.yaml", "eval.csv", "curve.png"):
                if (run_dir / name).exists():
                    shutil.copy(run_dir / name, dest / name)
            for name in ("planning_function.py", "record.json"):
                if (run_dir / "yolo" / name).exists():
                    shutil.copy(run_dir / "yolo" / name, dest / name)
    return rows


def markdown_table(rows: list[dict], key: str = "marks") -> str:
    marks = sorted({int(m) for r in rows for m in r["marks"]})
    head = (
        "| env | algo | variant | "
        + " | ".join(f"{m / 1e6:.1f}M" for m in marks)
        + " | seeds | wall s |\n|---|---|---|"
        + "---|" * len(marks)
        + "---|---|\n"
    )
    fmt = lambda x: "" if x is None else f"{x:.2f}"
    lines = []
    for r in rows:
        cells = " | ".join(fmt(r[key].get(str(m))) for m in marks)
        variant = r["variant"] + (f" ({r['bonus']})" if r["bonus"] else "")
        lines.append(
            f"| {r['env']} | {r['algo']} | {variant} | {cells} | {r['seeds']} | {r['wall_s']:.0f} |"
        )
    return head + "\n".join(lines) + "\n"


def main(argv=None) -> int:
    p = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    p.add_argument("figure", choices=sorted(FIGURES))
    p.add_argument("--quiet", action="store_true", help="no progress bars")
    p.add_argument("--only", default=None, help="run only the configs whose name has this text")
    p.add_argument(
        "--tag",
        nargs="*",
        default=[],
        help="report (never run) the finished variants in runs/yolo/<config>/<TAG>/",
    )
    p.add_argument("overrides", nargs="*", help="key=value overrides for every run")
    args = p.parse_intermixed_args(argv)  # overrides may follow --only etc.
    # run_into names each run it trains at INFO on the jaxmarl_llm logger
    logging.basicConfig(format="%(message)s", stream=sys.stdout)
    logging.getLogger("jaxmarl_llm").setLevel(logging.INFO)
    run_figure(args.figure, args.overrides, args.quiet, args.only, args.tag)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

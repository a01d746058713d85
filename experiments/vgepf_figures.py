"""V-GEPF's experiments on the JAX football: win rates (Fig. 3, 12), radar statistics
(Fig. 4, 7) and the rho sweep (Fig. 11).

    python experiments/vgepf_figures.py counterattack  # V-GEPF vs MAPPO, IPPO, HAPPO, MAPPO-xT
    python experiments/vgepf_figures.py fig12_hard     # the appendix's budget: rho 1, 6.4M
                                                       # and its normalised, ball-location runs
    python experiments/vgepf_figures.py skills         # one fixed skill per run (Fig. 7)
    python experiments/vgepf_figures.py rho            # rho = 1, 0.5, 0.1 (Fig. 11)
    python experiments/vgepf_figures.py eleven_hard    # 11 vs 11 hard, V-GEPF vs the baselines

Each variant is one ``run.py`` run in ``runs/vgepf/<figure>/<variant>/``; a variant whose
config has ``compare_with`` trains those baselines with the same seeds and budget into
its ``compare/`` folder. A finished run is reused (delete its folder to rerun). Extra
``key=value`` arguments go to every run (e.g. ``algo.total_timesteps=500000``);
``--variant LABEL`` (repeatable) runs only those variants. The skills and rho figures
read their variants against the counterattack figure's V-GEPF (and MAPPO): its rows at
the same seeds and budget, its first env steps where it ran longer from the same start,
else runs of their own at the figure's budget (``shared_rows``).

Reported per method: the greedy evaluation's win rate and episode statistics (mean over
the evaluations in the last ``TAIL`` of training, then over seeds, with the seeds'
spread), the exploring policy's final win rate, and a radar chart of the statistics the
paper's Fig. 4 and 7 show, each axis scaled by the largest method's value. Results:
``experiments/results/vgepf/<figure>.{json,md}``, ``<figure>_radar.png`` and the runs'
``comparison.png`` curves.
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
RESULTS = ROOT / "experiments" / "results" / "vgepf"
TAIL = 0.2  # fraction of training whose greedy evaluations make a method's final numbers

# the radar's axes (the paper's Fig. 4 / 7): episode statistics of greedy play
RADAR = ("goals_scored", "shots", "shot_success", "passes", "pass_success", "possession", "spread")

# phi = 0.3 wherever the left team has the ball, 0 elsewhere (an xT grid file)
CONSTANT_GRID = ROOT / "experiments" / "vgepf_constant_potential.json"

# figure -> {variant label: (config, overrides)}; a config's compare_with runs beside it
FIGURES: dict[str, dict[str, tuple[str, list[str]]]] = {
    "counterattack": {"V-GEPF": ("vgepf_counterattack_easy", [])},
    # the appendix's counterattack runs: rho 1, 80 workers, 6.4M env steps, against MAPPO
    "fig12_easy": {"V-GEPF": ("vgepf_counterattack_easy_fig12", [])},
    "fig12_hard": {
        "V-GEPF": ("vgepf_counterattack_hard_fig12", []),
        # phi normalised per skill switch, as the paper's analysis of Fig. 5 does (sec. 5.3;
        # its eq. 2 trains on the raw cosine): training on it multiplies F by 1 / std(cos)
        "V-GEPF normalised": (
            "vgepf_counterattack_hard_fig12",
            ["shaping.kwargs.normalise=true", "compare_with=[]"],
        ),
        # the control: phi a constant (V-GEPF's mean raw cosine) while the team has the ball,
        # the same shaping without what the frame shows (the xT shaper on a constant grid)
        "constant potential": (
            "mappo_football_counterattack_hard_fig12",
            [
                "shaping.name=xt",
                "shaping.coef=1.0",
                f"shaping.kwargs={{grid: {CONSTANT_GRID}, opponent: zero, gamma: 0.995}}",
                "compare_with=[]",
            ],
        ),
        # the one skill whose potential rises as the team carries the ball toward the goal
        # (experiments/vgepf_potential_check.py), held for the whole run
        "V-GEPF ball location": (
            "vgepf_counterattack_hard_fig12",
            [
                "shaping.kwargs.skill=ball location",
                "shaping.kwargs.selection.selector=none",
                "compare_with=[]",
            ],
        ),
    },
    "skills": {
        name: (
            "vgepf_counterattack_easy",
            [
                f"shaping.kwargs.skill={name}",
                "shaping.kwargs.selection.selector=none",
                "compare_with=[]",
            ],
        )  # fmt: skip
        for name in (
            "encourage attack",
            "encourage defense",
            "encourage dribbling",
            "correct formation",
        )  # fmt: skip
    },
    "rho": {
        f"rho={rho}": ("vgepf_counterattack_easy", [f"shaping.coef={rho}", "compare_with=[]"])
        for rho in (1.0, 0.1)
    },
    "eleven_hard": {"V-GEPF": ("vgepf_11v11_hard", [])},
}
# figures whose adaptive V-GEPF and MAPPO rows are those of the counterattack figure (the
# same config, seeds and budget), not trained again; at another budget they are trained
# with the figure's seeds and budget into runs/vgepf/reference/<seeds>x<steps>/
SHARED_ROWS = {"skills": ("V-GEPF", "MAPPO"), "rho": ("V-GEPF",)}
REFERENCES = {
    "V-GEPF": ("vgepf_counterattack_easy", ["compare_with=[]"]),
    "MAPPO": ("mappo_football_counterattack_easy", ["compare_with=[]"]),
}
# the statistic each fixed skill should raise, as the paper reads Fig. 7
SKILL_TARGETS = {
    "encourage attack": ("shots", "shot_success"),
    "encourage defense": ("goals_conceded",),
    "encourage dribbling": ("passes", "pass_success"),
    "correct formation": ("spread",),
}


def _load(path: Path, upto: int | None):
    """``load_metrics(path)`` with only the rows at ``upto`` env steps or fewer."""
    from jaxmarl_llm.plotting import load_metrics

    header, data = load_metrics(path)
    if upto is not None:
        keep = data["env_steps"] <= upto
        data = data[keep]
    return header, data


def tail_means(run_dir: Path, metrics: list[str], upto: int | None = None) -> dict:
    """Per seed: the mean of each greedy-evaluation metric over the evaluations in the
    last ``TAIL`` of the run's env steps (of its first ``upto``)."""
    import numpy as np

    from jaxmarl_llm.plotting import seed_columns

    header, data = _load(run_dir / "eval.csv", upto)
    steps = data["env_steps"]
    rows = steps >= steps[-1] * (1 - TAIL)
    out = {}
    for metric in metrics:
        cols = seed_columns(header, metric)
        if not cols:
            continue
        values = np.stack([data[c][rows] for c in cols], 1)
        out[metric] = [float(v) for v in np.nanmean(values, 0)]
    return out


def training_tail(run_dir: Path, names: list[str], upto: int | None = None) -> dict:
    """Mean over seeds of each ``stat_<name>`` of the sampling policy's episodes, over the
    updates in the last ``TAIL`` of the run (of its first ``upto`` env steps;
    ``metrics.csv`` logs their seed mean)."""
    import numpy as np

    header, data = _load(run_dir / "metrics.csv", upto)
    steps = data["env_steps"]
    rows = steps >= steps[-1] * (1 - TAIL)
    return {n: float(np.nanmean(data[f"stat_{n}"][rows])) for n in names if f"stat_{n}" in header}


def method_row(label: str, run_dir: Path, upto: int | None = None) -> dict:
    """The figure's numbers of the run in ``run_dir``, or of its first ``upto`` env steps
    (then without the whole run's wall time, throughput and final win rate)."""
    import numpy as np

    from jaxmarl_llm.runner.records import training_wall_s

    summary = json.loads((run_dir / "summary.json").read_text())
    if upto is not None:
        summary = {
            "num_seeds": summary["num_seeds"],
            "env_steps": upto,
            "wall_s": None,
            "commit": summary.get("commit"),
        }
    stats = ["eval_win_rate", *(f"eval_stat_{s}" for s in (*RADAR, "goals_conceded"))]
    per_seed = tail_means(run_dir, stats, upto)
    return {
        "method": label,
        "run": str(run_dir.relative_to(ROOT)) if run_dir.is_relative_to(ROOT) else str(run_dir),
        "seeds": int(summary["num_seeds"]),
        "env_steps": int(summary["env_steps"]),
        "wall_s": None if upto is not None else training_wall_s(run_dir / "metrics.csv", summary),
        "commit": summary.get("commit"),
        "env_steps_per_s": summary.get("env_steps_per_s"),
        "train_win_rate": summary.get("final_win_rate_mean"),
        # the sampling policy's episodes during training (the greedy policy of a nearly
        # deterministic scenario plays almost the same episode every time)
        "train": training_tail(run_dir, ["win", *RADAR, "goals_conceded"], upto),
        "eval": {
            k.removeprefix("eval_stat_").removeprefix("eval_"): {
                "mean": float(np.mean(v)),
                "std": float(np.std(v)),
                "per_seed": v,
            }
            for k, v in per_seed.items()
        },
    }


def radar(rows: list[dict], out: Path, title: str, source: str = "train") -> Path:
    """Radar chart of the ``RADAR`` statistics of each row: ``source`` ``train`` (the
    sampling policy's episodes) or ``eval`` (greedy episodes)."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    import numpy as np

    value = lambda r, a: r["train"][a] if source == "train" else r["eval"][a]["mean"]
    axes = [a for a in RADAR if all(a in r[source] for r in rows)]
    values = np.array([[value(r, a) for a in axes] for r in rows])
    scale = np.where(values.max(0) > 0, values.max(0), 1.0)
    angles = np.linspace(0, 2 * np.pi, len(axes), endpoint=False)
    fig, ax = plt.subplots(figsize=(5.5, 5.5), dpi=120, subplot_kw={"polar": True})
    for r, v in zip(rows, values / scale, strict=True):
        ax.plot(np.append(angles, angles[0]), np.append(v, v[0]), label=r["method"])
        ax.fill(np.append(angles, angles[0]), np.append(v, v[0]), alpha=0.1)
    ax.set_xticks(angles)
    ax.set_xticklabels([a.replace("_", " ") for a in axes], fontsize="small")
    ax.set_yticks([0.25, 0.5, 0.75, 1.0])
    ax.set_yticklabels([])
    ax.set_title(title, fontsize="medium")
    ax.legend(loc="upper right", bbox_to_anchor=(1.3, 1.1), fontsize="small")
    fig.tight_layout()
    fig.savefig(out)
    plt.close(fig)
    return out


def markdown(rows: list[dict]) -> str:
    """Two tables: greedy evaluation (mean ± std over seeds) and the sampling policy."""

    def cell(r, key):
        s = r["eval"].get(key)
        return "" if s is None else f"{s['mean']:.2f} ± {s['std']:.2f}"

    keys = ["win", *RADAR, "goals_conceded"]
    train = "| method | " + " | ".join(k.replace("_", " ") for k in keys) + " |\n|---"
    train += "|---" * len(keys) + "|\n"
    train += "\n".join(
        f"| {r['method']} | " + " | ".join(f"{r['train'][k]:.2f}" if k in r["train"] else ""
                                           for k in keys)
        + " |"
        for r in rows
    )  # fmt: skip

    keys = ["win_rate", *RADAR, "goals_conceded"]
    head = "| method | " + " | ".join(k.replace("_", " ") for k in keys)
    head += " | train win | seeds | env steps | wall s |\n|---" + "|---" * (len(keys) + 4) + "|\n"
    train_win = lambda r: "" if r["train_win_rate"] is None else f"{r['train_win_rate']:.3f}"
    wall = lambda r: "" if r["wall_s"] is None else f"{r['wall_s']:.0f}"
    lines = [
        f"| {r['method']} | "
        + " | ".join(cell(r, k) for k in keys)
        + f" | {train_win(r)} | {r['seeds']} | {r['env_steps']:,} | {wall(r)} |"
        for r in rows
    ]
    return (
        f"Greedy evaluation (mean ± std over seeds of each seed's evaluations in the last "
        f"{TAIL:.0%} of training):\n\n" + head + "\n".join(lines) + "\n\n"
        f"Sampling policy's training episodes (mean over seeds, updates in the last "
        f"{TAIL:.0%}):\n\n" + train + "\n"
    )


def _slug(label: str) -> str:
    return label.replace(" ", "_").replace("=", "")


def run_figure(
    figure: str, overrides: list[str], quiet: bool, variants: list[str] | None = None
) -> list[dict]:
    from omegaconf import OmegaConf

    from jaxmarl_llm.runner import run_comparisons, run_into

    rows = []
    for label, (config, extra) in FIGURES[figure].items():
        if variants and label not in variants:
            continue
        out = ROOT / "runs" / "vgepf" / figure / _slug(label)
        run_into(config, [*extra, f"progress={not quiet}", *overrides], out, f"[{figure}] {label}")
        cfg = OmegaConf.load(out / "config.yaml")
        run_comparisons(cfg, out)
        rows.append(method_row(label, out))
        dest = RESULTS / figure / out.name
        copy_records(out, dest)
        for other in cfg.compare_with:
            name = Path(other).stem
            rows.append(method_row(baseline_label(name), out / "compare" / name))
            copy_records(out / "compare" / name, dest / "compare" / name)
        for record in ("vgepf/selections.json", "feedback.json"):
            if (out / record).exists():
                shutil.copy(out / record, dest / Path(record).name)
    if figure in SHARED_ROWS:
        rows = shared_rows(figure, rows, OmegaConf.load(out / "config.yaml"), overrides, quiet)
    elif variants:  # the tables keep the variants that ran before, from their records
        rows = report_rows(figure)
    return write_figure(figure, rows)


def report_rows(figure: str) -> list[dict]:
    """The rows of ``figure``'s finished variants (and the finished baselines in their
    ``compare/`` folders) from the records in ``experiments/results/vgepf/<figure>/``: the
    report without the runs folder."""
    rows = []
    for label in FIGURES[figure]:
        dest = RESULTS / figure / _slug(label)
        if not (dest / "summary.json").exists():
            continue
        rows.append(method_row(label, dest))
        compare = dest / "compare"
        for run in sorted(compare.iterdir()) if compare.is_dir() else []:
            if (run / "summary.json").exists():
                rows.append(method_row(baseline_label(run.name), run))
    if not rows:
        raise SystemExit(f"no finished {figure} records under {RESULTS / figure}")
    return rows


def write_figure(figure: str, rows: list[dict]) -> list[dict]:
    """``<figure>.json``, ``.md``, the radar chart and the win curves from the figure's
    rows."""
    RESULTS.mkdir(parents=True, exist_ok=True)
    (RESULTS / f"{figure}.json").write_text(json.dumps(rows, indent=2))
    radar(rows, RESULTS / f"{figure}_radar.png", f"{figure}: sampling policy, end of training")
    win_curves(rows, figure)
    table = markdown(rows)
    if figure == "skills":
        table += "\n" + skill_targets(rows)
    (RESULTS / f"{figure}.md").write_text(table)
    print(table)
    return rows


def win_curves(rows: list[dict], figure: str) -> None:
    """``<figure>_win.png`` (the sampling policy's win rate) and ``<figure>_test_win.png``
    (the greedy test win rate) of every row's run, mean and seeds' band."""
    from jaxmarl_llm.plotting import plot_runs

    runs = {row["method"]: ROOT / row["run"] for row in rows}
    plot_runs(runs, RESULTS / f"{figure}_win.png", "win_rate", f"{figure}: sampling win rate")
    plot_runs(
        runs, RESULTS / f"{figure}_test_win.png", "eval_win_rate", f"{figure}: greedy test win rate"
    )


# where the counterattack figure's records of each reference row are kept
SHARED_RECORDS = {
    "V-GEPF": Path("counterattack") / "V-GEPF",
    "MAPPO": Path("counterattack") / "V-GEPF" / "compare" / "mappo_football_counterattack_easy",
}


# the code a football run's numbers depend on: env, renderer, CLIP, shaping and learners
RUN_CODE = ("envs", "jaxmarl_llm/methods/vgepf", "jaxmarl_llm/vision", "jaxmarl_llm/learners",
            "jaxmarl_llm/shaping", "experiments/models/football_clip")  # fmt: skip


def same_code(record: Path) -> bool:
    """Whether the run recorded in ``record`` ran on the code of ``RUN_CODE`` as it is now
    (its summary's commit against the working tree; False where git cannot tell)."""
    from jaxmarl_llm.runner.provenance import unchanged_since

    summary = record / "summary.json"
    commit = json.loads(summary.read_text()).get("commit") if summary.exists() else None
    return unchanged_since(commit, RUN_CODE, ROOT)


def same_start(record: Path, cfg) -> bool:
    """Whether the run recorded in ``record`` started as a run of ``cfg`` with a smaller
    budget would: the same seed and seed count, no learning-rate annealing (nothing else
    in a run depends on its total budget) and, for V-GEPF, the same skill-selection
    period. Its first env steps are then that shorter run up to float rounding (a run
    retraced by later code or another XLA build drifts from the first update on)."""
    from omegaconf import OmegaConf

    if not (record / "config.yaml").exists() or not same_code(record):
        return False
    old = OmegaConf.load(record / "config.yaml")
    every = lambda c: OmegaConf.select(c, "shaping.kwargs.selection.every")
    return (
        old.seed == cfg.seed
        and old.num_seeds == cfg.num_seeds
        and not old.algo.anneal_lr
        and not cfg.algo.anneal_lr
        and (old.shaping.name != "vgepf" or every(old) == every(cfg))
    )


def shared_rows(figure: str, rows: list[dict], cfg, overrides: list[str], quiet: bool) -> list:
    """``rows`` behind the figure's reference rows (``SHARED_ROWS``): the counterattack
    figure's where they ran on today's code (``same_code``) with the same seeds and env
    steps; where that run was longer but started the same (``same_start``), its first env
    steps, as the figure's budget would have trained them; else runs of ``REFERENCES`` with
    ``cfg``'s seeds and budget
    (``overrides`` go to the V-GEPF one too)."""
    want = {(r["seeds"], r["env_steps"]) for r in rows}
    ((seeds, steps),) = want
    shared = RESULTS / "counterattack.json"
    kept = []
    if shared.exists():
        kept = [r for r in json.loads(shared.read_text()) if r["method"] in SHARED_ROWS[figure]]
    records = {label: RESULTS / SHARED_RECORDS[label] for label in SHARED_ROWS[figure]}
    same = len(kept) == len(SHARED_ROWS[figure]) and all(map(same_code, records.values()))
    if not same or {(r["seeds"], r["env_steps"]) for r in kept} != want:
        longer = same and all(r["seeds"] == seeds and r["env_steps"] > steps for r in kept)
        if longer and all(same_start(records[label], cfg) for label in SHARED_ROWS[figure]):
            kept = [method_row(label, records[label], upto=steps) for label in SHARED_ROWS[figure]]
            for r in kept:
                r["first_steps_of"] = str(records[r["method"]].relative_to(ROOT))
        else:
            kept = trained_references(figure, cfg, overrides, quiet, want)
    for r in kept:
        if r["method"] == "V-GEPF" and figure == "rho":
            r["method"] = "rho=0.5 (V-GEPF)"
    return kept + rows


def trained_references(figure: str, cfg, overrides: list[str], quiet: bool, want: set) -> list:
    """The figure's reference rows trained with ``cfg``'s seeds and budget into
    ``runs/vgepf/reference/<seeds>x<steps>/``."""
    from jaxmarl_llm.runner import run_into

    budget = [
        f"num_seeds={cfg.num_seeds}",
        f"seed={cfg.seed}",
        f"algo.total_timesteps={cfg.algo.total_timesteps}",
        f"progress={not quiet}",
    ]
    root = ROOT / "runs" / "vgepf" / "reference" / f"{cfg.num_seeds}x{cfg.algo.total_timesteps}"
    kept = []
    for label in SHARED_ROWS[figure]:
        config, extra = REFERENCES[label]
        out = root / label
        given = [*extra, *overrides, *budget] if label == "V-GEPF" else [*extra, *budget]
        run_into(config, given, out, f"[{figure}] reference {label} -> {out}")
        row = method_row(label, out)
        if {(row["seeds"], row["env_steps"])} != want:
            raise SystemExit(
                f"{out} ran {row['seeds']} seeds x {row['env_steps']} steps, the figure "
                f"{want}: delete it to train it again"
            )
        copy_records(out, RESULTS / figure / "reference" / label)
        kept.append(row)
    return kept


def skill_targets(rows: list[dict]) -> str:
    """Fig. 7's reading: does each fixed skill raise its statistic (sampling policy)
    above MAPPO's?"""
    mappo = next((r for r in rows if r["method"] == "MAPPO"), None)
    if mappo is None:
        return ""
    lines = [
        "| fixed skill | statistic | with the skill | MAPPO | higher |",
        "|---|---|---|---|---|",
    ]
    for r in rows:
        for stat in SKILL_TARGETS.get(r["method"], ()):
            ours, base = r["train"].get(stat), mappo["train"].get(stat)
            if ours is None or base is None:
                continue
            higher = ours < base if stat == "goals_conceded" else ours > base
            lines.append(f"| {r['method']} | {stat} | {ours:.2f} | {base:.2f} | {higher} |")
    return "\n".join(lines) + "\n"


def copy_records(run_dir: Path, dest: Path) -> None:
    """A run's curves, summary, config and metrics files into the results folder."""
    dest.mkdir(parents=True, exist_ok=True)
    for name in ("comparison.png", "win_curve.png", "curve.png", "summary.json", "config.yaml",
                 "metrics.csv", "eval.csv"):  # fmt: skip
        if (run_dir / name).exists():
            shutil.copy(run_dir / name, dest / name)


def baseline_label(config_name: str) -> str:
    """``mappo_xt_counterattack_easy`` -> ``MAPPO-xT``; ``happo_football_...`` -> ``HAPPO``."""
    head = config_name.split("_football")[0].split("_counterattack")[0].split("_11v11")[0]
    return "-".join(p if p == "xT" else p.upper() for p in head.replace("xt", "xT").split("_"))


def main(argv=None) -> int:
    p = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    p.add_argument("figure", choices=sorted(FIGURES))
    p.add_argument("--quiet", action="store_true", help="no progress bars")
    p.add_argument(
        "--variant", action="append", metavar="LABEL", help="only this variant (repeatable)"
    )
    p.add_argument(
        "--report",
        action="store_true",
        help="write the figure's tables, radar and win curves from its records in "
        "experiments/results (the finished variants), training nothing",
    )
    p.add_argument("overrides", nargs="*", help="key=value overrides for every run")
    args = p.parse_intermixed_args(argv)
    logging.basicConfig(format="%(message)s", stream=sys.stdout)
    logging.getLogger("jaxmarl_llm").setLevel(logging.INFO)
    unknown = set(args.variant or ()) - set(FIGURES[args.figure])
    if unknown:
        p.error(f"no such {args.figure} variant: {sorted(unknown)}; {sorted(FIGURES[args.figure])}")
    if args.report:
        if args.figure in SHARED_ROWS:
            p.error(f"--report reads a figure's own records; {args.figure} shares rows")
        write_figure(args.figure, report_rows(args.figure))
        return 0
    run_figure(args.figure, args.overrides, args.quiet, args.variant)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

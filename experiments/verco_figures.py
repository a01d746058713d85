"""Verco's comparison on the salad kitchen (the paper's Fig. 4): episode return, episode
length and success against env steps, median and 25-75% band over seeds.

    python experiments/verco_figures.py a          # map A: one room
    python experiments/verco_figures.py b          # map B: separate rooms
    python experiments/verco_figures.py a --only-symbolic

Per map it trains (or reuses, or resumes) into ``runs/verco/<map>/``:

* ``lm/``: ``verco_salad_<map>``; ``lm/compare/verco_teacher_salad_<map>`` (Verco with
  the scripted teacher's own messages, the control for the student's),
  ``lm/compare/twosome_salad_<map>`` (TWOSOME, no messages) and
  ``lm/compare/lm_zero_shot_salad_<map>`` (the untrained language model), each with the
  same ``key=value`` arguments, seeds and env-step budget;
* ``ppo/`` and ``commnet/``: the symbolic baselines at their own budget (their first
  update alone takes more env steps than the language-model runs' whole budget).

Extra ``key=value`` arguments go to every language-model run. ``--stage N`` grows the
language-model runs' budgets together, N env steps at a time (each run extended by
``resume``), so a comparison stopped at any point shows every method at the same env
steps; the same command continues it. ``--zero-shot-steps`` caps the
untrained model's run, whose policy does not change with env steps. The x axis is
logarithmic so that both budgets show.

Results: ``experiments/results/verco/salad_<map>.{json,md,png}``, written after the
symbolic runs and again after every stage; each method's numbers are taken at the
language-model budget reached (for a symbolic baseline: its first logged update at or past
that budget, and its start, which is the random policy) and at the end of its run.
"""

from __future__ import annotations

import argparse
import json
import logging
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
RESULTS = ROOT / "experiments" / "results" / "verco"
RUNS = ROOT / "runs" / "verco"

METRICS = {"episode_return": "episode return", "episode_length": "episode length",
           "win_rate": "success rate", "entropy": "policy entropy"}  # fmt: skip
# method label -> (config name pattern, folder under runs/verco/<map>/)
LM_METHODS = {
    "Verco": ("verco_salad_{m}", "lm"),
    "Verco, teacher's messages": ("verco_teacher_salad_{m}", "lm/compare/verco_teacher_salad_{m}"),
    "TWOSOME": ("twosome_salad_{m}", "lm/compare/twosome_salad_{m}"),
    "LM zero-shot": ("lm_zero_shot_salad_{m}", "lm/compare/lm_zero_shot_salad_{m}"),
}
SYMBOLIC_METHODS = {
    "Symbolic PPO": ("ppo_salad_{m}", "ppo"),
    "CommNet": ("commnet_salad_{m}", "commnet"),
}


def seed_curves(run_dir: Path, metric: str):
    """``(env_steps [U], values [U, seeds])`` of ``metric`` in ``run_dir/metrics.csv``:
    its per-seed columns, or its seed-mean column for one seed."""
    import numpy as np

    from jaxmarl_llm.plotting import load_metrics, seed_columns

    header, data = load_metrics(run_dir / "metrics.csv")
    cols = seed_columns(header, metric) or ([metric] if metric in header else [])
    if not cols:
        raise KeyError(f"{run_dir / 'metrics.csv'} has no column {metric!r}")
    return data["env_steps"], np.stack([data[c] for c in cols], 1)


def quartiles(values):
    """Median and 25/75% over seeds per row, NaN-aware (a row where no episode ended)."""
    import warnings

    import numpy as np

    with warnings.catch_warnings():
        warnings.simplefilter("ignore", RuntimeWarning)  # a row where no seed has a value
        return tuple(np.nanpercentile(values, q, axis=1) for q in (50, 25, 75))


WINDOW = 1024  # env steps per seed that each reported value averages over


def windowed(steps, values, window: int = WINDOW):
    """Per row and seed, the mean of the values logged over the last ``window`` env steps
    up to that row, skipping rows where no episode ended (NaN). A language-model run logs
    every 64 env steps, where a 200-step episode seldom ends, so a single row is mostly
    NaN or one episode; a symbolic run's update (6,400 env steps) is its own window."""
    import warnings

    import numpy as np

    out = np.full(values.shape, np.nan)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", RuntimeWarning)  # a window where no episode ended
        for i, s in enumerate(steps):
            out[i] = np.nanmean(values[(steps > s - window) & (steps <= s)], axis=0)
    return out


def first_row_at(steps, step: float) -> int | None:
    """Index of the first logged row at or past ``step`` (None if the run ends before)."""
    import numpy as np

    rows = np.nonzero(steps >= step)[0]
    return int(rows[0]) if len(rows) else None


def seed_cell(per_seed, env_steps: int, **extra) -> dict:
    """Per-seed values with their median and quartiles, at ``env_steps``."""
    med, lo, hi = (float(x[0]) for x in quartiles(per_seed[None]))
    return {**extra, "env_steps": env_steps, "median": med, "q25": lo, "q75": hi,
            "per_seed": [float(v) for v in per_seed]}  # fmt: skip


def at_step(steps, values, step: float) -> dict | None:
    """The per-seed ``windowed`` values at the first logged row at or past ``step`` (None
    if the run ends before it), with their median and quartiles."""
    if (row := first_row_at(steps, step)) is None:
        return None
    return seed_cell(windowed(steps, values)[row], int(steps[row]))


def second_half(steps, values, budget: int) -> dict | None:
    """Per seed, the mean of the values logged after half of ``budget`` env steps up to the
    first row at or past it (rows where no episode ended skipped), with their median and
    quartiles; None if the run ends before ``budget``. Half a run's episodes rather than
    one window's few: a 1,024-step window ends about 5 episodes a seed."""
    import warnings

    import numpy as np

    if (row := first_row_at(steps, budget)) is None:
        return None
    end = int(steps[row])
    span = (steps > budget / 2) & (steps <= end)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", RuntimeWarning)  # a seed that ended no episode
        per_seed = np.nanmean(values[span], axis=0)
    return seed_cell(per_seed, end, env_steps_from=int(budget // 2))


def method_row(label: str, run_dir: Path, budget: int | None) -> dict:
    summary = json.loads((run_dir / "summary.json").read_text())
    row = {
        "method": label,
        "run": str(run_dir.relative_to(ROOT)) if run_dir.is_relative_to(ROOT) else str(run_dir),
        "seeds": int(summary["num_seeds"]),
        "env_steps": int(summary["env_steps"]),
        "wall_s": summary.get("wall_s"),
        "commit": summary.get("commit"),
    }
    for metric in METRICS:
        steps, values = seed_curves(run_dir, metric)
        row[metric] = {
            "start": at_step(steps, values, WINDOW),
            "at_lm_budget": None if budget is None else at_step(steps, values, budget),
            "second_half": None if budget is None else second_half(steps, values, budget),
            "final": at_step(steps, values, steps[-1]),
        }
    return row


def plot(runs: dict[str, Path], out: Path, title: str) -> Path:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, axes = plt.subplots(1, len(METRICS), figsize=(4.2 * len(METRICS), 3.6), dpi=120)
    for ax, (metric, ylabel) in zip(axes, METRICS.items(), strict=True):
        for label, run_dir in runs.items():
            steps, values = seed_curves(run_dir, metric)
            full = steps >= WINDOW  # a shorter window holds a few early episodes only
            med, lo, hi = (q[full] for q in quartiles(windowed(steps, values)))
            steps = steps[full]
            (line,) = ax.plot(steps, med, label=label, marker="." if len(steps) < 30 else None)
            ax.fill_between(steps, lo, hi, color=line.get_color(), alpha=0.2)
        ax.set_xscale("log")
        ax.set_xlabel("env steps")
        ax.set_ylabel(ylabel)
        ax.grid(alpha=0.3)
    axes[0].legend(fontsize="small")
    fig.suptitle(title, fontsize="medium")
    fig.tight_layout()
    fig.savefig(out)
    plt.close(fig)
    return out


def fmt(cell: dict | None) -> str:
    if cell is None:
        return "not reached"
    at = f"{cell['env_steps']:,}"
    if "env_steps_from" in cell:
        at = f"{cell['env_steps_from']:,}-{at}"
    return f"{cell['median']:.3f} [{cell['q25']:.3f}, {cell['q75']:.3f}] @ {at}"


def markdown(rows: list[dict], budget: int | None) -> str:
    lines = [
        f"Median [25%, 75%] over seeds @ env steps; each seed's value is the mean over the "
        f"episodes that ended in the {WINDOW:,} env steps up to that logged update (a "
        "symbolic update, 6,400 env steps, is its own window); 'start' is the first update at "
        f"or past {WINDOW:,} env steps"
        + (
            f", 'at LM budget' the first at or past {budget:,} (the language-model runs' "
            f"budget), 'second half' the mean of the values logged after {budget // 2:,} up "
            "to that update."
            if budget
            else "."
        ),
        "",
    ]
    for metric, name in METRICS.items():
        lines += [f"**{name}**", "",
                  "| method | seeds | start | at LM budget | second half | final |",
                  "|---|---|---|---|---|---|"]  # fmt: skip
        lines += [
            f"| {r['method']} | {r['seeds']} | {fmt(r[metric]['start'])} | "
            f"{fmt(r[metric]['at_lm_budget'])} | {fmt(r[metric]['second_half'])} | "
            f"{fmt(r[metric]['final'])} |"
            for r in rows
        ]
        lines.append("")
    lines.append(
        "Policy entropy is logged as the mean over a run's seeds (no spread): per agent step "
        "for the symbolic policies, per decision for the language-model ones (over the "
        "macro-actions available at it)."
    )
    return "\n".join(lines)


def started_budget(run_dir: Path) -> int | None:
    """The env-step budget the run in ``run_dir`` was started or extended to (None where no
    run was started): a comparison stopped during a stage finds its runs past the earlier
    stages, which a run cannot be shortened back to."""
    from jaxmarl_llm.runner import load_run_config

    if not (Path(run_dir) / "config.yaml").exists():
        return None
    return int(load_run_config(run_dir).algo.total_timesteps)


def stage_targets(budget: int, stage: int | None) -> list[int]:
    """The budgets every language-model run reaches in turn: ``stage``, ``2 * stage``, ...
    and ``budget`` (``[budget]`` alone without a stage)."""
    if stage is None or stage >= budget:
        return [budget]
    return [*range(stage, budget, stage), budget]


def write_report(m: str, runs: dict[str, Path], budget: int | None) -> None:
    """The comparison's JSON, markdown table and plot from the runs' folders."""
    RESULTS.mkdir(parents=True, exist_ok=True)
    order = [*LM_METHODS, *SYMBOLIC_METHODS]
    runs = {k: runs[k] for k in order if k in runs}
    rows = [method_row(label, d, budget) for label, d in runs.items()]
    stem = RESULTS / f"salad_{m}"
    stem.with_suffix(".json").write_text(json.dumps({"lm_budget": budget, "rows": rows},
                                                    indent=1))  # fmt: skip
    stem.with_suffix(".md").write_text(markdown(rows, budget))
    plot(runs, stem.with_suffix(".png"), f"salad:{m.upper()} (median, 25-75% over seeds)")
    print(stem.with_suffix(".md").read_text())


def main(argv: list[str] | None = None) -> int:
    logging.basicConfig(format="%(message)s")
    logging.getLogger("jaxmarl_llm").setLevel(logging.INFO)
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("map", choices=["a", "b"])
    parser.add_argument("overrides", nargs="*", help="key=value for the language-model runs")
    parser.add_argument("--only-symbolic", action="store_true",
                        help="train and report the symbolic baselines only")  # fmt: skip
    parser.add_argument(
        "--symbolic-seeds", type=int, default=None,
        help="num_seeds of the symbolic runs (default: their config's)",
    )  # fmt: skip
    parser.add_argument(
        "--stage", type=int, default=None,
        help="grow the language-model runs together, this many env steps at a time",
    )  # fmt: skip
    parser.add_argument(
        "--zero-shot-steps", type=int, default=None,
        help="env steps of the untrained model's run (default: the language-model budget)",
    )  # fmt: skip
    args = parser.parse_args(argv)
    for flag in ("stage", "zero_shot_steps"):
        if (value := getattr(args, flag)) is not None and value <= 0:
            parser.error(f"--{flag.replace('_', '-')} must be > 0, got {value}")

    from jaxmarl_llm.config import load_config
    from jaxmarl_llm.runner import run_into

    m = args.map
    runs_root = RUNS / m
    algo = load_config(LM_METHODS["Verco"][0].format(m=m), args.overrides).algo
    budget, per_iteration = int(algo.total_timesteps), int(algo.num_envs) * int(algo.num_steps)
    if args.stage is not None and args.stage % per_iteration:
        parser.error(
            f"--stage {args.stage} is not a whole number of iterations "
            f"(algo.num_envs * algo.num_steps = {per_iteration} env steps)"
        )
    runs: dict[str, Path] = {}
    symbolic = [] if args.symbolic_seeds is None else [f"num_seeds={args.symbolic_seeds}"]
    for label, (config, folder) in SYMBOLIC_METHODS.items():
        run_into(config.format(m=m), symbolic, runs_root / folder)
        runs[label] = runs_root / folder
    if args.only_symbolic:
        write_report(m, runs, None)
        return 0
    zero_shot = min(budget, args.zero_shot_steps or budget)
    for target in stage_targets(budget, args.stage):
        passed = False  # a run began a later stage, so this stage's report was written
        for label, (config, folder) in LM_METHODS.items():
            steps = min(target, zero_shot) if label == "LM zero-shot" else target
            out = runs_root / folder.format(m=m)
            runs[label] = out
            if (started := started_budget(out)) is not None and started > steps:
                passed = True  # and the run cannot be shortened back to this stage
                continue
            overrides = [*args.overrides, "compare_with=[]", f"algo.total_timesteps={steps}"]
            run_into(config.format(m=m), overrides, out,
                     note=f"{label}: to {steps:,} env steps -> {out}")  # fmt: skip
        if not passed:
            write_report(m, runs, target)
    return 0


if __name__ == "__main__":
    sys.exit(main())

"""Learning-curve plots from a run's ``metrics.csv``."""

from __future__ import annotations

from pathlib import Path

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402
import numpy as np  # noqa: E402


def seed_columns(header: list[str], metric: str) -> list[str]:
    return [c for c in header if c.startswith(f"{metric}/seed")]


def plot_curves(
    runs: dict[str, tuple[np.ndarray, np.ndarray]],
    out_path: str | Path,
    ylabel: str = "episode return",
    title: str = "",
) -> Path:
    """One line per run: mean over seeds with a min-max band.

    ``runs`` maps a label to ``(env_steps [U], values [U, seeds])``; NaN entries (no
    episode ended in that update) are skipped.
    """
    fig, ax = plt.subplots(figsize=(6.4, 4.0), dpi=120)
    for label, (steps, values) in runs.items():
        values = np.atleast_2d(np.asarray(values, float).T).T if values.ndim == 1 else values
        ok = ~np.all(np.isnan(values), axis=1)
        if not ok.any():
            continue
        x, v = steps[ok], values[ok]
        mean = np.nanmean(v, axis=1)
        ax.plot(x, mean, label=f"{label} ({v.shape[1]} seeds)" if v.shape[1] > 1 else label)
        if v.shape[1] > 1:
            ax.fill_between(x, np.nanmin(v, axis=1), np.nanmax(v, axis=1), alpha=0.2)
    ax.set_xlabel("env steps")
    ax.set_ylabel(ylabel)
    if title:
        ax.set_title(title)
    ax.grid(alpha=0.3)
    if runs:
        ax.legend(loc="best", fontsize="small")
    fig.tight_layout()
    out_path = Path(out_path)
    fig.savefig(out_path)
    plt.close(fig)
    return out_path


def load_metrics(csv_path: str | Path) -> tuple[list[str], np.ndarray]:
    data = np.genfromtxt(csv_path, delimiter=",", names=True, dtype=float, deletechars="")
    data = np.atleast_1d(data)
    return list(data.dtype.names), data


def plot_run(
    run_dir: str | Path, metric: str = "episode_return", filename: str = "curve.png"
) -> Path | None:
    """``filename`` in a run folder: ``metric`` per seed against env steps, and the
    greedy evaluations of ``eval.csv`` where the run has them."""
    run_dir = Path(run_dir)
    header, data = load_metrics(run_dir / "metrics.csv")
    cols = seed_columns(header, metric)
    if not cols:
        return None
    values = np.stack([data[c] for c in cols], axis=1)
    label = run_dir.name
    runs = {label: (data["env_steps"], values)}
    eval_metric = {"episode_return": "eval_return", "win_rate": "eval_win_rate"}.get(metric)
    if eval_metric and (run_dir / "eval.csv").exists():
        header, evals = load_metrics(run_dir / "eval.csv")
        cols = seed_columns(header, eval_metric)
        if cols:
            runs[f"{label}, greedy evaluation"] = (
                evals["env_steps"],
                np.stack([evals[c] for c in cols], axis=1),
            )
    return plot_curves(runs, run_dir / filename, ylabel=metric.replace("_", " "), title=label)


def metrics_file(metric: str) -> str:
    """The run-folder CSV holding ``metric``: ``eval.csv`` for the greedy evaluations'
    ``eval_*`` metrics, ``metrics.csv`` for the rest."""
    return "eval.csv" if metric.startswith("eval_") else "metrics.csv"


def plot_runs(
    run_dirs: dict[str, str | Path | list[str | Path]],
    out_path: str | Path,
    metric: str = "episode_return",
    title="",
) -> Path:
    """Several run folders in one plot (e.g. a method against its baselines). A metric
    named ``eval_*`` (``eval_return``, ``eval_win_rate``) is read from each run's greedy
    evaluations, ``eval.csv``; any other from ``metrics.csv``. A label may name a list of
    folders (one config run several times with different ``seed``): their seeds are
    pooled into one line, at the env steps every folder logged. A run without the metric
    is left out of the plot."""
    source = metrics_file(metric)
    runs = {}
    for label, dirs in run_dirs.items():
        pooled = []
        for d in dirs if isinstance(dirs, list) else [dirs]:
            header, data = load_metrics(Path(d) / source)
            cols = seed_columns(header, metric)
            if cols:
                pooled.append((data["env_steps"], np.stack([data[c] for c in cols], axis=1)))
        if pooled:
            runs[label] = pool_seeds(pooled)
    return plot_curves(runs, out_path, ylabel=metric.replace("_", " "), title=title)


def pool_seeds(runs: list[tuple[np.ndarray, np.ndarray]]) -> tuple[np.ndarray, np.ndarray]:
    """``(env_steps [U], values [U, seeds])`` of several runs as one, side by side in the
    seed axis, at the env steps all of them have."""
    steps = runs[0][0]
    for other, _ in runs[1:]:
        steps = np.intersect1d(steps, other)
    if len(runs) > 1 and steps.size == 0:
        raise ValueError("the runs to pool have no env-step count in common")
    values = [v[np.searchsorted(s, steps)] for s, v in runs]
    return steps, np.concatenate(values, axis=1)

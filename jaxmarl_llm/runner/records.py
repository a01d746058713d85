"""What a run records: ``metrics.csv`` (one row per update), ``eval.csv`` (one row per
greedy evaluation), the same rows to wandb, and ``summary.json``."""

from __future__ import annotations

import csv
import json
import math
import time
from dataclasses import dataclass, field
from pathlib import Path

import jax
import numpy as np
from omegaconf import DictConfig, OmegaConf

from jaxmarl_llm.distributed import is_primary, write_text
from jaxmarl_llm.errors import ConfigError
from jaxmarl_llm.runner.provenance import code_commit

PER_SEED_METRICS = (
    "episode_return",
    "episode_length",
    "win_rate",
    "eval_return",
    "eval_win_rate",
    "eval_sampled_return",
    "eval_sampled_win_rate",
)
# and every episode statistic, of training (``stat_<name>``) and of evaluation
# (``eval_stat_<name>``, ``eval_sampled_stat_<name>``), for the spread over seeds that
# figures show
PER_SEED_PREFIXES = ("stat_", "eval_stat_", "eval_sampled_stat_")


class MetricsWriter:
    """Appends one CSV row per update; on resume, drops rows past the checkpoint. Only
    the run's primary process writes (``distributed.is_primary``)."""

    def __init__(self, path: Path, keep_updates: int | None):
        self.path = path
        self.header: list[str] | None = None
        self.last_kept: dict[str, str] = {}  # the last row a resumed run keeps
        self.writes = is_primary()
        if not self.writes:
            return
        if keep_updates is not None and path.exists():
            with path.open() as f:
                rows = list(csv.reader(f))
            if rows:
                self.header = rows[0]
                kept = [r for r in rows[1:] if int(r[0]) <= keep_updates]
                with path.open("w", newline="") as f:
                    csv.writer(f).writerows([self.header, *kept])
                self.last_kept = dict(zip(self.header, kept[-1], strict=True)) if kept else {}
        elif path.exists():
            path.unlink()

    def write(self, rows: list[dict]) -> None:
        if not rows or not self.writes:
            return
        if self.header is None:
            self.header = list(rows[0])
            with self.path.open("w", newline="") as f:
                csv.writer(f).writerow(self.header)
        with self.path.open("a", newline="") as f:
            w = csv.writer(f)
            for r in rows:
                w.writerow([_fmt(r.get(k, float("nan"))) for k in self.header])


def _fmt(x) -> str:
    if isinstance(x, (int, np.integer)):
        return str(int(x))
    return f"{float(x):.6g}"


def is_nan(v) -> bool:
    """Whether a row's value is a float NaN (an update in which no episode ended)."""
    return isinstance(v, float) and math.isnan(v)


def _mean_and_seeds(row: dict, key: str, values) -> None:
    """``row[key]``: the mean over seeds of ``values`` (NaN where every seed's is), and
    ``row[key/seedS]`` for the metrics logged per seed."""
    col = np.asarray(values, float)
    row[key] = float(np.nanmean(col)) if not np.all(np.isnan(col)) else float("nan")
    if key in PER_SEED_METRICS or key.startswith(PER_SEED_PREFIXES):
        for s, x in enumerate(col):
            row[f"{key}/seed{s}"] = float(x)


def metric_rows(
    metrics: dict, first_update: int, steps_per_update: int, wall_s: float, sps: float
) -> list[dict]:
    """Per-update rows from chunk metrics shaped ``[seeds, updates]``."""
    num_updates = next(iter(metrics.values())).shape[1]
    rows = []
    for u in range(num_updates):
        update = first_update + u + 1
        row = {
            "update": update,
            "env_steps": update * steps_per_update,
            "wall_s": wall_s,
            "steps_per_s": sps,
        }
        for k, v in metrics.items():
            _mean_and_seeds(row, k, v[:, u])
        rows.append(row)
    return rows


def eval_row(metrics: dict, updates_done: int, steps_per_update: int) -> dict:
    """One ``eval.csv`` row from evaluation metrics shaped ``[seeds]``."""
    row = {"update": updates_done, "env_steps": updates_done * steps_per_update}
    for k, v in metrics.items():
        _mean_and_seeds(row, k, v)
    return row


class _Wandb:
    def __init__(self, cfg: DictConfig, run_dir: Path):
        self.run = None
        mode = str(getattr(cfg.wandb.mode, "value", cfg.wandb.mode))
        if mode == "disabled" or not is_primary():
            return
        try:
            import wandb
        except ImportError as e:
            raise ConfigError(
                f"wandb.mode={mode} needs wandb: pip install 'jaxmarl_llm[wandb]'"
            ) from e
        self.run = wandb.init(
            project=cfg.wandb.project,
            entity=cfg.wandb.entity,
            name=cfg.name,
            mode=mode,
            dir=str(run_dir),
            tags=list(cfg.wandb.tags),
            config=OmegaConf.to_container(cfg, resolve=True),
            resume="allow",
            id=run_dir.name,
        )

    def log(self, rows: list[dict]) -> None:
        if self.run is not None:
            for r in rows:
                self.run.log(
                    {k: v for k, v in r.items() if not is_nan(v)}, step=int(r["env_steps"])
                )

    def finish(self) -> None:
        if self.run is not None:
            self.run.finish()


class RunLog:
    """Where a run's rows go: training rows to ``metrics.csv``, evaluation rows to
    ``eval.csv``, both to wandb. A resumed run (``resumed_at``, the update count of its
    checkpoint) first drops the rows logged past its checkpoint."""

    def __init__(self, cfg: DictConfig, run_dir: Path, resumed_at: int | None):
        self.metrics = MetricsWriter(run_dir / "metrics.csv", resumed_at)
        self.evals = MetricsWriter(run_dir / "eval.csv", resumed_at)
        self.wandb = _Wandb(cfg, run_dir)

    @property
    def wall_s_before(self) -> float:
        """The training wall time a resumed run's kept rows took (0 for a fresh run): its
        rows' and summary's ``wall_s`` go on from there."""
        return float(self.metrics.last_kept.get("wall_s", 0.0))

    def train(self, rows: list[dict]) -> None:
        self.metrics.write(rows)
        self.wandb.log(rows)

    def eval(self, row: dict) -> None:
        self.evals.write([row])
        self.wandb.log([row])

    def finish(self) -> None:
        self.wandb.finish()


def final_values(
    csv_path: Path, metric: str = "episode_return", fraction: float = 0.1
) -> np.ndarray:
    """Per-seed mean of ``metric`` over its last ``fraction`` of logged values.

    Updates in which no episode ended log NaN; they are skipped, so each seed averages
    its last ``ceil(fraction * rows)`` real values (at least one).
    """
    with csv_path.open() as f:
        rows = list(csv.DictReader(f))
    cols = [c for c in rows[0] if c.startswith(f"{metric}/seed")] if rows else []
    k = max(1, math.ceil(len(rows) * fraction))
    out = []
    for c in cols:
        vals = [float(r[c]) for r in rows if not math.isnan(float(r[c]))]
        out.append(float(np.mean(vals[-k:])) if vals else float("nan"))
    return np.array(out)


def training_wall_s(csv_path: Path, summary: dict) -> float:
    """A run's training wall time: its summary's ``wall_s``, or, where its ``metrics.csv``
    clock restarted at a resume (runs resumed before ``wall_s`` carried over), the sum of
    each stretch's last ``wall_s`` plus what the last process added after its last row."""
    if not csv_path.exists():
        return float(summary["wall_s"])
    with csv_path.open() as f:
        walls = [float(r["wall_s"]) for r in csv.DictReader(f) if r.get("wall_s")]
    ends = [a for a, b in zip(walls, walls[1:], strict=False) if b < a]  # stretches cut off
    return math.fsum(ends) + float(summary["wall_s"])


def final_eval(csv_path: Path) -> dict:
    """The last greedy evaluation of a run as summary fields (none without ``eval.csv``)."""
    if not csv_path.exists():
        return {}
    with csv_path.open() as f:
        rows = list(csv.DictReader(f))
    if not rows:
        return {}
    last = rows[-1]
    out = {"final_eval_env_steps": int(last["env_steps"])}
    for metric in ("eval_return", "eval_win_rate", "eval_sampled_return", "eval_sampled_win_rate"):
        seeds = [float(last[c]) for c in last if c.startswith(f"{metric}/seed")]
        if seeds:
            out[f"final_{metric}_mean"] = float(np.nanmean(seeds))
            out[f"final_{metric}_per_seed"] = seeds
    return out


@dataclass
class Timings:
    """Where a run's time went, for its summary: compiling, training chunks (``run_s``,
    over ``run_steps`` env steps per seed), feedback rounds and evaluations between
    chunks; ``wall0`` is when training started (for a resumed run, earlier by the wall
    time of the updates it kept, so ``wall_s`` counts the whole run; the other fields
    count this process)."""

    compile_s: float = 0.0
    wall0: float = field(default_factory=time.perf_counter)
    run_s: float = 0.0
    run_steps: int = 0
    feedback_s: float = 0.0
    eval_s: float = 0.0


def run_summary(cfg: DictConfig, run_dir: Path, env_steps: int, timings: Timings) -> dict:
    """``summary.json``'s fields for a run that trained ``env_steps`` env steps per seed:
    final return (and win rate, and greedy evaluation, where logged) per seed and over
    seeds, throughput and where the time went."""
    finals = final_values(run_dir / "metrics.csv")
    summary = {
        "name": cfg.name,
        "algo": cfg.algo.name,
        "env": cfg.env.name,
        "num_seeds": int(cfg.num_seeds),
        "final_return_mean": float(np.nanmean(finals)) if finals.size else None,
        "final_return_std": float(np.nanstd(finals)) if finals.size else None,
        "final_return_per_seed": [float(x) for x in finals],
        "env_steps": int(env_steps),
        "env_steps_per_seed": int(env_steps),
        "env_steps_all_seeds": int(env_steps * cfg.num_seeds),
        "wall_s": time.perf_counter() - timings.wall0 + timings.compile_s,
        "compile_s": timings.compile_s,
        "run_s": timings.run_s,
        "feedback_s": timings.feedback_s,  # online shaper refits between chunks (not in run_s)
        "eval_s": timings.eval_s,  # greedy evaluations between chunks (not in run_s)
        # all seeds together; per-seed throughput is this divided by num_seeds
        "env_steps_per_s": (
            timings.run_steps * cfg.num_seeds / timings.run_s if timings.run_s else None
        ),
        "device": str(jax.devices()[0]),
        "commit": code_commit(),
    }
    wins = final_values(run_dir / "metrics.csv", "win_rate")
    if wins.size:
        summary["final_win_rate_mean"] = float(np.nanmean(wins))
        summary["final_win_rate_per_seed"] = [float(x) for x in wins]
    summary.update(final_eval(run_dir / "eval.csv"))
    return summary


def write_summary(run_dir: Path, summary: dict) -> None:
    write_text(run_dir / "summary.json", json.dumps(summary, indent=2))

"""``run_experiment``: a run and then its ``compare_with`` baselines, trained with its
seeds and budget; runs by folder (``run_into``): reuse a finished run, resume a stopped
one, else start it. A run's comparisons are runs, so the three call each other."""

from __future__ import annotations

import json
import logging
from collections.abc import Callable
from pathlib import Path
from typing import Any

import jax
from omegaconf import DictConfig

from jaxmarl_llm.config import load_config
from jaxmarl_llm.distributed import is_primary
from jaxmarl_llm.errors import ConfigError
from jaxmarl_llm.learners import algo_spec
from jaxmarl_llm.plotting import plot_runs
from jaxmarl_llm.runner.host_loop import train_on_host
from jaxmarl_llm.runner.loop import RunResult, train_in_chunks
from jaxmarl_llm.runner.records import write_summary
from jaxmarl_llm.runner.resume import load_run_config, resolve_resume

log = logging.getLogger(__name__)


def run_experiment(
    cfg: DictConfig,
    on_chunk: Callable[[int, Any, list[dict]], None] | None = None,
) -> RunResult:
    """Train ``cfg`` to completion (or continue ``cfg.resume``), write the run folder and
    train its comparisons. A jitted ``Learner`` trains in chunks (``train_in_chunks``), an
    algorithm that trains on the host iteration by iteration (``train_on_host``).

    ``on_chunk(updates_done, state, rows)`` is called after each chunk (or host
    iteration) is logged and checkpointed (tests use it to interrupt a run).
    """
    host_loop = algo_spec(cfg.algo.name).host_loop
    if host_loop and jax.process_count() > 1:
        raise ConfigError(
            f"algo.name={cfg.algo.name} trains on the host in one process; this run has "
            f"{jax.process_count()}"
        )
    cfg, extended_from = resolve_resume(cfg)
    train = train_on_host if host_loop else train_in_chunks
    result = train(cfg, extended_from, on_chunk)
    if cfg.compare_with:
        result.summary["compare"] = run_comparisons(cfg, result.run_dir)
        write_summary(result.run_dir, result.summary)
    return result


def finished_summary(config: str, overrides: list[str], out: Path) -> dict | None:
    """The summary of the run in ``out`` if it finished ``config`` with ``overrides``'
    budget (or a larger one), else None."""
    out = Path(out)
    if not (out / "summary.json").exists():
        return None
    wanted = load_config(config, overrides).algo.total_timesteps
    if wanted > load_run_config(out).algo.total_timesteps:
        return None
    return json.loads((out / "summary.json").read_text())


def run_into(config: str, overrides: list[str], out: Path, note: str | None = None) -> dict:
    """Run ``config`` (a name or YAML path) with ``overrides`` into ``out`` and return its
    summary: a finished run there is reused, a killed one resumed, else it starts.
    ``note`` is logged where a run trains."""
    out = Path(out)
    if (summary := finished_summary(config, overrides, out)) is not None:
        return summary
    # a finished run with a smaller budget than asked for is extended (resume) below
    ckpt = out / "checkpoints"
    where = f"resume={out}" if ckpt.exists() and any(ckpt.iterdir()) else f"out_dir={out}"
    if note:
        log.info(note)
    return run_experiment(load_config(config, [*overrides, where])).summary


def run_comparisons(cfg: DictConfig, run_dir: Path) -> dict[str, dict]:
    """Run (or resume, or reuse) each of ``cfg.compare_with`` with this run's seeds and
    env-step budget."""
    dirs = {cfg.name: run_dir}
    finals = {}
    for other in cfg.compare_with:
        out = run_dir / "compare" / Path(other).stem
        overrides = [
            f"num_seeds={cfg.num_seeds}",
            f"seed={cfg.seed}",
            f"algo.total_timesteps={cfg.algo.total_timesteps}",
            f"progress={cfg.progress}",
            f"plot={cfg.plot}",
            "compare_with=[]",
        ]
        summary = run_into(other, overrides, out, f"comparison: {other} -> {out}")
        dirs[summary["name"]] = out
        finals[str(other)] = {
            k: summary.get(k)
            for k in ("name", "algo", "final_return_mean", "final_return_std", "env_steps")
        }
    if cfg.plot and is_primary():
        plot_runs(dirs, run_dir / "comparison.png", title=f"{cfg.env.name}")
    return finals

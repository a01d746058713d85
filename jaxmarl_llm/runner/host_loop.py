"""``train_on_host``: the runner's loop for an algorithm that trains on the host
(``AlgoSpec.host_loop``), driving its ``HostTrainer`` one iteration of every seed at a
time. The run folder is the chunked loop's: one metrics.csv row per iteration (an
iteration is the run's update), a checkpoint of every seed's state every
``checkpoint_every`` iterations and at the end, summary.json with the trainer's own
fields, curves; ``resume=RUN_DIR`` continues from the latest checkpoint."""

from __future__ import annotations

import logging
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
from omegaconf import DictConfig

from jaxmarl_llm.config import to_yaml
from jaxmarl_llm.distributed import write_text
from jaxmarl_llm.errors import ConfigError
from jaxmarl_llm.learners import algo_spec
from jaxmarl_llm.plotting import plot_run
from jaxmarl_llm.runner.checkpoint import checkpoint_manager, restore_latest, save_checkpoint
from jaxmarl_llm.runner.host_trainer import HostTrainer
from jaxmarl_llm.runner.loop import RunResult
from jaxmarl_llm.runner.progress import Progress
from jaxmarl_llm.runner.records import RunLog, Timings, metric_rows, run_summary, write_summary
from jaxmarl_llm.runner.resume import new_run_dir

log = logging.getLogger(__name__)


def make_host_trainer(cfg: DictConfig) -> HostTrainer:
    """The trainer of ``cfg``'s algorithm; refuses what the host loop cannot run."""
    if cfg.eval.every:
        raise ConfigError(
            f"config key 'eval.every' is {cfg.eval.every}, but algo.name={cfg.algo.name} has no "
            "greedy evaluation between iterations: its metrics are the rollouts' episodes "
            "(lm_zero_shot is the untrained model's); set eval.every=0"
        )
    return algo_spec(cfg.algo.name).load().make_trainer(cfg)


def train_on_host(
    cfg: DictConfig,
    extended_from: int | None,
    on_chunk: Callable[[int, Any, list[dict]], None] | None = None,
    trainer: HostTrainer | None = None,
) -> RunResult:
    """Train ``cfg`` (resolved by ``resolve_resume``; ``extended_from``: the budget it
    extends) to completion and write the run folder; ``RunResult.state`` is the list of
    every seed's state.

    ``on_chunk(iterations_done, states, rows)`` is called after each iteration is logged
    and checkpointed; ``trainer`` replaces the one ``cfg`` builds.
    """
    # a model that does not load stops the run before its folder is written
    trainer = trainer or make_host_trainer(cfg)
    run_dir = Path(cfg.resume) if cfg.resume else new_run_dir(cfg)
    seeds = int(cfg.num_seeds)
    steps = trainer.steps_per_iteration
    timings = Timings()
    t0 = time.perf_counter()
    states = [trainer.init(s) for s in range(seeds)]
    mgr = checkpoint_manager(run_dir / "checkpoints", max_to_keep=cfg.keep_checkpoints, create=True)
    done = 0
    if cfg.resume:
        tree, done = restore_latest(mgr, trainer.checkpoint_tree(states), run_dir)
        states = trainer.from_checkpoint(tree)
        if extended_from is not None:
            write_text(run_dir / "config.yaml", to_yaml(cfg))
            # unfinished again: a kill from here on must not leave the shorter run's
            # summary to be taken for this one's
            (run_dir / "summary.json").unlink(missing_ok=True)
    timings.compile_s = time.perf_counter() - t0
    records = RunLog(cfg, run_dir, resumed_at=done if cfg.resume else None)
    bar = Progress(cfg, trainer.iterations, steps, done)
    ran: list[list[dict]] = []  # [iteration][seed] metrics of this process's iterations
    try:
        while done < trainer.iterations:
            t_iter = time.perf_counter()
            per_seed = []
            for s in range(seeds):
                states[s], metrics = trainer.iteration(states[s], s, done)
                per_seed.append(metrics)
            dt = time.perf_counter() - t_iter
            done += 1
            timings.run_s += dt
            timings.run_steps += steps
            ran.append(per_seed)
            chunk = {k: np.array([[m[k]] for m in per_seed], float) for k in per_seed[0]}
            wall = time.perf_counter() - timings.wall0
            # the seeds run one after another: steps/s counts all of them
            rows = metric_rows(chunk, done - 1, steps, wall, steps * seeds / dt)
            records.train(rows)
            bar.update(1, rows, None)
            if done % int(cfg.checkpoint_every) == 0 or done == trainer.iterations:
                save_checkpoint(mgr, done, trainer.checkpoint_tree(states))
            if not cfg.progress:
                r = rows[-1]
                log.info(
                    "iteration %d/%d: return %.3g, win %.2f, %.1f steps/s",
                    done, trainer.iterations, r["episode_return"], r["win_rate"],
                    r["steps_per_s"],
                )  # fmt: skip
            if on_chunk is not None:
                on_chunk(done, states, rows)
    except BaseException:
        if done > 0 and done not in mgr.all_steps():
            save_checkpoint(mgr, done, trainer.checkpoint_tree(states))
            log.warning("saved a checkpoint at iteration %d: resume=%s", done, run_dir)
        raise
    finally:
        bar.close()
        mgr.wait_until_finished()
        mgr.close()
        records.finish()
    summary = run_summary(cfg, run_dir, done * steps, timings)
    summary["iterations"] = done
    summary |= trainer.summary(ran)
    write_summary(run_dir, summary)
    if cfg.plot:
        plot_run(run_dir)
        if summary.get("final_win_rate_mean") is not None:
            plot_run(run_dir, "win_rate", "win_curve.png")
    return RunResult(run_dir=run_dir, summary=summary, state=states)

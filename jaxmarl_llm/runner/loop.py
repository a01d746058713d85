"""``train_in_chunks``: build a run from its config, train it chunk by chunk (each chunk
one jitted, seed-vmapped ``lax.scan`` of ``log_every`` updates, sharded over the run's
device mesh), and between chunks log, evaluate, run feedback rounds and checkpoint on
the host."""

from __future__ import annotations

import json
import logging
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import jax
import orbax.checkpoint as ocp
from omegaconf import DictConfig

from jaxmarl_llm.config import to_yaml
from jaxmarl_llm.distributed import is_primary, primary_first, sync, write_text
from jaxmarl_llm.errors import ConfigError
from jaxmarl_llm.learners import make_learner
from jaxmarl_llm.learners.base import check_train_state
from jaxmarl_llm.plotting import plot_run
from jaxmarl_llm.runner.build import make_env, make_shaper_and_learner, seed_keys
from jaxmarl_llm.runner.checkpoint import checkpoint_manager, restore_latest, save_checkpoint
from jaxmarl_llm.runner.evaluation import eval_due, eval_keys, seed_evaluate
from jaxmarl_llm.runner.feedback import FeedbackRounds, check_feedback
from jaxmarl_llm.runner.mesh import ShardedLearner, make_run_mesh, to_host
from jaxmarl_llm.runner.progress import Progress
from jaxmarl_llm.runner.records import (
    RunLog,
    Timings,
    eval_row,
    metric_rows,
    run_summary,
    write_summary,
)
from jaxmarl_llm.runner.resume import chunk_lengths, new_run_dir

log = logging.getLogger(__name__)


@dataclass
class RunResult:
    run_dir: Path
    summary: dict
    state: Any = field(repr=False, default=None)


@dataclass
class _Run:
    """What the loop runs with: the resolved config and folder, the learner and the
    jitted functions (built once; ``chunk_fns`` by chunk length), the checkpoints."""

    cfg: DictConfig
    run_dir: Path
    learner: Any
    sharded: ShardedLearner  # the learner's functions on the run's mesh
    evaluate: Callable | None  # seed-vmapped greedy evaluation where ``eval.every`` > 0
    rounds: FeedbackRounds = field(init=False)  # the shaper's online feedback schedule
    mgr: ocp.CheckpointManager | None = None
    chunk_fns: dict[int, Any] = field(default_factory=dict)

    @property
    def steps_per_update(self) -> int:
        return self.learner.env_steps_per_update

    @property
    def total_updates(self) -> int:
        return self.learner.num_updates

    @property
    def chunk(self) -> int:
        return int(self.cfg.log_every)

    def chunk_fn(self, n: int):
        """``n`` updates of every seed in one jitted call, the input state donated."""
        if n not in self.chunk_fns:
            self.chunk_fns[n] = self.sharded.chunk(n)
        return self.chunk_fns[n]

    def place(self, state):
        """``state`` on the mesh as the compiled chunks take it (a feedback round's or
        hook's new shaper parameters come back on one device)."""
        shardings = self.sharded.state_shardings()
        return state if shardings is None else jax.device_put(state, shardings)

    def checkpoint_due(self, done_updates: int) -> bool:
        """Every ``checkpoint_every`` chunks, and at the end."""
        every = self.chunk * self.cfg.checkpoint_every
        return done_updates % every == 0 or done_updates >= self.total_updates

    def checkpoint(self, done_updates: int, state) -> None:
        save_checkpoint(self.mgr, done_updates, state)


def train_in_chunks(
    cfg: DictConfig,
    extended_from: int | None,
    on_chunk: Callable[[int, Any, list[dict]], None] | None = None,
) -> RunResult:
    """Train ``cfg`` (resolved by ``resolve_resume``; ``extended_from``: the budget it
    extends) to completion and write the run folder.

    ``on_chunk(updates_done, state, rows)`` is called after each chunk is logged and
    checkpointed.
    """
    # a bad env kwarg stops the run before its folder is written (the algo block was
    # checked when the config was built)
    env = make_env(cfg)
    run_dir = Path(cfg.resume) if cfg.resume else new_run_dir(cfg)
    run = _build(cfg, env, run_dir)
    state, done, compile_s = _start(run, extended_from)
    sync("run started")  # every process has read the run folder before it is rewritten
    records = RunLog(cfg, run_dir, resumed_at=done if cfg.resume else None)
    bar = Progress(cfg, run.total_updates, run.steps_per_update, done)
    timings = Timings(compile_s=compile_s, wall0=time.perf_counter() - records.wall_s_before)
    if extended_from is not None and done == extended_from // run.steps_per_update:
        state = _catch_up_round(run, state, done, timings)
    try:
        for n in chunk_lengths(done, run.total_updates, run.chunk):
            state, metrics, rows = _train_chunk(run, state, done, n, timings)
            done += n
            run.rounds.count_episodes(metrics)
            records.train(rows)
            row = _evaluate(run, state, done, timings)
            if row is not None:
                records.eval(row)
            bar.update(n, rows, row)
            state = run.rounds.hold_due(state, done, timings)
            state = run.rounds.after_chunk(state, done, metrics)
            if run.checkpoint_due(done):
                run.checkpoint(done, state)
            if on_chunk is not None:
                on_chunk(done, state, rows)
    except BaseException:
        _save_unsaved(run, state, done)
        raise
    finally:
        bar.close()
        run.mgr.wait_until_finished()
        run.mgr.close()
        records.finish()
    summary = _finish(run, done, timings)
    return RunResult(run_dir=run_dir, summary=summary, state=state)


def _build(cfg: DictConfig, env, run_dir: Path) -> _Run:
    """The shaper and learner of ``cfg`` and the host functions the loop calls; refuses
    feedback rounds the learner or chunking cannot host, and evaluation without a greedy
    policy, before anything is compiled."""
    with primary_first("shaper built"):
        shaper, learner = make_shaper_and_learner(cfg, env, run_dir)
    mesh = make_run_mesh(cfg.mesh, int(cfg.num_seeds))
    part = learner if mesh.data == 1 else make_learner(cfg.algo, env, shaper, mesh.shards)
    sharded = ShardedLearner(learner, part, mesh)
    feedback = shaper.feedback
    if feedback is not None and jax.process_count() > 1:
        raise ConfigError(
            f"shaping.name={cfg.shaping.name} refits the shaper from the policy's play as it "
            f"trains, which runs in one process; this run has {jax.process_count()}"
        )
    collect = None
    if feedback is not None and feedback.rounds:
        check_feedback(feedback, int(cfg.log_every), cfg.algo.name, int(cfg.algo.num_envs))
        collect = sharded.collect()
    run = _Run(cfg, run_dir, learner, sharded, seed_evaluate(cfg, env, learner))
    run.rounds = FeedbackRounds(
        cfg, run_dir, feedback, collect, run.place, run.total_updates, run.chunk
    )
    return run


MESH_FILE = "mesh.json"


def _check_mesh(run: _Run) -> None:
    """Record the run's mesh in its folder; a resumed run whose learner keeps state per
    data shard (a replay buffer each) must have the data axis it was saved with."""
    path = run.run_dir / MESH_FILE
    now = run.sharded.run_mesh.describe()
    if run.cfg.resume and path.exists():
        saved = json.loads(path.read_text())
        if run.learner.shard_local_state and saved["data_axis"] != now["data_axis"]:
            raise ConfigError(
                f"resume: {run.run_dir} was trained with its envs split over "
                f"{saved['data_axis']} devices and {run.cfg.algo.name} keeps a replay buffer "
                f"per device, so it resumes on {saved['data_axis']} only (now "
                f"{now['data_axis']}); set mesh.devices / mesh.seeds to match"
            )
        exact = saved.get("exact_shards", False), now.get("exact_shards", False)
        if run.learner.shard_local_state and exact[0] != exact[1]:
            raise ConfigError(
                f"resume: {run.run_dir} was trained with mesh.exact={str(exact[0]).lower()}, "
                f"and {run.cfg.algo.name}'s replay buffers are laid out by it (whole on every "
                "device where exact, a part each otherwise); set mesh.exact to match"
            )
    write_text(path, json.dumps(now, indent=2))


def _start(run: _Run, extended_from: int | None) -> tuple[Any, int, float]:
    """The state training starts from (initialised, or restored from a resumed run's
    latest checkpoint), its update count, and the seconds spent initialising and
    compiling: every chunk length the loop will use is compiled here, so that the timed
    loop measures training only."""
    cfg = run.cfg
    t_compile = time.perf_counter()
    _check_mesh(run)
    state = run.sharded.init()(run.sharded.place_keys(seed_keys(cfg)))
    check_train_state(state, cfg.algo.name)
    run.mgr = checkpoint_manager(
        run.run_dir / "checkpoints", max_to_keep=cfg.keep_checkpoints, create=True
    )
    done = 0
    if cfg.resume:
        state, done = restore_latest(run.mgr, state, run.run_dir)
        ended = extended_from is not None and done == extended_from // run.steps_per_update
        run.rounds.replay_episodes(done, ended)
        if extended_from is not None:
            write_text(run.run_dir / "config.yaml", to_yaml(cfg))
            # the run is unfinished again: a kill from here on must not leave the shorter
            # run's summary to be taken for this one's
            if is_primary():
                (run.run_dir / "summary.json").unlink(missing_ok=True)
    for n in set(chunk_lengths(done, run.total_updates, run.chunk)):
        run.chunk_fns[n] = run.chunk_fn(n).lower(state).compile()
    if run.evaluate is not None:
        run.evaluate = run.evaluate.lower(state, eval_keys(cfg, 0)).compile()
    return state, done, time.perf_counter() - t_compile


def _catch_up_round(run: _Run, state, done: int, timings: Timings):
    """An extended run resumed at its old budget's end: the feedback round due there was
    skipped as the run ended, so it runs now, and the checkpoint there (which predates
    it) is replaced, so that a kill before the next one resumes with the round held."""
    if run.rounds.due(done) is None:
        return state
    state = run.rounds.hold_due(state, done, timings)
    run.mgr.delete(done)
    run.checkpoint(done, state)
    return state


def _train_chunk(run: _Run, state, done: int, n: int, timings: Timings):
    """``n`` updates from ``done``: the new state, the chunk's metrics ``[seeds, n]`` on
    the host, and its rows for metrics.csv."""
    t0 = time.perf_counter()
    state, metrics = run.chunk_fn(n)(state)
    metrics = to_host(metrics)
    dt = time.perf_counter() - t0
    timings.run_s += dt
    timings.run_steps += n * run.steps_per_update
    sps = n * run.steps_per_update / dt
    wall_s = time.perf_counter() - timings.wall0
    rows = metric_rows(metrics, done, run.steps_per_update, wall_s, sps)
    return state, metrics, rows


def _evaluate(run: _Run, state, done: int, timings: Timings) -> dict | None:
    """The eval.csv row of a greedy evaluation where one is due after ``done`` updates."""
    if run.evaluate is None or not eval_due(run.cfg, done, run.total_updates):
        return None
    t1 = time.perf_counter()
    metrics = to_host(run.evaluate(state, eval_keys(run.cfg, done)))
    row = eval_row(metrics, done, run.steps_per_update)
    timings.eval_s += time.perf_counter() - t1
    return row


def _save_unsaved(run: _Run, state, done: int) -> None:
    """On a failure between checkpoints (a backend error in a feedback round, Ctrl-C),
    keep the chunks finished since the last one; ``state`` is the last whole chunk's."""
    if done > 0 and done not in run.mgr.all_steps():
        run.checkpoint(done, state)
        # a warning, so that it shows whether or not the caller set up logging
        log.warning("saved a checkpoint at update %d: resume=%s", done, run.run_dir)


def _finish(run: _Run, done: int, timings: Timings) -> dict:
    """Write summary.json and the curves; the summary (on every process, from the
    primary's metrics.csv)."""
    cfg, run_dir = run.cfg, run.run_dir
    sync("run trained")
    summary = run_summary(cfg, run_dir, done * run.steps_per_update, timings)
    summary["mesh"] = run.sharded.run_mesh.describe()
    write_summary(run_dir, summary)
    if cfg.plot and is_primary():
        plot_run(run_dir)
        if "final_win_rate_mean" in summary:
            plot_run(run_dir, "win_rate", "win_curve.png")
    return summary

"""The runner's online feedback rounds (the ``Feedback`` protocol of
``shaping/feedback.py``): when a round is due, whether a run can host them, and running
one between chunks.

A round comes after every ``every`` updates or, where the feedback's ``every_episodes``
is set and ``every`` is None, each time another ``every_episodes`` training episodes per
seed have ended, up to ``rounds`` times. In a round each seed's current policy plays
``collect_steps`` steps (the learner's ``collect``), the feedback refits the shaper's
parameters from what it played, and the train state takes them; the shaper function
itself never changes, so nothing recompiles. After every chunk the feedback's optional
``after_chunk`` hook may set the parameters from the chunk's metrics.
"""

from __future__ import annotations

import csv
import json
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import jax
import numpy as np
from omegaconf import DictConfig

from jaxmarl_llm.distributed import write_text
from jaxmarl_llm.errors import ConfigError
from jaxmarl_llm.learners.registry import algo_spec, algorithms
from jaxmarl_llm.runner.records import Timings
from jaxmarl_llm.shaping.feedback import Feedback


def every_episodes(feedback: Feedback | None) -> int | None:
    """The feedback's cadence in training episodes, or None where it counts updates."""
    return None if feedback is None else getattr(feedback, "every_episodes", None)


def due_round(
    feedback: Feedback | None,
    updates_done: int,
    total_updates: int,
    episodes_done: float = 0.0,
    rounds_done: int = 0,
) -> int | None:
    """The index of the round due after ``updates_done`` updates, or None.

    By episodes, the next round (index ``rounds_done``) is due once ``episodes_done``
    (training episodes ended per seed, the mean over seeds) reaches ``rounds_done + 1``
    times ``every_episodes``; one round runs per chunk, so a chunk that passes two marks
    holds the second round at the next chunk's end."""
    if feedback is None or feedback.rounds == 0 or updates_done >= total_updates:
        return None
    if (episodes := every_episodes(feedback)) is not None:
        due = rounds_done < feedback.rounds and episodes_done >= (rounds_done + 1) * episodes
        return rounds_done if due else None
    if updates_done == 0 or updates_done % feedback.every:
        return None
    index = updates_done // feedback.every - 1
    return index if index < feedback.rounds else None


def rounds_by_episodes(
    feedback: Feedback, episodes_per_update: Sequence[float], chunk: int, total_updates: int
) -> list[int]:
    """The updates after which rounds run by episodes, given the episodes ended in each
    update (mean over seeds) and chunks of ``chunk`` updates from update 0: the schedule
    a run follows, and how a resumed run finds the rounds it already held."""
    at, episodes = [], 0.0
    for update, ended in enumerate(episodes_per_update, start=1):
        episodes += float(ended)
        chunk_end = update % chunk == 0 or update == total_updates
        if chunk_end and due_round(feedback, update, total_updates, episodes, len(at)) is not None:
            at.append(update)
    return at


def check_feedback(
    feedback: Feedback, log_every: int, algo: str, num_envs: int | None = None
) -> None:
    """Refuse a run whose learner or chunking cannot host the feedback rounds (and, where
    the feedback has a ``validate(num_envs)``, one whose rounds would collect too little),
    before anything is compiled or trained."""
    if not algo_spec(algo).collects:
        able = ", ".join(name for name, spec in algorithms().items() if spec.collects)
        raise ConfigError(
            f"bad value for config key 'algo.name': online feedback needs a learner that can "
            f"play its current policy; algo {algo!r} has no collect (use one of {able}, or "
            "set the shaper's online rounds to 0)"
        )
    if feedback.every is not None and feedback.every % log_every:
        raise ConfigError(
            f"bad value for config key 'log_every': {log_every} does not divide the "
            f"{feedback.every} updates between the shaper's online feedback rounds (rounds run "
            "between chunks)"
        )
    validate = getattr(feedback, "validate", None)
    if validate is not None and num_envs is not None:
        try:
            validate(num_envs)
        except ValueError as e:
            raise ConfigError(str(e)) from e


def feedback_round(
    cfg: DictConfig,
    feedback: Feedback,
    collect: Callable,
    state,
    round_index: int,
    run_dir: Path,
    note: dict | None = None,
):
    """Play each seed's policy, let ``feedback`` refit the shaper, put the result in the
    state; the round's report, with ``note`` (when the round came), goes to
    ``feedback.json`` (by round, so a resumed run that repeats a round replaces its
    entry)."""
    keys = jax.random.split(
        jax.random.fold_in(jax.random.PRNGKey(cfg.seed), 0xFEED + round_index), cfg.num_seeds
    )
    batch = collect(state, keys, int(feedback.collect_steps))
    params, report = feedback.refit(round_index, batch, state.shaper_params)
    state = state.replace(shaper_params=params)
    report = {**(note or {}), **report}
    path = run_dir / "feedback.json"
    rounds = json.loads(path.read_text()) if path.exists() else {}
    rounds[str(round_index)] = report
    write_text(path, json.dumps(rounds, indent=2))
    return state


@dataclass
class FeedbackRounds:
    """A run's feedback schedule between chunks: counts training episodes where rounds
    come by episodes, holds the round due after a chunk, calls ``after_chunk``. With no
    feedback (``feedback`` None) every step is a no-op."""

    cfg: DictConfig
    run_dir: Path
    feedback: Feedback | None
    collect: Callable | None  # seed-vmapped ``learner.collect`` where feedback has rounds
    place: Callable[[Any], Any]  # a state back on the run's mesh
    total_updates: int
    chunk: int  # updates per chunk
    episodes_done: float = 0.0  # by episodes: training episodes ended (mean over seeds)
    rounds_done: int = 0  # by episodes: rounds held

    @property
    def by_episodes(self) -> bool:
        return every_episodes(self.feedback) is not None

    def count_episodes(self, metrics: dict) -> None:
        """Add the chunk's ended training episodes (``metrics`` leaves ``[seeds, n]``)
        where rounds come by episodes."""
        if not self.by_episodes:
            return
        if "episodes" not in metrics:
            raise ValueError(
                "feedback by episodes needs the learner's 'episodes' metric; "
                f"{self.cfg.algo.name} does not log it"
            )
        self.episodes_done += float(np.asarray(metrics["episodes"], np.float64).sum(1).mean())

    def due(self, done_updates: int) -> int | None:
        return due_round(
            self.feedback, done_updates, self.total_updates, self.episodes_done, self.rounds_done
        )

    def hold_due(self, state, done_updates: int, timings: Timings):
        """``state`` after the round due at ``done_updates``, if one is."""
        round_index = self.due(done_updates)
        if round_index is None:
            return state
        t1 = time.perf_counter()
        note = None
        if self.by_episodes:
            note = {"update": done_updates, "episodes_done": self.episodes_done}
        state = feedback_round(
            self.cfg, self.feedback, self.collect, state, round_index, self.run_dir, note
        )
        state = self.place(state)
        self.rounds_done = round_index + 1
        timings.feedback_s += time.perf_counter() - t1
        return state

    def after_chunk(self, state, done_updates: int, metrics: dict):
        """``state`` with the shaper parameters the feedback's ``after_chunk`` hook sets
        from the chunk's metrics, where it has one."""
        after_chunk = getattr(self.feedback, "after_chunk", None)
        if after_chunk is None:
            return state
        params = after_chunk(done_updates, state.shaper_params, metrics)
        return self.place(state.replace(shaper_params=params))

    def replay_episodes(self, done_updates: int, budget_ended: bool) -> None:
        """A resumed run's episode count and rounds held by episodes, from ``metrics.csv``
        up to its checkpoint (``budget_ended``: where an extended run's first budget
        ended, which held no round)."""
        if not self.by_episodes or done_updates == 0:
            return
        with (self.run_dir / "metrics.csv").open() as f:
            rows = [r for r in csv.DictReader(f) if int(r["update"]) <= done_updates]
        ended = [float(r["episodes"]) for r in rows]
        if len(ended) != done_updates:
            raise ValueError(
                f"resuming rounds by episodes needs metrics.csv's {done_updates} rows up to the "
                f"checkpoint; {self.run_dir / 'metrics.csv'} has {len(ended)}"
            )
        self.episodes_done = sum(ended)
        total = done_updates if budget_ended else self.total_updates
        self.rounds_done = len(rounds_by_episodes(self.feedback, ended, self.chunk, total))

"""Online feedback: shaper parameters refitted between training chunks.

Methods whose reward model learns during training (iterative LCA, DPM) give their ``Shaper``
a ``feedback`` object. After every ``every`` updates (or, where the object's
``every_episodes`` is set and ``every`` is None, each time another ``every_episodes``
training episodes per seed have ended), up to ``rounds`` times, the runner plays each seed's
current policy for ``collect_steps`` steps (the learner's ``collect``), hands the
transitions and the current shaper parameters to ``refit`` on the host, where labels may
come from a language model, and puts the returned parameters into the train state. The
shaper function itself never changes, so nothing recompiles.

A feedback object may also have ``after_chunk(updates_done, params, metrics) -> params``,
called after every chunk (after any round) with the chunk's metrics (leaves ``[seeds,
updates]``), for parameters that follow a schedule (DPM's ``fade``); like ``refit`` it must
depend only on its inputs, so that a resumed run continues it.

``refit`` must be deterministic given its inputs and keep whatever it accumulates on disk
(indexed by round), because a resumed run calls it again from the last checkpoint.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, Protocol

from jaxmarl_llm.errors import ConfigError


class Feedback(Protocol):
    every: int | None  # updates between rounds (None: rounds by episodes, every_episodes)
    rounds: int  # rounds in a run (0: none)
    collect_steps: int  # policy steps per env collected for a round

    def refit(self, round_index: int, batch: Any, params: Any) -> tuple[Any, dict]:
        """New shaper parameters (leading seed axis, like ``params``) and a JSON-able
        report, from ``batch`` (a ``TransitionBatch`` with leaves ``[seeds, steps, envs,
        ...]``, every field filled)."""
        ...


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


def check_feedback(
    feedback: Feedback, log_every: int, algo: str, num_envs: int | None = None
) -> None:
    """Refuse a run whose learner or chunking cannot host the feedback rounds (and, where
    the feedback has a ``validate(num_envs)``, one whose rounds would collect too little),
    before anything is compiled or trained."""
    from jaxmarl_llm.learners.registry import algo_spec, algorithms

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

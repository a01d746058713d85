"""Online feedback: shaper parameters refitted between training chunks.

Methods whose reward model learns during training (iterative LCA, DPM, V-GEPF's skill
selection) give their ``Shaper`` a ``feedback`` object. The runner holds its rounds
(``runner/feedback.py``): after every ``every`` updates, or, where ``every_episodes`` is
set and ``every`` is None, each time another ``every_episodes`` training episodes per
seed have ended, up to ``rounds`` times, it plays each seed's current policy for
``collect_steps`` steps and hands the transitions and the current shaper parameters to
``refit`` on the host, where labels may come from a language model.

A feedback object may also have ``after_chunk(updates_done, params, metrics) -> params``,
called after every chunk (after any round) with the chunk's metrics (leaves ``[seeds,
updates]``), for parameters that follow a schedule (DPM's ``fade``); like ``refit`` it must
depend only on its inputs, so that a resumed run continues it.

``refit`` must be deterministic given its inputs and keep whatever it accumulates on disk
(indexed by round), because a resumed run calls it again from the last checkpoint.
"""

from __future__ import annotations

from typing import Any, Protocol


class Feedback(Protocol):
    every: int | None  # updates between rounds (None: rounds by episodes, every_episodes)
    rounds: int  # rounds in a run (0: none)
    collect_steps: int  # policy steps per env collected for a round

    def refit(self, round_index: int, batch: Any, params: Any) -> tuple[Any, dict]:
        """New shaper parameters (leading seed axis, like ``params``) and a JSON-able
        report, from ``batch`` (a ``TransitionBatch`` with leaves ``[seeds, steps, envs,
        ...]``, every field filled)."""
        ...

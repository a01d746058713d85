"""``HostTrainer``: what an algorithm that trains on the host (``AlgoSpec.host_loop``: a
language-model policy reading text between env steps) gives the runner, whose host loop
(``runner.host_loop``) then drives it as the chunked loop drives a jitted ``Learner``:
run folder, progress, metrics, checkpoints, resume, summary and comparisons.

The algorithm's module defines ``make_trainer(cfg) -> HostTrainer``. A run is
``iterations`` iterations of every seed in turn; each seed's state is a pytree of arrays
(or host objects that ``checkpoint_tree`` turns into arrays).
"""

from __future__ import annotations

from typing import Any, Protocol


class HostTrainer(Protocol):
    @property
    def steps_per_iteration(self) -> int:
        """Env steps of one seed in one iteration."""

    @property
    def iterations(self) -> int:
        """Iterations in the run's budget."""

    def init(self, seed_index: int) -> Any:
        """Seed ``seed_index``'s initial state."""

    def iteration(self, state: Any, seed_index: int, iteration: int) -> tuple[Any, dict]:
        """One iteration of one seed from ``state`` (``iteration`` iterations done): the
        new state and the seed's metrics, one float each (``episode_return``,
        ``win_rate``... and the algorithm's own)."""

    def checkpoint_tree(self, states: list) -> Any:
        """Every seed's state as one pytree of arrays, as checkpoints hold it."""

    def from_checkpoint(self, tree: Any) -> list:
        """Every seed's state back from ``checkpoint_tree``'s pytree."""

    def summary(self, metrics: list[list[dict]]) -> dict:
        """The algorithm's own summary.json fields from the metrics of the iterations
        this process ran (``[iteration][seed]``; a resumed run's since the resume)."""

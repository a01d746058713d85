"""Ask a backend, parse the answers, retry malformed ones, abstain, and make arrays.

The policy for a malformed answer (a :class:`ParseError`) is configurable: ask again up
to ``max_retries`` times with a fresh seed (and at least ``retry_temperature``, since a
greedy model would repeat itself), then abstain. Abstentions are counted and reported;
they become ``valid=False`` entries in the label arrays, never guesses.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Sequence
from typing import Any

import numpy as np

from jaxmarl_llm.lm.backend import Backend, Request
from jaxmarl_llm.lm.parsers import ParseError

_SEED_STRIDE = 1_000_003  # retries draw seeds far from any seed a caller uses for repeats


@dataclasses.dataclass(frozen=True)
class LabelingPolicy:
    max_retries: int = 2
    retry_temperature: float = 0.7

    def __post_init__(self):
        if self.max_retries < 0:
            raise ValueError(f"LabelingPolicy.max_retries must be >= 0, got {self.max_retries}")
        if self.retry_temperature < 0:
            raise ValueError(
                f"LabelingPolicy.retry_temperature must be >= 0, got {self.retry_temperature}"
            )


@dataclasses.dataclass
class LabelingReport:
    queries: int = 0
    answered: int = 0
    retried_queries: int = 0
    abstained: int = 0
    examples: list[ParseError] = dataclasses.field(default_factory=list)  # first few failures

    def as_dict(self) -> dict[str, Any]:
        return {
            "queries": self.queries,
            "answered": self.answered,
            "retried_queries": self.retried_queries,
            "abstained": self.abstained,
            "abstain_rate": self.abstained / max(self.queries, 1),
            "example_failures": [str(e) for e in self.examples],
        }


def retry_request(request: Request, attempt: int, policy: LabelingPolicy) -> Request:
    params = dataclasses.replace(
        request.params,
        seed=request.params.seed + attempt * _SEED_STRIDE,
        temperature=max(request.params.temperature, policy.retry_temperature),
    )
    return dataclasses.replace(request, params=params)


def ask(
    backend: Backend,
    requests: Sequence[Request],
    parse: Callable[[str], Any],
    policy: LabelingPolicy | None = None,
) -> tuple[list[Any | None], LabelingReport]:
    """Parsed answers in request order (``None`` = abstained) and a report."""
    policy = policy or LabelingPolicy()
    report = LabelingReport(queries=len(requests))
    values: list[Any | None] = [None] * len(requests)
    pending = list(range(len(requests)))
    for attempt in range(policy.max_retries + 1):
        if not pending:
            break
        if attempt == 1:
            report.retried_queries = len(pending)
        batch = [
            requests[i] if attempt == 0 else retry_request(requests[i], attempt, policy)
            for i in pending
        ]
        completions = backend.generate(batch)
        still = []
        for i, completion in zip(pending, completions, strict=True):
            try:
                values[i] = parse(completion.text)
            except ParseError as e:
                still.append(i)
                if len(report.examples) < 5:
                    report.examples.append(e)
        pending = still
    report.abstained = len(pending)
    report.answered = len(requests) - len(pending)
    return values, report


def choices_to_arrays(values: Sequence[float | None]) -> tuple[np.ndarray, np.ndarray]:
    """Parsed pair choices -> ``(label [P] float32 = P(first preferred), valid [P] bool)``."""
    valid = np.array([v is not None for v in values], bool)
    label = np.array([0.5 if v is None else v for v in values], np.float32)
    return label, valid


def repeated_choices_to_confidence(
    values: Sequence[Sequence[float | None]],
) -> tuple[np.ndarray, np.ndarray]:
    """``[P][Q]`` answers to the same pair -> ``(confidence [P], num_answers [P])``.

    Confidence is the mean label over answers given (LCA's multi-query aggregation), 0.5
    where every query abstained; the same rule as ``teachers.repeated_pair_preferences``.
    """
    label = np.array([[0.5 if v is None else v for v in row] for row in values], np.float32)
    valid = np.array([[v is not None for v in row] for row in values], bool)
    count = valid.sum(-1)
    confidence = np.where(count > 0, (label * valid).sum(-1) / np.maximum(count, 1), 0.5)
    return confidence.astype(np.float32), count.astype(np.int32)


def rankings_to_pair_arrays(
    ranks: Sequence[np.ndarray | None], num_agents: int
) -> tuple[np.ndarray, np.ndarray]:
    """Parsed agent rankings -> pair matrices ``label [S, N, N]`` (P(i above j)), ``valid``.

    The same layout as ``teachers.agent_rankings``: tied agents get 0.5, the diagonal and
    abstained steps are invalid.
    """
    s = len(ranks)
    label = np.full((s, num_agents, num_agents), 0.5, np.float32)
    valid = np.zeros((s, num_agents, num_agents), bool)
    off_diag = ~np.eye(num_agents, dtype=bool)
    for k, r in enumerate(ranks):
        if r is None:
            continue
        r = np.asarray(r)
        label[k] = np.where(
            r[:, None] < r[None, :], 1.0, np.where(r[:, None] > r[None, :], 0.0, 0.5)
        )
        valid[k] = off_diag
    return label, valid


def rank_pair(
    backend: Backend,
    prompts_ab: Sequence[str],
    prompts_ba: Sequence[str],
    choices: tuple[str, str] = ("1", "2"),
) -> np.ndarray:
    """P(item A preferred over item B) ``[P]`` from answer log-probabilities, both orders.

    For backends that can ``score`` (a local model, or a cached one). ``prompts_ab[i]``
    shows A first and asks for ``choices[0]`` (first better) or ``choices[1]``;
    ``prompts_ba[i]`` is the same question with the items swapped. With ``l_ab = log p(c0 |
    ab) - log p(c1 | ab)`` and ``l_ba`` likewise, a preference ``s`` for A plus a bias ``b``
    towards the first slot gives ``l_ab = s + b`` and ``l_ba = -s + b``, so
    ``sigmoid((l_ab - l_ba) / 2)`` cancels ``b`` exactly under that additive model, and is
    0.5 for a model that answers by position only. Small base models lean hard on position,
    which is why a single order is not used.
    """
    prompts_ab, prompts_ba = list(prompts_ab), list(prompts_ba)
    if len(prompts_ab) != len(prompts_ba):
        raise ValueError(
            f"rank_pair: {len(prompts_ab)} prompts in A-B order but {len(prompts_ba)} in B-A order"
        )
    n = len(prompts_ab)
    scores = np.asarray(
        backend.score(prompts_ab + prompts_ba, [list(choices)] * (2 * n)), np.float64
    )
    logit = scores[:, 0] - scores[:, 1]
    return 1.0 / (1.0 + np.exp(-(logit[:n] - logit[n:]) / 2.0))

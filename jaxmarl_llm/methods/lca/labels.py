"""Agent-specific rankings of sequential state pairs (LCA section 4.1).

For a transition ``(s, a, s')`` and each agent ``i`` the labeler answers whether ``s'``
is better than ``s`` from agent ``i``'s view (``i`` is the "ego", the others are
"teammates"). Answers become ``confidence[m, i] = P(s' preferred)`` (the mean over the
``num_queries`` answers given; eq. 3) and ``num_answers[m, i]``.

- ``heuristic_labels``: the env's ranking heuristic as a teacher, in arrays, with
  answers flipped at rate ``1 - accuracy`` (the paper's synthetic datasets, Fig. 4).
- ``backend_labels``: the same question as text (``prompts/lca_pair_ranking.txt``,
  filled by the env's describer) through any backend; the scripted backend answers from
  the heuristic values in the payload, language models from the text.
"""

from __future__ import annotations

import dataclasses
from typing import Any

import chex
import jax
import jax.numpy as jnp
import numpy as np
from tqdm.auto import tqdm

from envs.credit import CreditAssignmentEnv
from jaxmarl_llm.lm import templates
from jaxmarl_llm.lm.backend import Backend, Request, SamplingParams
from jaxmarl_llm.lm.labeling import (
    LabelingPolicy,
    LabelingReport,
    ask,
    rank_pair,
    repeated_choices_to_confidence,
)
from jaxmarl_llm.lm.teachers import TeacherNoise, repeated_pair_preferences
from jaxmarl_llm.methods.lca.answers import TeamGoal, parse_pair_choice
from jaxmarl_llm.methods.lca.pairs import both_states
from jaxmarl_llm.methods.lca.team_goal import goal_fields
from jaxmarl_llm.transitions import TransitionBatch

TEMPLATE = "lca_pair_ranking"


def heuristic_values(env: CreditAssignmentEnv, t: TransitionBatch) -> tuple[jax.Array, jax.Array]:
    """``(phi(s), phi(s'))``, ``[M, N]`` each."""
    return both_states(env.heuristic_potential, t)


def heuristic_labels(
    env: CreditAssignmentEnv,
    key: chex.PRNGKey,
    t: TransitionBatch,
    accuracy: float = 1.0,
    num_queries: int = 1,
) -> tuple[jax.Array, jax.Array]:
    """``(confidence, num_answers)`` ``[M, N]`` from the heuristic with flip noise."""
    phi, phi_next = heuristic_values(env, t)
    noise = TeacherNoise.with_accuracy(float(accuracy))
    return repeated_pair_preferences(key, phi_next, phi, noise, int(num_queries))


@dataclasses.dataclass(frozen=True)
class TextQuery:
    """How transitions are asked as text."""

    query_mode: str = "generate"  # generate | score
    num_queries: int = 1
    temperature: float = 0.0
    max_tokens: int = 16
    shuffle_order: bool = True
    chunk: int = 64  # requests per backend call (progress and persistence granularity)


def _state_at(states: Any, m: int) -> Any:
    return jax.tree.map(lambda x: x[m], states)


def pair_prompt(
    env: CreditAssignmentEnv,
    first: Any,
    second: Any,
    agent: int,
    context: Any,
    goal: TeamGoal | None = None,
) -> str:
    """The LCA ranking prompt for ``agent`` with ``first`` as State 1 (with ``goal``'s team
    target and key steps in place of the env's hand-written ones)."""
    ctx = env.prompt_context(context, agent) | goal_fields(goal)
    return templates.render(
        TEMPLATE,
        **ctx,
        state_1=env.describe(first, agent),
        state_2=env.describe(second, agent),
    )


def backend_labels(
    env: CreditAssignmentEnv,
    backend: Backend,
    t: TransitionBatch,
    query: TextQuery,
    seed: int = 0,
    policy: LabelingPolicy | None = None,
    progress: bool = True,
    goal: TeamGoal | None = None,
) -> tuple[np.ndarray, np.ndarray, LabelingReport]:
    """``(confidence, num_answers, report)`` for every (transition, agent), via text
    (``goal``: an inferred team goal for the prompts, else the env's written one)."""
    t_host = jax.device_get(t)
    phi, phi_next = (np.asarray(x) for x in jax.device_get(heuristic_values(env, t)))
    m, n = phi.shape
    rng = np.random.default_rng(seed)
    swapped = rng.random((m, n)) < 0.5 if query.shuffle_order else np.zeros((m, n), bool)
    prompts_first_s, prompts_first_next = [], []
    for i in range(m):
        s, s2 = _state_at(t_host.state, i), _state_at(t_host.next_state, i)
        for a in range(n):
            prompts_first_s.append(pair_prompt(env, s, s2, a, s, goal))
            if query.query_mode == "score" or swapped[i, a]:
                prompts_first_next.append(pair_prompt(env, s2, s, a, s, goal))
            else:
                prompts_first_next.append(None)
    report = LabelingReport()
    if query.query_mode == "score":
        conf = np.empty(m * n, np.float32)
        bar = tqdm(total=m * n, desc="LCA pairs (score)", disable=not progress)
        for lo in range(0, m * n, query.chunk):
            hi = min(lo + query.chunk, m * n)
            # P(s' preferred): s' is item A, shown first in prompts_first_next.
            conf[lo:hi] = rank_pair(backend, prompts_first_next[lo:hi], prompts_first_s[lo:hi])
            bar.update(hi - lo)
        bar.close()
        report.queries = report.answered = m * n
        return conf.reshape(m, n), np.ones((m, n), np.int32), report

    requests, flips = [], []
    for k in range(m * n):
        i, a = divmod(k, n)
        flip = bool(swapped[i, a])
        prompt = prompts_first_next[k] if flip else prompts_first_s[k]
        first, second = (phi_next[i, a], phi[i, a]) if flip else (phi[i, a], phi_next[i, a])
        for q in range(query.num_queries):
            params = SamplingParams(
                max_tokens=query.max_tokens, temperature=query.temperature, seed=seed + q
            )
            payload = {"value_a": float(first), "value_b": float(second)}
            requests.append(Request(prompt=prompt, params=params, payload=payload))
            flips.append(flip)
    values: list[float | None] = []
    bar = tqdm(total=len(requests), desc="LCA queries", disable=not progress)
    for lo in range(0, len(requests), query.chunk):
        part, part_report = ask(backend, requests[lo : lo + query.chunk], parse_pair_choice, policy)
        values.extend(part)
        _merge(report, part_report)
        bar.update(len(part))
    bar.close()
    # P(first shown preferred) -> P(s' preferred)
    later = [
        None if v is None else (v if f else 1.0 - v) for v, f in zip(values, flips, strict=True)
    ]
    rows = [later[k * query.num_queries : (k + 1) * query.num_queries] for k in range(m * n)]
    conf, count = repeated_choices_to_confidence(rows)
    return conf.reshape(m, n), count.reshape(m, n), report


def _merge(total: LabelingReport, part: LabelingReport) -> None:
    total.queries += part.queries
    total.answered += part.answered
    total.retried_queries += part.retried_queries
    total.abstained += part.abstained
    total.examples.extend(part.examples[: max(0, 5 - len(total.examples))])


def label_accuracy(confidence, num_answers, phi, phi_next) -> float:
    """Fraction of answered pairs with a strict heuristic preference that the labels get right."""
    confidence, phi, phi_next = (jnp.asarray(x) for x in (confidence, phi, phi_next))
    decided = (phi_next != phi) & (jnp.asarray(num_answers) > 0) & (confidence != 0.5)
    right = (confidence > 0.5) == (phi_next > phi)
    return float(jnp.where(decided, right, False).sum() / jnp.maximum(decided.sum(), 1))

"""Scripted teachers behind the text backend interface.

The vectorized teachers in :mod:`jaxmarl_llm.lm.teachers` label arrays directly (the
fast path: millions of labels per second). This backend gives the same teachers a
text face, so the whole query path (templates, label store, parsers, the HTTP server)
runs and is tested without a model: each request's ``payload`` holds the true values the
prompt was rendered from, and the teacher answers in the form the prompt asks for.
A skipped query is answered with an abstention the parsers reject, as a real model's
refusal would be.
"""

from __future__ import annotations

import hashlib
from collections.abc import Callable, Mapping, Sequence
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np

from jaxmarl_llm.lm.backend import Backend, Completion, Request, canonical_json
from jaxmarl_llm.lm.teachers import (
    TeacherNoise,
    agent_rankings,
    pair_preferences,
    ranks_from_pairs,
)

ABSTAIN_TEXT = "I cannot tell."

# answer(payloads, seeds) -> texts; seeds are one uint32 per request for its noise draw.
AnswerFn = Callable[[Sequence[Mapping[str, Any]], np.ndarray], list[str]]


def _request_seed(request: Request) -> int:
    # The noise draw depends on the query and its seed only, so answers are reproducible
    # and a retry with a new seed is a fresh draw.
    digest = hashlib.sha256(
        canonical_json([request.prompt, request.payload, request.params.seed]).encode()
    ).digest()
    return int.from_bytes(digest[:4], "little")


def _bucket(n: int) -> int:
    """Pad batches to powers of two (at least 64) so the jitted teacher compiles rarely."""
    return max(64, 1 << (n - 1).bit_length())


class ScriptedBackend(Backend):
    """A scripted teacher answering text queries from their payloads."""

    kind = "scripted"

    def __init__(self, name: str, answer: AnswerFn):
        self.model = name
        self._answer = answer

    def cache_identity(self, request: Request) -> dict[str, Any]:
        identity = super().cache_identity(request)
        identity["payload"] = request.payload
        return identity

    def generate(
        self,
        requests: Sequence[Request],
        on_result: Callable[[int, Completion], None] | None = None,
    ) -> list[Completion]:
        if not requests:
            return []
        missing = [i for i, r in enumerate(requests) if r.payload is None]
        if missing:
            raise ValueError(
                f"scripted teacher {self.model!r} needs request.payload (the true values the "
                f"prompt was rendered from); requests {missing[:5]} have none"
            )
        seeds = np.array([_request_seed(r) for r in requests], np.uint32)
        texts = self._answer([r.payload for r in requests], seeds)
        out = []
        for i, text in enumerate(texts):
            c = Completion(text=text, prompt_tokens=0, completion_tokens=0)
            out.append(c)
            if on_result is not None:
                on_result(i, c)
        return out


def _values(payloads: Sequence[Mapping[str, Any]], name: str) -> np.ndarray:
    try:
        return np.asarray([float(p[name]) for p in payloads], np.float32)
    except KeyError:
        raise ValueError(f"scripted teacher payload lacks {name!r}") from None


def pair_choice_teacher(noise: TeacherNoise | None = None, style: str = "digit") -> AnswerFn:
    """Answers pair queries (payload ``value_a``, ``value_b``) as "1"/"2"/"0" or "#1"/...

    ``style="digit"`` is LCA's answer form, ``"hash"`` DPM's.
    """
    noise = (noise or TeacherNoise()).validate()
    if style not in ("digit", "hash"):
        raise ValueError(f"unknown answer style {style!r}; valid: ['digit', 'hash']")
    prefix = "#" if style == "hash" else ""

    @jax.jit
    def labels(seeds, a, b):
        one = lambda s, x, y: pair_preferences(jax.random.PRNGKey(s), x, y, noise)
        return jax.vmap(one)(seeds, a, b)

    def answer(payloads, seeds):
        n = len(payloads)
        pad = (0, _bucket(n) - n)
        out = labels(
            np.pad(seeds, pad),
            np.pad(_values(payloads, "value_a"), pad),
            np.pad(_values(payloads, "value_b"), pad),
        )
        texts = []
        labels_, valids = np.asarray(out.label)[:n], np.asarray(out.valid)[:n]
        for label, valid in zip(labels_, valids, strict=True):
            if not valid:
                texts.append(ABSTAIN_TEXT)
            else:
                texts.append(prefix + {1.0: "1", 0.0: "2", 0.5: "0"}[float(label)])
        return texts

    return answer


def agent_ranking_teacher(
    write: Callable[[np.ndarray], str], noise: TeacherNoise | None = None
) -> AnswerFn:
    """Answers agent-ranking queries (payload ``scores``: one per agent) with
    ``write(ranks)``: the teacher's ranks ``[N]`` (0 = best, ties share a rank) in the
    answer form the method's prompt asks for."""
    noise = (noise or TeacherNoise()).validate()

    rank = jax.jit(lambda seed, scores: agent_rankings(jax.random.PRNGKey(seed), scores, noise))

    def answer(payloads, seeds):
        texts = []
        for payload, seed in zip(payloads, seeds, strict=True):
            pairs = rank(seed, jnp.asarray(payload["scores"], jnp.float32))
            if not bool(pairs.valid.any()):
                texts.append(ABSTAIN_TEXT)
                continue
            texts.append(write(np.asarray(ranks_from_pairs(pairs))))
        return texts

    return answer


def written_answer_teacher() -> AnswerFn:
    """Answers every query with its payload's ``answer`` text: a hand-written answer behind
    the text interface (LCA's written team goal and key steps)."""

    def answer(payloads, seeds):
        try:
            return [str(p["answer"]) for p in payloads]
        except KeyError:
            raise ValueError("scripted teacher payload lacks 'answer'") from None

    return answer

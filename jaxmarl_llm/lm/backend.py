"""One interface for every language/vision-model backend.

A backend answers *batches* of requests in two ways:

- ``generate(requests)``: free text, one :class:`Completion` per request;
- ``score(prompts, candidates)``: the log-probability of each candidate continuation of
  each prompt (used for rankings with a local model, where reading the next-token
  distribution is cheaper and more reliable than sampling text).

Backends never run inside jit: the method recipes call them on the host, and the
answers become arrays (``jaxmarl_llm.preferences``) before training. Every backend is
wrapped by :class:`jaxmarl_llm.lm.store.CachedBackend` so each query and answer is kept
on disk and a run can be replayed without the model.
"""

from __future__ import annotations

import abc
import dataclasses
import hashlib
import json
from collections.abc import Callable, Mapping, Sequence
from typing import Any

from jaxmarl_llm.errors import RunError


class BackendError(RunError, RuntimeError):
    """A backend could not answer (after its own retries); names the backend and cause."""


@dataclasses.dataclass(frozen=True)
class SamplingParams:
    """How to decode. ``temperature=0`` means greedy (deterministic)."""

    max_tokens: int = 256
    temperature: float = 0.0
    top_p: float = 1.0
    stop: tuple[str, ...] = ()
    seed: int = 0

    def __post_init__(self):
        if self.max_tokens < 1:
            raise ValueError(f"SamplingParams.max_tokens must be >= 1, got {self.max_tokens}")
        if self.temperature < 0:
            raise ValueError(f"SamplingParams.temperature must be >= 0, got {self.temperature}")
        if not 0 < self.top_p <= 1:
            raise ValueError(f"SamplingParams.top_p must be in (0, 1], got {self.top_p}")
        object.__setattr__(self, "stop", tuple(self.stop))

    def as_dict(self) -> dict[str, Any]:
        return dataclasses.asdict(self)


@dataclasses.dataclass(frozen=True)
class Request:
    """One free-text query.

    ``prompt`` is what a language model reads (the user turn for chat backends);
    ``system`` an optional system turn. ``payload`` is the structured ground truth the
    prompt was rendered from (JSON-serializable): scripted teachers answer from it,
    language models never see it.
    """

    prompt: str
    system: str = ""
    params: SamplingParams = SamplingParams()
    payload: Mapping[str, Any] | None = None
    # PNG files sent with the prompt to backends that read images (the HTTP backend's
    # ``image_url`` parts); text-only backends ignore them
    images: tuple[bytes, ...] = ()


@dataclasses.dataclass(frozen=True)
class Completion:
    """A backend's answer with token usage (0 where the backend does not count tokens)."""

    text: str
    prompt_tokens: int = 0
    completion_tokens: int = 0
    finish_reason: str = "stop"  # "stop" | "length"


class Backend(abc.ABC):
    """Base class: ``kind`` names the implementation, ``model`` the model it serves."""

    kind: str = "backend"
    model: str = ""

    @abc.abstractmethod
    def generate(
        self,
        requests: Sequence[Request],
        on_result: Callable[[int, Completion], None] | None = None,
    ) -> list[Completion]:
        """One completion per request, in order.

        ``on_result(index, completion)`` is called as each answer is ready (in any order),
        so a caller can persist answers before a later request fails.
        """

    def score(
        self, prompts: Sequence[str], candidates: Sequence[Sequence[str]]
    ) -> list[list[float]]:
        """``log p(candidate | prompt)`` summed over the candidate's tokens, per prompt."""
        raise NotImplementedError(f"backend {self.kind!r} cannot score candidate answers")

    def cache_identity(self, request: Request) -> dict[str, Any]:
        """What determines the answer, for the label store's key.

        Language models answer from the text and the sampling parameters only; scripted
        teachers override this to add the payload they read.
        """
        identity = {
            "kind": self.kind,
            "model": self.model,
            "system": request.system,
            "prompt": request.prompt,
            "params": request.params.as_dict(),
        }
        if request.images:  # only then, so text queries keep the keys they always had
            identity["images"] = [hashlib.sha256(png).hexdigest() for png in request.images]
        return identity

    def score_identity(self, prompt: str, candidates: Sequence[str]) -> dict[str, Any]:
        return {
            "kind": self.kind,
            "model": self.model,
            "score_prompt": prompt,
            "candidates": list(candidates),
        }

    def close(self) -> None:  # noqa: B027 - optional hook
        """Release connections/devices; default does nothing."""


def canonical_json(obj: Any) -> str:
    """Stable JSON text for hashing (sorted keys, no whitespace variation)."""
    return json.dumps(obj, sort_keys=True, separators=(",", ":"), ensure_ascii=False, default=str)

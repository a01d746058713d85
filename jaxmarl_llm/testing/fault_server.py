"""HTTP fault injection and an ``echo`` backend for the local OpenAI-compatible server.

    plan = FaultPlan([Fault("429", times=3, retry_after=0.1)])
    with serve(backend, faults=plan) as url:
        client = OpenAICompatibleBackend(url, model="x")

    python -m jaxmarl_llm.testing.fault_server --port 0 [--backend echo] [--faults 429*3,500,drop]

A :class:`FaultPlan` is the server's ``before_request`` hook: it runs before the backend is
asked and may answer instead of it. Fault kinds: HTTP error statuses (429 with
``Retry-After``, 500, 503, or any 4xx), ``slow`` (answer after ``delay_s``), ``drop``
(close the connection without a response), ``malformed`` (a 200 with a non-JSON body),
``bad_shape`` (a 200 with JSON lacking ``choices``) and ``truncated`` (a 200 whose body
stops halfway and the connection closes).
"""

from __future__ import annotations

import contextlib
import dataclasses
import json
import random
import threading
from collections.abc import Callable, Iterable, Iterator, Mapping
from typing import Any

from jaxmarl_llm.lm.backend import Backend, Completion
from jaxmarl_llm.lm.server import BACKENDS, LLMServer, RequestHandler, build_parser, run

NAMED_FAULTS = ("slow", "drop", "malformed", "bad_shape", "truncated")
RANDOM_FAULT_KINDS = ("429", "500", "503", "drop", "malformed", "truncated")


@dataclasses.dataclass(frozen=True)
class Fault:
    """One fault rule. ``kind``: an HTTP status ("429", 500, "404", ...) or one of
    ``slow``/``drop``/``malformed``/``bad_shape``/``truncated``. ``times``: how many
    matching requests it hits (None: all of them). ``path``: only requests whose path ends
    with it (e.g. "chat/completions"); ``match``: only request bodies it accepts.
    ``retry_after``: the header sent with a status fault (seconds; fractions allowed);
    ``delay_s``: how long ``slow`` waits before answering."""

    kind: str | int
    times: int | None = 1
    retry_after: float | None = None
    delay_s: float = 5.0
    message: str = ""
    path: str | None = None
    match: Callable[[Mapping[str, Any]], bool] | None = None

    def __post_init__(self):
        kind = str(self.kind)
        if kind not in NAMED_FAULTS and not (kind.isdigit() and 400 <= int(kind) <= 599):
            raise ValueError(f"unknown fault kind {self.kind!r}: an HTTP status or {NAMED_FAULTS}")
        object.__setattr__(self, "kind", kind)
        if self.times is not None and self.times < 1:
            raise ValueError(f"Fault.times must be >= 1 or None, got {self.times}")

    @property
    def status(self) -> int | None:
        return int(self.kind) if self.kind.isdigit() else None


def prompt_contains(text: str) -> Callable[[Mapping[str, Any]], bool]:
    """A ``Fault.match`` hitting requests whose prompt or messages contain ``text``."""

    def match(body: Mapping[str, Any]) -> bool:
        return text in json.dumps(body.get("messages", body.get("prompt", "")))

    return match


class FaultPlan:
    """An ordered list of fault rules, plus optional random faults (``rate``, seeded).

    Each request takes the first rule that matches it and has hits left; with none, a
    random fault fires with probability ``rate``. Thread-safe. ``injected`` lists
    ``(kind, path)`` of every fault fired, in order.
    """

    def __init__(
        self,
        faults: Iterable[Fault] = (),
        *,
        rate: float = 0.0,
        kinds: Iterable[str] = RANDOM_FAULT_KINDS,
        seed: int = 0,
        retry_after: float | None = 0.0,
    ):
        self._rules = [[fault, fault.times] for fault in faults]
        self.rate = float(rate)
        self._random_faults = [Fault(k, times=None, retry_after=retry_after) for k in kinds]
        self._rng = random.Random(seed)
        self._lock = threading.Lock()
        self.injected: list[tuple[str, str]] = []

    @classmethod
    def parse(cls, spec: str, **kwargs) -> FaultPlan:
        """``"429*3,500,slow:2.5,drop,429:1.0"``: kind[:arg][*times]; arg is Retry-After
        for statuses and the delay for ``slow``; ``*0`` means every request."""
        faults = []
        for item in filter(None, (part.strip() for part in spec.split(","))):
            item, _, times = item.partition("*")
            kind, _, arg = item.partition(":")
            count = int(times) if times else 1
            options: dict[str, Any] = {"times": count or None}
            if arg:
                options["delay_s" if kind == "slow" else "retry_after"] = float(arg)
            faults.append(Fault(kind, **options))
        return cls(faults, **kwargs)

    def add(self, kind: str | int, **options) -> FaultPlan:
        with self._lock:
            fault = Fault(kind, **options)
            self._rules.append([fault, fault.times])
        return self

    def pending(self) -> int:
        """Hits left on rules with a finite count."""
        with self._lock:
            return sum(left for _, left in self._rules if left is not None)

    def __call__(self, handler: RequestHandler, path: str, body: Mapping[str, Any]) -> bool:
        """The server's ``before_request`` hook: apply the fault this request takes, if
        any; True when the request is finished (no real answer)."""
        fault = self.take(path, body)
        return fault is not None and _inject(handler, fault)

    def take(self, path: str, body: Mapping[str, Any]) -> Fault | None:
        with self._lock:
            chosen = None
            for rule in self._rules:
                fault, left = rule
                if left == 0:
                    continue
                if fault.path is not None and not path.rstrip("/").endswith(fault.path):
                    continue
                if fault.match is not None and not fault.match(body):
                    continue
                if left is not None:
                    rule[1] = left - 1
                chosen = fault
                break
            if chosen is None and self.rate > 0 and self._rng.random() < self.rate:
                chosen = self._rng.choice(self._random_faults)
            if chosen is not None:
                self.injected.append((chosen.kind, path))
            return chosen


def _inject(handler: RequestHandler, fault: Fault) -> bool:
    """Apply ``fault``; True when the request is finished (no real answer)."""
    if fault.status is not None:
        headers = {}
        if fault.retry_after is not None:
            headers["Retry-After"] = f"{fault.retry_after:g}"
        elif fault.status == 429:
            headers["Retry-After"] = "0"
        message = fault.message or f"injected fault: HTTP {fault.status}"
        handler.send_error_json(fault.status, message, headers, kind="injected_fault")
        return True
    if fault.kind == "slow":
        handler.wait(fault.delay_s)
        return False  # then answer normally (if the client is still there)
    if fault.kind == "drop":
        handler.drop()
        return True
    if fault.kind == "malformed":
        handler.send_bytes(200, b"<html><body>502 Bad Gateway</body></html>")
        return True
    if fault.kind == "bad_shape":
        handler.send_json(200, {"object": "chat.completion", "result": "no choices here"})
        return True
    if fault.kind == "truncated":
        data = json.dumps({"id": "x", "choices": [{"index": 0, "text": "x" * 64}]}).encode()
        handler.send_bytes(200, data[: len(data) // 2], declared=len(data))
        handler.drop()
        return True
    raise AssertionError(fault.kind)


@contextlib.contextmanager
def serve(backend: Backend, *, faults: FaultPlan | None = None, **options) -> Iterator[str]:
    """Run an :class:`LLMServer` with ``faults`` on an ephemeral port; yields its base URL."""
    with LLMServer(backend, before_request=faults, **options) as server:
        yield server.url


class EchoBackend(Backend):
    """Answers with the prompt (cut to ``max_tokens`` words); scores ``-0.1`` per character."""

    kind = "echo"
    model = "echo"

    def generate(self, requests, on_result=None):
        out = []
        for r in requests:
            words = r.prompt.split()
            text = " ".join(words[: r.params.max_tokens])
            finish = "length" if len(words) > r.params.max_tokens else "stop"
            out.append(Completion(text, len(words), min(len(words), r.params.max_tokens), finish))
            if on_result is not None:
                on_result(len(out) - 1, out[-1])
        return out

    def score(self, prompts, candidates):
        return [[-0.1 * len(c) for c in cands] for cands in candidates]


def main(argv: list[str] | None = None) -> None:
    backends = {**BACKENDS, "echo": EchoBackend}
    parser = build_parser(backends, default="echo", description=__doc__.split("\n")[0])
    parser.add_argument(
        "--faults", default="", help="e.g. '429*3,500,slow:2,drop' (see FaultPlan.parse)"
    )
    parser.add_argument("--fault-rate", type=float, default=0.0, help="random fault probability")
    parser.add_argument("--seed", type=int, default=0, help="seeds the random faults")
    args = parser.parse_args(argv)
    faults = None
    if args.faults or args.fault_rate:
        faults = FaultPlan.parse(args.faults, rate=args.fault_rate, seed=args.seed)
    run(args, parser, backends, before_request=faults)


if __name__ == "__main__":
    main()

"""A backend for any OpenAI-compatible HTTP server: OpenAI, vLLM, Ollama, llama.cpp server.

    backend = OpenAICompatibleBackend("http://127.0.0.1:8000/v1", model="gemma-3-270m")
    completions = backend.generate(requests, on_result=store_one)  # request order
    scores = backend.score(prompts, candidates)  # /completions with echo + logprobs

- ``generate`` posts each request to ``/chat/completions`` from a thread pool of
  ``max_concurrency`` workers sharing one pooled ``httpx.Client``, so at most that many
  requests are in flight per backend (however many threads call it).
- Transient failures are retried with exponential backoff and full jitter (tenacity):
  408/409/429/5xx, connect errors, timeouts, dropped connections, truncated and
  malformed bodies. A ``Retry-After`` (or ``retry-after-ms``) header is honoured as a
  lower bound on the wait. Other 4xx fail at once.
- A request that still fails raises :class:`HTTPBackendError` naming its index and the
  cause. Answers that finished before are not lost: ``on_result(index, completion)`` is
  called for each one as it arrives (in completion order, on the calling thread), and the
  exception carries them in ``.completed``. After a failure no new request is started and
  requests in flight stop retrying; those that still succeed are delivered too.
- The API key is read from the environment variable named by ``api_key_env`` at each
  request and is never stored on the object, so it cannot reach a repr, a pickle, an
  exception message or :meth:`cache_identity`.
"""

from __future__ import annotations

import base64
import dataclasses
import email.utils
import os
import random
import threading
import time
from collections.abc import Callable, Mapping, Sequence
from concurrent.futures import Future, ThreadPoolExecutor, as_completed
from typing import Any

import httpx
import tenacity

from jaxmarl_llm.lm.backend import Backend, BackendError, Completion, Request

RETRYABLE_STATUS = frozenset({408, 409, 429, 500, 502, 503, 504})


class HTTPBackendError(BackendError):
    """A request failed for good. ``index``: which request (None when not per-request);
    ``status``: the HTTP status (None for transport errors); ``completed``: the answers
    that did arrive, by request index (also delivered through ``on_result``)."""

    def __init__(
        self,
        message: str,
        *,
        index: int | None = None,
        status: int | None = None,
        completed: Mapping[int, Any] | None = None,
    ):
        super().__init__(message)
        self.index = index
        self.status = status
        self.completed = dict(completed or {})


@dataclasses.dataclass
class Usage:
    """Counters for one backend (thread-safe through :meth:`add`).

    ``requests``: logical requests (one per generate request, one per scored prompt);
    ``attempts``: HTTP calls made; ``retries``: attempts after a failure; ``failures``:
    requests that failed for good; ``retry_causes``: retries by cause ("429", "timeout",
    "dropped", "malformed", ...). ``cost`` is in the currency of the prices given.
    """

    requests: int = 0
    attempts: int = 0
    retries: int = 0
    failures: int = 0
    prompt_tokens: int = 0
    completion_tokens: int = 0
    cost: float = 0.0
    retry_causes: dict[str, int] = dataclasses.field(default_factory=dict)
    _lock: threading.Lock = dataclasses.field(
        default_factory=threading.Lock, repr=False, compare=False
    )

    def add(self, **counts: float) -> None:
        with self._lock:
            for name, value in counts.items():
                setattr(self, name, getattr(self, name) + value)

    def count_retry(self, cause: str) -> None:
        with self._lock:
            self.retries += 1
            self.retry_causes[cause] = self.retry_causes.get(cause, 0) + 1

    def as_dict(self) -> dict[str, Any]:
        with self._lock:
            return {
                "requests": self.requests,
                "attempts": self.attempts,
                "retries": self.retries,
                "failures": self.failures,
                "prompt_tokens": self.prompt_tokens,
                "completion_tokens": self.completion_tokens,
                "cost": self.cost,
                "retry_causes": dict(self.retry_causes),
            }


class _Retryable(Exception):
    """A transient failure: retry (after at least ``retry_after`` seconds if given)."""

    def __init__(self, cause: str, message: str, *, status=None, retry_after=None):
        super().__init__(message)
        self.cause = cause
        self.status = status
        self.retry_after = retry_after


class _Fatal(Exception):
    """A failure retrying cannot fix (4xx, a server that cannot score)."""

    def __init__(self, message: str, *, status=None):
        super().__init__(message)
        self.status = status


class _Aborted(Exception):
    """Another request of the same batch failed for good; stop this one."""


def _parse_retry_after(headers: httpx.Headers) -> float | None:
    """Seconds to wait from ``retry-after-ms`` (OpenAI) or ``Retry-After`` (seconds, or an
    HTTP date); None when absent or unreadable."""
    ms = headers.get("retry-after-ms")
    if ms is not None:
        try:
            return max(0.0, float(ms) / 1000.0)
        except ValueError:
            pass
    value = headers.get("retry-after")
    if value is None:
        return None
    try:
        return max(0.0, float(value))
    except ValueError:
        pass
    try:
        when = email.utils.parsedate_to_datetime(value)
    except (TypeError, ValueError):
        return None
    return max(0.0, when.timestamp() - time.time())


def _server_message(response: httpx.Response, limit: int = 300) -> str:
    """The server's error message (OpenAI's ``{"error": {"message": ...}}``) or body text."""
    try:
        body = response.json()
    except (ValueError, UnicodeDecodeError):
        body = None
    if isinstance(body, dict):
        error = body.get("error", body)
        if isinstance(error, dict) and error.get("message"):
            return str(error["message"])[:limit]
        if isinstance(error, str):
            return error[:limit]
    try:
        text = response.text
    except Exception:  # undecodable body
        text = ""
    return text.strip()[:limit] or "(empty body)"


class OpenAICompatibleBackend(Backend):
    """Chat completions (and scoring through legacy completions) over HTTP.

    ``base_url`` includes the API prefix (``http://127.0.0.1:8000/v1``,
    ``https://api.openai.com/v1``, Ollama's ``http://127.0.0.1:11434/v1``). ``api_key_env``
    names the environment variable with the key (may be unset for local servers).
    ``timeout_s`` bounds each phase (connect, each read, each write; httpx semantics), not
    the whole answer. ``max_retries`` counts retries after the first attempt. Backoff
    before retry ``k`` (1-based) is uniform in ``[0, min(backoff_max_s, backoff_s *
    2**(k-1))]``, and at least the server's ``Retry-After`` (capped at
    ``retry_after_max_s``). Prices are per million prompt/completion tokens; cost
    accumulates in ``usage.cost``.
    """

    kind = "http"

    def __init__(
        self,
        base_url: str,
        model: str,
        *,
        api_key_env: str | None = "OPENAI_API_KEY",
        max_concurrency: int = 8,
        timeout_s: float = 60.0,
        max_retries: int = 6,
        backoff_s: float = 0.5,
        backoff_max_s: float = 30.0,
        retry_after_max_s: float = 120.0,
        price_per_million_input: float = 0.0,
        price_per_million_output: float = 0.0,
        score_max_tokens: int = 0,
        extra_body: Mapping[str, Any] | None = None,
        seed: int | None = None,
    ):
        if max_concurrency < 1:
            raise ValueError(f"max_concurrency must be >= 1, got {max_concurrency}")
        if max_retries < 0:
            raise ValueError(f"max_retries must be >= 0, got {max_retries}")
        if timeout_s <= 0:
            raise ValueError(f"timeout_s must be > 0, got {timeout_s}")
        self.base_url = base_url.rstrip("/")
        self.model = model
        self.api_key_env = api_key_env
        self.max_concurrency = int(max_concurrency)
        self.timeout_s = float(timeout_s)
        self.max_retries = int(max_retries)
        self.backoff_s = float(backoff_s)
        self.backoff_max_s = float(backoff_max_s)
        self.retry_after_max_s = float(retry_after_max_s)
        self.price_per_million_input = float(price_per_million_input)
        self.price_per_million_output = float(price_per_million_output)
        self.score_max_tokens = int(score_max_tokens)
        self.extra_body = dict(extra_body or {})
        self.usage = Usage()
        self._jitter = random.Random(seed)
        self._jitter_lock = threading.Lock()
        self._client = httpx.Client(
            base_url=self.base_url + "/",
            timeout=httpx.Timeout(self.timeout_s),
            limits=httpx.Limits(
                max_connections=self.max_concurrency,
                max_keepalive_connections=self.max_concurrency,
            ),
            headers={"User-Agent": "jaxmarl_llm"},
        )
        self._pool = ThreadPoolExecutor(
            max_workers=self.max_concurrency, thread_name_prefix="http-backend"
        )
        self._closed = False

    # ----- identity and lifecycle ---------------------------------------------------------

    def __repr__(self) -> str:
        return (
            f"{type(self).__name__}(base_url={self.base_url!r}, model={self.model!r}, "
            f"api_key_env={self.api_key_env!r}, max_concurrency={self.max_concurrency}, "
            f"timeout_s={self.timeout_s}, max_retries={self.max_retries})"
        )

    def __getstate__(self):
        raise TypeError(f"{type(self).__name__} holds live connections and cannot be pickled")

    def close(self) -> None:
        if self._closed:
            return
        self._closed = True
        self._pool.shutdown(wait=False, cancel_futures=True)
        self._client.close()

    def __enter__(self):
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    def _where(self) -> str:
        return f"http backend {self.model!r} at {self.base_url}"

    def _api_key(self) -> str | None:
        return os.environ.get(self.api_key_env) if self.api_key_env else None

    def _redact(self, text: str) -> str:
        key = self._api_key()
        return text.replace(key, "[redacted]") if key else text

    # ----- one HTTP call, with retries ----------------------------------------------------

    def _post_once(self, path: str, body: dict[str, Any]) -> dict[str, Any]:
        headers = {}
        key = self._api_key()
        if key:
            headers["Authorization"] = f"Bearer {key}"
        self.usage.add(attempts=1)
        try:
            response = self._client.post(path, json=body, headers=headers)
        except httpx.TimeoutException as exc:
            raise _Retryable("timeout", f"no answer within {self.timeout_s}s ({exc})") from None
        except (httpx.RemoteProtocolError, httpx.ReadError, httpx.WriteError) as exc:
            raise _Retryable("dropped", f"connection dropped or body cut short ({exc})") from None
        except (httpx.UnsupportedProtocol, httpx.LocalProtocolError, httpx.ProxyError) as exc:
            raise _Fatal(f"cannot send the request: {type(exc).__name__}: {exc}") from None
        except httpx.TransportError as exc:
            raise _Retryable("connect", f"{type(exc).__name__}: {exc}") from None
        status = response.status_code
        if status != 200:
            message = self._redact(_server_message(response))
            text = f"HTTP {status} from server: {message}"
            if status in RETRYABLE_STATUS:
                retry_after = _parse_retry_after(response.headers) if status in (429, 503) else None
                raise _Retryable(str(status), text, status=status, retry_after=retry_after)
            raise _Fatal(text, status=status)
        try:
            data = response.json()
        except (ValueError, UnicodeDecodeError):
            snippet = self._redact(response.text[:120]) if response.content else "(empty)"
            raise _Retryable("malformed", f"malformed (non-JSON) body: {snippet!r}") from None
        if not isinstance(data, dict):
            raise _Retryable("malformed", f"malformed body (not a JSON object): {type(data)}")
        return data

    def _wait(self, state: tenacity.RetryCallState) -> float:
        exc = state.outcome.exception() if state.outcome else None
        cap = min(self.backoff_max_s, self.backoff_s * 2 ** (state.attempt_number - 1))
        with self._jitter_lock:
            wait = self._jitter.uniform(0.0, cap)
        retry_after = getattr(exc, "retry_after", None)
        if retry_after is not None:
            wait = max(wait, min(retry_after, self.retry_after_max_s))
        return wait

    def _call(
        self,
        path: str,
        body: dict[str, Any],
        parse: Callable[[dict[str, Any]], Any],
        abort: threading.Event,
    ) -> Any:
        """POST, parse, and retry transient failures. Raises _Fatal, _Retryable (retries
        exhausted) or _Aborted, each with ``.attempts`` set."""
        attempts = 0

        def attempt():
            nonlocal attempts
            if abort.is_set():
                raise _Aborted()
            attempts += 1
            data = self._post_once(path, body)
            try:
                return parse(data)
            except (KeyError, IndexError, TypeError, ValueError, AttributeError) as exc:
                raise _Retryable(
                    "malformed", f"unexpected response shape ({type(exc).__name__}: {exc})"
                ) from None

        def before_sleep(state: tenacity.RetryCallState) -> None:
            self.usage.count_retry(state.outcome.exception().cause)

        retrying = tenacity.Retrying(
            retry=tenacity.retry_if_exception_type(_Retryable),
            stop=tenacity.stop_after_attempt(self.max_retries + 1)
            | tenacity.stop_when_event_set(abort),
            wait=self._wait,
            before_sleep=before_sleep,
            sleep=abort.wait,  # a batch-level failure cuts backoff sleeps short
            reraise=True,
        )
        try:
            return retrying(attempt)
        except (_Fatal, _Retryable, _Aborted) as exc:
            exc.attempts = attempts
            raise

    def _account(self, usage: Mapping[str, Any] | None) -> tuple[int, int]:
        usage = usage or {}
        prompt = int(usage.get("prompt_tokens") or 0)
        completion = int(usage.get("completion_tokens") or 0)
        cost = (
            prompt * self.price_per_million_input + completion * self.price_per_million_output
        ) / 1e6
        self.usage.add(prompt_tokens=prompt, completion_tokens=completion, cost=cost)
        return prompt, completion

    # ----- batches ------------------------------------------------------------------------

    def _run_batch(
        self,
        jobs: Sequence[Callable[[threading.Event], Any]],
        on_result: Callable[[int, Any], None] | None,
        what: str,
    ) -> list[Any]:
        if self._closed:
            raise BackendError(f"{self._where()}: backend is closed")
        abort = threading.Event()
        results: dict[int, Any] = {}

        def run(job):
            try:
                return job(abort)
            except _Aborted:
                raise
            except BaseException:
                abort.set()  # before this worker can pick up the next request
                raise

        futures: dict[Future, int] = {self._pool.submit(run, job): i for i, job in enumerate(jobs)}
        failure: tuple[int, BaseException] | None = None
        try:
            for future in as_completed(futures):
                index = futures[future]
                if future.cancelled():
                    continue
                exc = future.exception()
                if exc is None:
                    results[index] = future.result()
                    if on_result is not None:
                        on_result(index, results[index])
                elif not isinstance(exc, _Aborted) and failure is None:
                    failure = (index, exc)
                    abort.set()
                    for other in futures:
                        other.cancel()
        finally:
            abort.set()  # only matters when on_result raised or we were interrupted
            for other in futures:
                other.cancel()
        self.usage.add(requests=len(results) + (failure is not None))
        if failure is None:
            return [results[i] for i in range(len(jobs))]
        self.usage.add(failures=1)
        index, exc = failure
        attempts = getattr(exc, "attempts", None)
        tried = f" after {attempts} attempt{'s' if attempts != 1 else ''}" if attempts else ""
        if not isinstance(exc, _Fatal | _Retryable):  # a bug, not a server failure
            exc = RuntimeError(f"{type(exc).__name__}: {exc}")
        message = self._redact(
            f"{self._where()}: {what} {index} of {len(jobs)} failed{tried}: {exc} "
            f"({len(results)} other answers were delivered)"
        )
        raise HTTPBackendError(
            message, index=index, status=getattr(exc, "status", None), completed=results
        ) from None

    def generate(
        self,
        requests: Sequence[Request],
        *,
        on_result: Callable[[int, Completion], None] | None = None,
    ) -> list[Completion]:
        """One completion per request, in order; ``on_result(index, completion)`` as each
        arrives. Raises :class:`HTTPBackendError` if any request fails for good."""
        jobs = [self._chat_job(request) for request in requests]
        return self._run_batch(jobs, on_result, "request")

    def _chat_body(self, request: Request) -> dict[str, Any]:
        messages = []
        if request.system:
            messages.append({"role": "system", "content": request.system})
        messages.append({"role": "user", "content": _user_content(request)})
        params = request.params
        body: dict[str, Any] = {
            "model": self.model,
            "messages": messages,
            "temperature": params.temperature,
            "top_p": params.top_p,
            "max_tokens": params.max_tokens,
            "seed": params.seed,
            "n": 1,
        }
        if params.stop:
            body["stop"] = list(params.stop)
        body.update(self.extra_body)
        return body

    def _chat_job(self, request: Request) -> Callable[[threading.Event], Completion]:
        body = self._chat_body(request)

        def parse(data: dict[str, Any]) -> Completion:
            choice = data["choices"][0]
            text = choice["message"]["content"]
            if text is None:
                text = ""
            if not isinstance(text, str):
                raise TypeError(f"message content is {type(text).__name__}, not text")
            finish = "length" if choice.get("finish_reason") == "length" else "stop"
            prompt_tokens, completion_tokens = self._account(data.get("usage"))
            return Completion(text, prompt_tokens, completion_tokens, finish)

        return lambda abort: self._call("chat/completions", body, parse, abort)

    def score(
        self,
        prompts: Sequence[str],
        candidates: Sequence[Sequence[str]],
        *,
        on_result: Callable[[int, list[float]], None] | None = None,
    ) -> list[list[float]]:
        """``log p(candidate | prompt)`` from ``/completions`` with ``echo`` and ``logprobs``
        (vLLM supports this; OpenAI's chat-only models and Ollama do not). One HTTP request
        per prompt carries all of its candidates. The sum covers every echoed token that
        ends past the prompt, so a token straddling the prompt/candidate boundary counts
        toward the candidate: end prompts on a token boundary (e.g. candidates that start
        with a space)."""
        if len(prompts) != len(candidates):
            raise ValueError(f"{len(prompts)} prompts but {len(candidates)} candidate lists")
        jobs = [self._score_job(p, list(c)) for p, c in zip(prompts, candidates, strict=True)]
        return self._run_batch(jobs, on_result, "score prompt")

    def _score_job(self, prompt: str, cands: list[str]) -> Callable[[threading.Event], Any]:
        if not cands:
            return lambda abort: []
        body = {
            "model": self.model,
            "prompt": [prompt + c for c in cands],
            "echo": True,
            "logprobs": 1,
            "max_tokens": self.score_max_tokens,
            "temperature": 0.0,
        }

        def parse(data: dict[str, Any]) -> list[float]:
            choices = sorted(data["choices"], key=lambda c: c.get("index", 0))
            if len(choices) != len(cands):
                raise ValueError(f"{len(choices)} choices for {len(cands)} candidates")
            scores = [
                _candidate_logprob(ch, prompt, prompt + c)
                for ch, c in zip(choices, cands, strict=True)
            ]
            self._account(data.get("usage"))
            return scores

        def job(abort: threading.Event) -> list[float]:
            try:
                return self._call("completions", body, parse, abort)
            except _Fatal as exc:
                if exc.status in (400, 404, 405, 422, 501):
                    raise _Fatal(
                        f"server cannot score by echo+logprobs on /completions: {exc}",
                        status=exc.status,
                    ) from None
                raise

        return job

    def list_models(self) -> list[str]:
        """Model ids the server offers (``GET /models``); a cheap health check."""
        try:
            response = self._client.get("models", headers=self._auth_headers())
        except httpx.TransportError as exc:
            raise HTTPBackendError(f"{self._where()}: {type(exc).__name__}: {exc}") from None
        if response.status_code != 200:
            message = self._redact(_server_message(response))
            raise HTTPBackendError(
                f"{self._where()}: HTTP {response.status_code} from server: {message}",
                status=response.status_code,
            )
        return [m["id"] for m in response.json().get("data", [])]

    def _auth_headers(self) -> dict[str, str]:
        key = self._api_key()
        return {"Authorization": f"Bearer {key}"} if key else {}


def _user_content(request: Request) -> str | list[dict[str, Any]]:
    """The user turn: the prompt alone, or with images the text part followed by one
    ``image_url`` part per PNG (base64 data URL), as OpenAI's vision chat API takes it."""
    if not request.images:
        return request.prompt
    parts: list[dict[str, Any]] = [{"type": "text", "text": request.prompt}]
    for png in request.images:
        url = "data:image/png;base64," + base64.b64encode(png).decode("ascii")
        parts.append({"type": "image_url", "image_url": {"url": url}})
    return parts


def _candidate_logprob(choice: Mapping[str, Any], prompt: str, full: str) -> float:
    """Sum of the echoed token logprobs that cover ``full[len(prompt):]``."""
    logprobs = choice.get("logprobs")
    if not logprobs or not logprobs.get("tokens") or logprobs.get("token_logprobs") is None:
        raise _Fatal("server cannot score by echo+logprobs on /completions: no logprobs returned")
    tokens = logprobs["tokens"]
    values = logprobs["token_logprobs"]
    offsets = logprobs.get("text_offset")
    if not offsets or len(offsets) != len(tokens):
        offsets, at = [], 0
        for token in tokens:
            offsets.append(at)
            at += len(token)
    start, end = len(prompt), len(full)
    total, covered = 0.0, False
    for token, value, offset in zip(tokens, values, offsets, strict=True):
        if offset >= end:  # generated after the echo (servers that need max_tokens >= 1)
            break
        if offset + len(token) <= start:
            continue
        if value is None:
            raise _Fatal("server returned no logprob for a candidate token (empty prompt?)")
        total += float(value)
        covered = True
    if not covered and end > start:
        raise ValueError("echoed tokens do not cover the candidate")
    return total


__all__ = ["HTTPBackendError", "OpenAICompatibleBackend", "Usage"]

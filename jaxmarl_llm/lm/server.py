"""A small OpenAI-compatible HTTP server that answers from any :class:`Backend`.

    with serve(backend) as url:
        client = OpenAICompatibleBackend(url, model="x")   # url = http://127.0.0.1:PORT/v1

    python -m jaxmarl_llm.lm.server --port 8000 --backend gemma

Endpoints: ``GET /v1/models``, ``POST /v1/chat/completions``, ``POST /v1/completions``
(plain completion, and ``echo`` + ``logprobs`` scoring when the backend implements
``score``), ``GET /health``. Responses carry OpenAI ``usage`` fields (the backend's token
counts, or whitespace word counts where it reports none). Streaming is not supported.

Scoring: the server splits the echoed text into whitespace-led word pieces (or the
``tokenizer`` given) and asks ``backend.score`` for each piece given the text before it,
in one batched call; the first piece has logprob ``None`` as in OpenAI's API. By the chain
rule the pieces of a candidate sum to ``log p(candidate | prompt)`` when the candidate
starts on a piece boundary.

``before_request``: a callable ``(handler, path, body) -> bool`` that sees every parsed
POST before the backend does; it may answer through the handler's ``send_json`` /
``send_bytes`` / ``send_error_json``, cut the connection with ``drop``, or pause with
``wait``, and returns True when it has finished the request itself.
:mod:`jaxmarl_llm.testing.fault_server` injects HTTP faults this way.
"""

from __future__ import annotations

import argparse
import contextlib
import dataclasses
import json
import logging
import os
import re
import socket
import threading
import time
import uuid
from collections import Counter
from collections.abc import Callable, Iterator, Mapping
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

from jaxmarl_llm.lm.backend import Backend, Completion, Request, SamplingParams

logger = logging.getLogger(__name__)


@dataclasses.dataclass
class ServerStats:
    """What the server saw: requests by path, in-flight high-water mark, auth outcomes."""

    requests: Counter = dataclasses.field(default_factory=Counter)
    in_flight: int = 0
    max_in_flight: int = 0
    unauthorized: int = 0
    backend_calls: int = 0
    _lock: threading.Lock = dataclasses.field(default_factory=threading.Lock, repr=False)

    @contextlib.contextmanager
    def track(self, path: str) -> Iterator[None]:
        with self._lock:
            self.requests[path] += 1
            self.in_flight += 1
            self.max_in_flight = max(self.max_in_flight, self.in_flight)
        try:
            yield
        finally:
            with self._lock:
                self.in_flight -= 1

    def reset_max(self) -> None:
        with self._lock:
            self.max_in_flight = self.in_flight


_PIECE = re.compile(r"\s*\S+|\s+")


def split_pieces(text: str) -> list[str]:
    """Whitespace-led word pieces whose concatenation is ``text`` (the default tokenizer)."""
    return _PIECE.findall(text)


def _count(text: str) -> int:
    return len(text.split())


BeforeRequest = Callable[["RequestHandler", str, Mapping[str, Any]], bool]


class _Server(ThreadingHTTPServer):
    daemon_threads = True
    block_on_close = False
    allow_reuse_address = True

    app: LLMServer

    def get_request(self):
        sock, addr = super().get_request()
        self.app._open_sockets.add(sock)
        return sock, addr

    def shutdown_request(self, request):
        self.app._open_sockets.discard(request)
        super().shutdown_request(request)


class RequestHandler(BaseHTTPRequestHandler):
    """One connection. Besides the routes, the methods a ``before_request`` hook may use:
    ``send_json``, ``send_bytes``, ``send_error_json``, ``drop`` and ``wait``."""

    protocol_version = "HTTP/1.1"  # keep-alive, so clients can pool connections
    disable_nagle_algorithm = True  # headers and body go out as two writes: no 40 ms stall
    server: _Server

    def log_message(self, format, *args):  # noqa: A002 - the base class's name
        if self.server.app.verbose:
            logger.info("[server] %s %s", self.address_string(), format % args)

    # ----- plumbing (also for before_request hooks) ------------------------------------

    def send_json(self, status: int, obj: Any, headers: Mapping[str, str] | None = None):
        self.send_bytes(status, json.dumps(obj).encode(), headers)

    def send_bytes(self, status, data: bytes, headers=None, *, declared: int | None = None):
        """A response with ``data`` as its body; ``declared``: the Content-Length to claim
        instead of ``len(data)``."""
        self.send_response(status)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(data) if declared is None else declared))
        for name, value in (headers or {}).items():
            self.send_header(name, value)
        self.end_headers()
        self.wfile.write(data)

    def send_error_json(
        self, status: int, message: str, headers=None, kind="invalid_request_error"
    ):
        """An OpenAI-style error body: ``{"error": {"message", "type", "code"}}``."""
        self.send_json(
            status, {"error": {"message": message, "type": kind, "code": status}}, headers
        )

    def drop(self) -> None:
        """Close the connection now, after whatever was written (no further response)."""
        self.close_connection = True
        with contextlib.suppress(OSError):
            self.wfile.flush()
        with contextlib.suppress(OSError):
            self.connection.shutdown(socket.SHUT_RDWR)

    def wait(self, seconds: float) -> None:
        """Sleep, but wake when the server stops."""
        self.server.app._stopping.wait(seconds)

    def _authorized(self) -> bool:
        key = self.server.app.api_key
        if key is None:
            return True
        if self.headers.get("Authorization", "") == f"Bearer {key}":
            return True
        with self.server.app.stats._lock:
            self.server.app.stats.unauthorized += 1
        self.send_error_json(401, "invalid or missing API key", kind="authentication_error")
        return False

    # ----- routes -----------------------------------------------------------------------

    def do_GET(self):
        app = self.server.app
        path = self.path.split("?")[0].rstrip("/")
        with app.stats.track(path):
            if path == "/health":
                return self.send_json(200, {"status": "ok"})
            if path == "/v1/models":
                if not self._authorized():
                    return
                model = {"id": app.model, "object": "model", "owned_by": "jaxmarl_llm"}
                return self.send_json(200, {"object": "list", "data": [model]})
            self.send_error_json(404, f"no route GET {path}")

    def do_POST(self):
        app = self.server.app
        path = self.path.split("?")[0].rstrip("/")
        length = int(self.headers.get("Content-Length") or 0)
        raw = self.rfile.read(length) if length else b""
        with app.stats.track(path):
            try:
                self._post(path, raw)
            except (BrokenPipeError, ConnectionResetError):
                self.close_connection = True  # the client gave up (timed out)

    def _post(self, path: str, raw: bytes) -> None:
        app = self.server.app
        if path not in ("/v1/chat/completions", "/v1/completions"):
            return self.send_error_json(404, f"no route POST {path}")
        if not self._authorized():
            return
        try:
            body = json.loads(raw or b"{}")
        except ValueError as exc:
            return self.send_error_json(400, f"request body is not JSON: {exc}")
        if not isinstance(body, dict):
            return self.send_error_json(400, "request body must be a JSON object")
        if app.before_request is not None and app.before_request(self, path, body):
            return
        if body.get("stream"):
            return self.send_error_json(400, "streaming is not supported by this server")
        if app.latency_s > 0:
            self.wait(app.latency_s)
        try:
            if path == "/v1/chat/completions":
                status, answer = app.chat(body)
            else:
                status, answer = app.completions(body)
        except Exception as exc:  # the backend failed: a 500, like a real server
            return self.send_error_json(
                500, f"backend error: {type(exc).__name__}: {exc}", kind="server_error"
            )
        if status != 200:
            return self.send_error_json(status, answer)
        self.send_json(200, answer)


def _text_content(content: Any) -> str:
    if isinstance(content, str):
        return content
    if isinstance(content, list):  # [{"type": "text", "text": ...}, ...]
        return "".join(p.get("text", "") for p in content if isinstance(p, dict))
    return "" if content is None else str(content)


def _params(body: Mapping[str, Any], default_max_tokens: int = 256) -> SamplingParams:
    max_tokens = body.get("max_completion_tokens", body.get("max_tokens"))
    stop = body.get("stop") or ()
    return SamplingParams(
        max_tokens=int(max_tokens) if max_tokens else default_max_tokens,
        temperature=float(body.get("temperature", 0.0) or 0.0),
        top_p=float(body.get("top_p", 1.0) or 1.0),
        stop=(stop,) if isinstance(stop, str) else tuple(stop),
        seed=int(body.get("seed") or 0),
    )


class LLMServer:
    """The server object: ``url`` (``http://host:port/v1``), ``stats``.

    ``api_key``: when set, requests must carry ``Authorization: Bearer <api_key>``.
    ``max_parallel``: at most this many backend calls at once (for backends that are not
    thread-safe, e.g. one accelerator); None: no limit. ``latency_s``: extra wait per
    answer (to model a slow model). ``tokenizer``: splits text into scored pieces.
    ``before_request``: see the module docstring.
    """

    def __init__(
        self,
        backend: Backend,
        *,
        host: str = "127.0.0.1",
        port: int = 0,
        before_request: BeforeRequest | None = None,
        model: str | None = None,
        api_key: str | None = None,
        max_parallel: int | None = None,
        latency_s: float = 0.0,
        tokenizer: Callable[[str], list[str]] = split_pieces,
        verbose: bool = False,
    ):
        self.backend = backend
        self.host = host
        self.port = port
        self.before_request = before_request
        self.model = model or backend.model or backend.kind
        self.api_key = api_key
        self.latency_s = float(latency_s)
        self.tokenizer = tokenizer
        self.verbose = verbose
        self.stats = ServerStats()
        self._limit = threading.BoundedSemaphore(max_parallel) if max_parallel else None
        self._stopping = threading.Event()
        self._open_sockets: set[socket.socket] = set()
        self._httpd: _Server | None = None
        self._thread: threading.Thread | None = None

    def __repr__(self) -> str:
        return f"LLMServer(url={self.url!r}, model={self.model!r}, backend={self.backend.kind!r})"

    @property
    def url(self) -> str:
        return f"http://{self.host}:{self.port}/v1"

    def start(self) -> LLMServer:
        self._stopping.clear()
        self._httpd = _Server((self.host, self.port), RequestHandler)
        self._httpd.app = self
        self.port = self._httpd.server_address[1]
        self._thread = threading.Thread(
            target=self._httpd.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True
        )
        self._thread.start()
        return self

    def stop(self) -> None:
        if self._httpd is None:
            return
        self._stopping.set()  # wakes latency waits and hooks that wait
        self._httpd.shutdown()
        for sock in list(self._open_sockets):  # idle keep-alive connections
            with contextlib.suppress(OSError):
                sock.shutdown(socket.SHUT_RDWR)
        self._httpd.server_close()
        self._thread.join(timeout=5)
        self._httpd = None

    def __enter__(self) -> LLMServer:
        return self.start()

    def __exit__(self, *exc) -> None:
        self.stop()

    # ----- answering ------------------------------------------------------------------

    def _call(self, fn, *args):
        with self.stats._lock:
            self.stats.backend_calls += 1
        if self._limit is None:
            return fn(*args)
        with self._limit:
            return fn(*args)

    def chat(self, body: Mapping[str, Any]) -> tuple[int, Any]:
        messages = body.get("messages")
        if not isinstance(messages, list) or not messages:
            return 400, "'messages' must be a non-empty list"
        system = "\n".join(
            _text_content(m.get("content")) for m in messages if m.get("role") == "system"
        )
        turns = [m for m in messages if m.get("role") != "system"]
        if not turns:
            return 400, "'messages' has no user turn"
        prompt = _text_content(turns[-1].get("content"))
        try:
            request = Request(prompt=prompt, system=system, params=_params(body))
        except ValueError as exc:
            return 400, str(exc)
        (completion,) = self._call(self.backend.generate, [request])
        usage = self._usage(prompt if not system else system + "\n" + prompt, completion)
        return 200, {
            "id": f"chatcmpl-{uuid.uuid4().hex[:24]}",
            "object": "chat.completion",
            "created": int(time.time()),
            "model": self.model,
            "choices": [
                {
                    "index": 0,
                    "message": {"role": "assistant", "content": completion.text},
                    "finish_reason": completion.finish_reason,
                }
            ],
            "usage": usage,
        }

    @staticmethod
    def _usage(prompt: str, completion: Completion) -> dict[str, int]:
        prompt_tokens = completion.prompt_tokens or _count(prompt)
        completion_tokens = completion.completion_tokens or _count(completion.text)
        return {
            "prompt_tokens": prompt_tokens,
            "completion_tokens": completion_tokens,
            "total_tokens": prompt_tokens + completion_tokens,
        }

    def completions(self, body: Mapping[str, Any]) -> tuple[int, Any]:
        prompts = body.get("prompt", "")
        prompts = [prompts] if isinstance(prompts, str) else prompts
        if not isinstance(prompts, list) or not all(isinstance(p, str) for p in prompts):
            return 400, "'prompt' must be a string or a list of strings"
        echo = bool(body.get("echo"))
        want_logprobs = body.get("logprobs") is not None
        max_tokens = body.get("max_tokens", 16)
        max_tokens = 16 if max_tokens is None else int(max_tokens)
        if max_tokens < 0:
            return 400, "'max_tokens' must be >= 0"
        if max_tokens == 0 and not echo:
            return 400, "'max_tokens' = 0 needs echo=true"
        if echo and want_logprobs and type(self.backend).score is Backend.score:
            return 400, f"backend {self.backend.kind!r} cannot score: echo+logprobs unsupported"
        generated = [Completion("", 0, 0, "length")] * len(prompts)
        if max_tokens > 0:
            try:
                params = dataclasses.replace(_params(body, 16), max_tokens=max_tokens)
            except ValueError as exc:
                return 400, str(exc)
            requests = [Request(prompt=p, params=params) for p in prompts]
            generated = self._call(self.backend.generate, requests)
        texts = [(p if echo else "") + c.text for p, c in zip(prompts, generated, strict=True)]
        logprobs = [None] * len(prompts)
        if want_logprobs and echo:
            try:
                logprobs = self._echo_logprobs(texts)
            except NotImplementedError as exc:
                return 400, f"echo+logprobs unsupported: {exc}"
        choices = []
        prompt_tokens = completion_tokens = 0
        for i, (prompt, comp) in enumerate(zip(prompts, generated, strict=True)):
            usage = self._usage(prompt, comp)
            prompt_tokens += len(self.tokenizer(prompt)) if echo else usage["prompt_tokens"]
            completion_tokens += usage["completion_tokens"] if max_tokens > 0 else 0
            choices.append(
                {
                    "index": i,
                    "text": texts[i],
                    "logprobs": logprobs[i],
                    "finish_reason": comp.finish_reason,
                }
            )
        return 200, {
            "id": f"cmpl-{uuid.uuid4().hex[:24]}",
            "object": "text_completion",
            "created": int(time.time()),
            "model": self.model,
            "choices": choices,
            "usage": {
                "prompt_tokens": prompt_tokens,
                "completion_tokens": completion_tokens,
                "total_tokens": prompt_tokens + completion_tokens,
            },
        }

    def _echo_logprobs(self, texts: list[str]) -> list[dict[str, Any]]:
        """OpenAI legacy logprobs for each text, from one batched ``backend.score`` call."""
        pieces = [self.tokenizer(text) for text in texts]
        contexts, targets, where = [], [], []
        for t, toks in enumerate(pieces):
            at = 0
            for k, tok in enumerate(toks):
                if k > 0:
                    contexts.append(texts[t][:at])
                    targets.append([tok])
                    where.append((t, k))
                at += len(tok)
        values = self._call(self.backend.score, contexts, targets) if contexts else []
        token_logprobs = [[None] * len(toks) for toks in pieces]
        for (t, k), row in zip(where, values, strict=True):
            token_logprobs[t][k] = float(row[0])
        out = []
        for toks, lps in zip(pieces, token_logprobs, strict=True):
            offsets, at = [], 0
            for tok in toks:
                offsets.append(at)
                at += len(tok)
            out.append(
                {
                    "tokens": toks,
                    "token_logprobs": lps,
                    "top_logprobs": [
                        None if lp is None else {tok: lp} for tok, lp in zip(toks, lps, strict=True)
                    ],
                    "text_offset": offsets,
                }
            )
        return out


@contextlib.contextmanager
def serve(backend: Backend, **options) -> Iterator[str]:
    """Run an :class:`LLMServer` on an ephemeral port; yields its base URL (``.../v1``)."""
    with LLMServer(backend, **options) as server:
        yield server.url


# ----- command line ---------------------------------------------------------------------


def _gemma() -> Backend:
    from jaxmarl_llm.lm.gemma import GemmaBackend

    return GemmaBackend()


def _smollm2() -> Backend:
    from jaxmarl_llm.lm.llama import smollm2_backend

    return smollm2_backend()


BACKENDS: dict[str, Callable[[], Backend]] = {"gemma": _gemma, "smollm2": _smollm2}


def register_backend(name: str, factory: Callable[[], Backend]) -> None:
    """Make ``--backend name`` available on the command line."""
    BACKENDS[name] = factory


def build_parser(
    backends: Mapping[str, Callable[[], Backend]], *, default: str | None = None, description=None
) -> argparse.ArgumentParser:
    """The command line's options; ``--backend`` picks one of ``backends`` (required
    unless ``default`` is given). Other entry points add their own options to it."""
    parser = argparse.ArgumentParser(description=description or __doc__.split("\n")[0])
    parser.add_argument("--host", default="127.0.0.1")
    parser.add_argument("--port", type=int, default=8000, help="0 picks a free port")
    parser.add_argument(
        "--backend", default=default, required=default is None, choices=sorted(backends)
    )
    parser.add_argument("--model", default=None, help="model id to report (default: backend's)")
    parser.add_argument("--latency-ms", type=float, default=0.0, help="extra wait per answer")
    parser.add_argument("--max-parallel", type=int, default=None, help="backend calls at once")
    parser.add_argument("--api-key-env", default=None, help="require the key in this env var")
    parser.add_argument("--verbose", action="store_true", help="log every request")
    return parser


def run(
    args: argparse.Namespace,
    parser: argparse.ArgumentParser,
    backends: Mapping[str, Callable[[], Backend]],
    **options,
) -> None:
    """Serve ``backends[args.backend]`` until interrupted; prints ``serving <model> at
    <url>`` once it listens. ``options`` go to :class:`LLMServer`."""
    logging.basicConfig(
        level=logging.INFO if args.verbose else logging.WARNING, format="%(message)s"
    )
    api_key = None
    if args.api_key_env:
        api_key = os.environ.get(args.api_key_env)
        if not api_key:
            parser.error(f"environment variable {args.api_key_env} is not set")
    server = LLMServer(
        backends[args.backend](),
        host=args.host,
        port=args.port,
        model=args.model,
        api_key=api_key,
        max_parallel=args.max_parallel,
        latency_s=args.latency_ms / 1000.0,
        verbose=args.verbose,
        **options,
    )
    with server:
        print(f"serving {server.model!r} at {server.url}", flush=True)
        try:
            while True:
                time.sleep(3600)
        except KeyboardInterrupt:
            pass


def main(argv: list[str] | None = None) -> None:
    parser = build_parser(BACKENDS)
    run(parser.parse_args(argv), parser, BACKENDS)


if __name__ == "__main__":
    main()

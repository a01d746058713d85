"""OpenAICompatibleBackend against the real local server (jaxmarl_llm.lm.server), with the
faults of jaxmarl_llm.testing.fault_server."""

from __future__ import annotations

import json
import pickle
import subprocess
import sys
import threading
import time
import traceback
from pathlib import Path

import pytest
from scripts import load_script

from jaxmarl_llm.lm.backend import Backend, BackendError, Completion, Request, SamplingParams
from jaxmarl_llm.lm.http import HTTPBackendError, OpenAICompatibleBackend
from jaxmarl_llm.lm.server import BACKENDS, LLMServer, build_parser, split_pieces
from jaxmarl_llm.testing.fault_server import (
    EchoBackend,
    Fault,
    FaultPlan,
    prompt_contains,
    serve,
)

ROOT = Path(__file__).resolve().parents[2]
KEY_ENV = "JAXMARL_LLM_TEST_KEY"
SECRET = "sk-test-0123456789abcdef-secret"


class Tiny(Backend):
    """Deterministic: answers ``re: <prompt>``; 3 prompt and 5 completion tokens each;
    ``log p(c | p) = -0.5 * len(c)`` (additive, so piecewise scoring sums exactly)."""

    kind = "tiny"
    model = "tiny-1"

    def __init__(self, delay_s: float = 0.0):
        self.delay_s = delay_s
        self.seen: list[Request] = []
        self.in_flight = 0
        self.max_in_flight = 0
        self._lock = threading.Lock()

    def generate(self, requests):
        with self._lock:
            self.seen.extend(requests)
            self.in_flight += 1
            self.max_in_flight = max(self.max_in_flight, self.in_flight)
        try:
            time.sleep(self.delay_s)
            return [Completion(f"re: {r.prompt}", 3, 5) for r in requests]
        finally:
            with self._lock:
                self.in_flight -= 1

    def score(self, prompts, candidates):
        return [[-0.5 * len(c) for c in cands] for cands in candidates]


class NoScore(Backend):
    kind = "noscore"
    model = "noscore-1"

    def generate(self, requests):
        return [Completion("x") for _ in requests]


@pytest.fixture
def make_client(monkeypatch):
    monkeypatch.delenv(KEY_ENV, raising=False)
    clients = []

    def make(url, **options):
        options = {"timeout_s": 2.0, "max_retries": 4, "backoff_s": 0.005, **options}
        client = OpenAICompatibleBackend(url, model="tiny-1", api_key_env=KEY_ENV, **options)
        clients.append(client)
        return client

    yield make
    for client in clients:
        client.close()


def reqs(n, prefix="q"):
    return [Request(f"{prefix}{i}") for i in range(n)]


# ----- happy path ---------------------------------------------------------------------------


def test_order_concurrency_and_request_fields(make_client):
    backend = Tiny(delay_s=0.04)
    with LLMServer(backend) as server:
        client = make_client(server.url, max_concurrency=4)
        arrived = []
        out = client.generate(reqs(24), on_result=lambda i, c: arrived.append((i, c.text)))
        assert [c.text for c in out] == [f"re: q{i}" for i in range(24)]
        assert sorted(arrived) == [(i, f"re: q{i}") for i in range(24)]
        assert 2 <= server.stats.max_in_flight <= 4
        assert backend.max_in_flight <= 4

        params = SamplingParams(
            max_tokens=7, temperature=0.7, top_p=0.9, stop=("\n", "END"), seed=5
        )
        (answer,) = client.generate([Request("hello", system="be brief", params=params)])
        assert answer == Completion("re: hello", 3, 5, "stop")
        seen = backend.seen[-1]
        assert (seen.prompt, seen.system, seen.params) == ("hello", "be brief", params)
        assert client.list_models() == ["tiny-1"]
        assert client.generate([]) == []


def test_max_concurrency_one_is_serial(make_client):
    with LLMServer(Tiny(delay_s=0.01)) as server:
        client = make_client(server.url, max_concurrency=1)
        client.generate(reqs(8))
        assert server.stats.max_in_flight == 1


# ----- faults recovered by retry ------------------------------------------------------------


@pytest.mark.parametrize(
    "kind, cause",
    [
        ("429", "429"),
        ("500", "500"),
        ("503", "503"),
        ("drop", "dropped"),
        ("malformed", "malformed"),
        ("bad_shape", "malformed"),
        ("truncated", "dropped"),
        ("slow", "timeout"),
    ],
)
def test_each_fault_is_retried(make_client, kind, cause):
    plan = FaultPlan([Fault(kind, times=2, delay_s=10.0)])
    start = time.monotonic()
    with serve(Tiny(), faults=plan) as url:
        # A short timeout only where the fault needs one: on a loaded CI machine a healthy
        # answer can take longer than 0.25 s, which would add retries this test does not count.
        client = make_client(url, max_concurrency=2, timeout_s=1.0 if kind == "slow" else 10.0)
        out = client.generate(reqs(5))
    assert [c.text for c in out] == [f"re: q{i}" for i in range(5)]
    assert [k for k, _ in plan.injected] == [kind, kind]
    usage = client.usage.as_dict()
    assert usage["retries"] == 2 and usage["retry_causes"] == {cause: 2}
    assert usage["attempts"] == 7 and usage["requests"] == 5 and usage["failures"] == 0
    assert time.monotonic() - start < 6.0  # slow answers (10 s) are cut at timeout_s


def test_retry_after_is_honoured(make_client):
    plan = FaultPlan([Fault("429", times=1, retry_after=0.4)])
    with serve(Tiny(), faults=plan) as url:
        client = make_client(url, max_concurrency=1, backoff_s=0.001)
        start = time.monotonic()
        (answer,) = client.generate(reqs(1))
        elapsed = time.monotonic() - start
    assert answer.text == "re: q0"
    assert 0.4 <= elapsed < 5.0


def test_random_faults_all_recovered(make_client):
    plan = FaultPlan(rate=0.3, seed=3)
    with serve(Tiny(), faults=plan) as url:
        client = make_client(url, max_concurrency=8, max_retries=12)
        out = client.generate(reqs(60))
    assert [c.text for c in out] == [f"re: q{i}" for i in range(60)]
    assert len(plan.injected) >= 5
    assert client.usage.retries == len(plan.injected)


# ----- failures -----------------------------------------------------------------------------


def test_exhausted_retries_name_the_request_and_keep_finished_answers(make_client):
    plan = FaultPlan([Fault("500", times=None, match=prompt_contains("poison"), message="boom")])
    backend = Tiny()
    with serve(backend, faults=plan) as url:
        client = make_client(url, max_concurrency=1, max_retries=2)
        requests = [Request("a"), Request("b"), Request("poison"), Request("d")]
        delivered = {}
        with pytest.raises(HTTPBackendError) as info:
            client.generate(requests, on_result=lambda i, c: delivered.__setitem__(i, c.text))
    err = info.value
    assert isinstance(err, BackendError)
    assert err.index == 2 and err.status == 500
    text = str(err)
    assert "request 2 of 4" in text and "3 attempts" in text and "HTTP 500" in text
    assert "boom" in text
    assert delivered == {0: "re: a", 1: "re: b"}
    assert {i: c.text for i, c in err.completed.items()} == delivered
    assert [r.prompt for r in backend.seen] == ["a", "b"]  # "d" was never started
    assert client.usage.failures == 1 and client.usage.retries == 2


def test_failure_with_concurrency_still_delivers_the_others(make_client):
    plan = FaultPlan([Fault("503", times=None, match=prompt_contains("q3"))])
    with serve(Tiny(delay_s=0.02), faults=plan) as url:
        client = make_client(url, max_concurrency=8, max_retries=3, backoff_s=0.05)
        delivered = {}
        with pytest.raises(HTTPBackendError, match="request 3 of 6") as info:
            client.generate(reqs(6), on_result=lambda i, c: delivered.__setitem__(i, c))
    assert set(delivered) == {0, 1, 2, 4, 5}  # all were in flight: none is lost
    assert info.value.completed == delivered


@pytest.mark.parametrize("status", [400, 401, 403, 404, 422])
def test_client_errors_are_not_retried(make_client, status):
    plan = FaultPlan([Fault(status, message="you asked wrong")])
    with serve(Tiny(), faults=plan) as url:
        client = make_client(url, max_concurrency=1, max_retries=5)
        with pytest.raises(HTTPBackendError) as info:
            client.generate(reqs(1))
    assert f"HTTP {status}" in str(info.value) and "you asked wrong" in str(info.value)
    assert "1 attempt" in str(info.value)
    assert info.value.status == status and info.value.index == 0
    assert client.usage.attempts == 1 and client.usage.retries == 0


def test_timeouts_exhausted_fail_fast(make_client):
    plan = FaultPlan([Fault("slow", times=None, delay_s=30.0)])
    start = time.monotonic()
    with serve(Tiny(), faults=plan) as url:
        client = make_client(url, max_concurrency=1, timeout_s=0.2, max_retries=1)
        with pytest.raises(HTTPBackendError, match="no answer within 0.2s"):
            client.generate(reqs(1))
    assert time.monotonic() - start < 8.0  # the slow answer (30 s) is cut, not waited for


def test_server_down_is_a_connect_error(make_client):
    with serve(Tiny()) as url:
        pass  # stopped: nothing listens on the port any more
    client = make_client(url, max_retries=1)
    with pytest.raises(HTTPBackendError, match="request 0 of 1 failed after 2 attempts"):
        client.generate(reqs(1))
    assert client.usage.retry_causes == {"connect": 1}


def test_on_result_exception_propagates(make_client):
    with serve(Tiny()) as url:
        client = make_client(url, max_concurrency=2)

        def explode(i, c):
            raise KeyError("store is full")

        with pytest.raises(KeyError, match="store is full"):
            client.generate(reqs(4), on_result=explode)
        assert len(client.generate(reqs(3))) == 3  # the pool is still usable


# ----- API key ------------------------------------------------------------------------------


def _all_text(err: BaseException) -> str:
    return "".join(traceback.format_exception(err)) + repr(err) + str(err)


def test_api_key_sent_as_bearer_and_never_leaked(make_client, monkeypatch):
    monkeypatch.setenv(KEY_ENV, SECRET)
    with LLMServer(Tiny(), api_key=SECRET) as server:
        client = make_client(server.url)
        request = Request("hi")
        assert client.generate([request])[0].text == "re: hi"
        assert server.stats.unauthorized == 0
        for text in (
            repr(client),
            str(client),
            json.dumps(client.cache_identity(request)),
            json.dumps(client.score_identity("p", ["c"])),
            repr(vars(client)),
            repr(client.usage),
        ):
            assert SECRET not in text
        with pytest.raises(TypeError):
            pickle.dumps(client)

        monkeypatch.setenv(KEY_ENV, SECRET + "-wrong")  # the server refuses: 401, no retry
        with pytest.raises(HTTPBackendError, match="HTTP 401") as info:
            client.generate([request])
        assert SECRET not in _all_text(info.value)
        assert server.stats.unauthorized == 1

        monkeypatch.delenv(KEY_ENV)  # no key at all: no Authorization header
        with pytest.raises(HTTPBackendError, match="HTTP 401"):
            client.generate([request])
        assert server.stats.unauthorized == 2


def test_key_echoed_by_server_is_redacted(make_client, monkeypatch):
    monkeypatch.setenv(KEY_ENV, SECRET)
    plan = FaultPlan([Fault(403, message=f"key {SECRET} was revoked")])
    with serve(Tiny(), faults=plan) as url:
        client = make_client(url)
        with pytest.raises(HTTPBackendError, match="was revoked") as info:
            client.generate(reqs(1))
    assert SECRET not in _all_text(info.value)
    assert "[redacted]" in str(info.value)


# ----- usage and cost -----------------------------------------------------------------------


def test_usage_and_cost(make_client):
    plan = FaultPlan([Fault("500", times=1)])
    with serve(Tiny(), faults=plan) as url:
        client = make_client(
            url, price_per_million_input=2.0, price_per_million_output=8.0, max_concurrency=1
        )
        client.generate(reqs(10))
    usage = client.usage.as_dict()
    assert usage == {
        "requests": 10,
        "attempts": 11,
        "retries": 1,
        "failures": 0,
        "prompt_tokens": 30,
        "completion_tokens": 50,
        "cost": pytest.approx((30 * 2.0 + 50 * 8.0) / 1e6),
        "retry_causes": {"500": 1},
    }


# ----- scoring ------------------------------------------------------------------------------


def test_score_via_completions_echo_logprobs(make_client):
    plan = FaultPlan([Fault("500", times=1, path="/completions")])
    with LLMServer(Tiny(), before_request=plan) as server:
        client = make_client(server.url, max_concurrency=2)
        prompts = ["Which is right? Answer:", "Pick one:"]
        candidates = [[" yes", " no way"], [" A", " B", " C or D"]]
        got = {}
        scores = client.score(prompts, candidates, on_result=got.__setitem__)
        expected = [[-0.5 * len(c) for c in cands] for cands in candidates]
        assert scores == [pytest.approx(row) for row in expected]
        assert got == {0: scores[0], 1: scores[1]}
        assert server.stats.requests["/v1/completions"] == 3  # one per prompt, one retried
        assert client.usage.requests == 2 and client.usage.prompt_tokens > 0
        assert client.score([], []) == [] and client.score(["p"], [[]]) == [[]]


def test_score_unsupported_is_a_clear_error(make_client):
    with serve(NoScore()) as url:
        client = make_client(url, max_retries=3)
        with pytest.raises(HTTPBackendError, match="cannot score by echo\\+logprobs") as info:
            client.score(["p"], [[" a"]])
    assert info.value.status == 400 and client.usage.attempts == 1


def test_server_pieces_roundtrip():
    for text in ["", "a", " lead", "two words  and\ttabs\n", "trailing   "]:
        assert "".join(split_pieces(text)) == text


# ----- the command line and the benchmark ---------------------------------------------------


def test_command_line_server(make_client):
    proc = subprocess.Popen(
        [sys.executable, "-m", "jaxmarl_llm.testing.fault_server", "--port", "0",
         "--backend", "echo", "--faults", "500*1"],
        cwd=ROOT, stdout=subprocess.PIPE, text=True,
    )  # fmt: skip
    try:
        line = proc.stdout.readline()
        assert line.startswith("serving 'echo' at http://127.0.0.1:"), line
        client = make_client(line.split(" at ")[1].strip())
        client.model = "echo"
        assert [c.text for c in client.generate(reqs(3, "w"))] == ["w0", "w1", "w2"]
        assert client.usage.retries == 1
    finally:
        proc.terminate()
        proc.wait(timeout=10)


def test_shipped_command_line_has_no_test_backend_or_faults():
    parser = build_parser(BACKENDS)
    assert parser.parse_args(["--backend", "gemma", "--port", "0"]).backend == "gemma"
    for argv in ([], ["--backend", "echo"], ["--backend", "gemma", "--faults", "500"]):
        with pytest.raises(SystemExit):
            parser.parse_args(argv)


def test_before_request_hook_sees_each_post_and_may_pass_it_on(make_client):
    seen = []

    def hook(handler, path, body):
        seen.append((path, body["messages"][-1]["content"]))
        return False

    with LLMServer(Tiny(), before_request=hook) as server:
        client = make_client(server.url, max_concurrency=1)
        assert [c.text for c in client.generate(reqs(2))] == ["re: q0", "re: q1"]
    assert seen == [("/v1/chat/completions", "q0"), ("/v1/chat/completions", "q1")]


def test_fault_plan_parse_and_echo_backend():
    plan = FaultPlan.parse("429:0.5*2,slow:1.5,drop*0")
    first = plan.take("/v1/chat/completions", {})
    assert (first.kind, first.retry_after) == ("429", 0.5)
    assert plan.take("/x", {}).kind == "429"
    assert (plan.take("/x", {}).kind, plan.take("/x", {}).kind) == ("slow", "drop")
    assert plan.take("/x", {}).kind == "drop"  # *0: forever
    with pytest.raises(ValueError, match="unknown fault kind"):
        Fault("teapot")
    (echo,) = EchoBackend().generate([Request("a b c", params=SamplingParams(max_tokens=2))])
    assert echo == Completion("a b", 3, 2, "length")


def test_throughput_benchmark_runs(capfd):
    module = load_script("benchmarks/http_throughput.py")
    out = module.main(["--requests", "20", "--concurrency", "1", "4", "--in-process", "--json"])
    printed = json.loads(capfd.readouterr().out.strip().splitlines()[-1])
    assert printed == out
    assert [row["max_concurrency"] for row in out["results"]] == [1, 4]
    assert all(row["requests_per_s"] > 0 for row in out["results"])


def test_bad_url_fails_at_once(make_client):
    client = make_client("localhost:8000/v1", max_retries=3)  # no scheme
    with pytest.raises(HTTPBackendError, match="1 attempt: cannot send the request"):
        client.generate(reqs(1))
    assert client.usage.retries == 0

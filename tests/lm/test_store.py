"""The label store: answers survive restarts and kills, replay never calls the model."""

import os
import signal
import sqlite3
import subprocess
import sys
import textwrap
import time

import pytest

from jaxmarl_llm.lm.backend import Backend, Completion, Request, SamplingParams
from jaxmarl_llm.lm.store import CachedBackend, CacheMiss, LabelStore, query_key


class CountingBackend(Backend):
    """Answers "echo:<prompt>", counts what it was asked, optionally fails after k answers."""

    kind = "counting"
    model = "m"

    def __init__(self, fail_after=None):
        self.asked = []
        self.fail_after = fail_after

    def generate(self, requests, on_result=None):
        out = []
        for i, r in enumerate(requests):
            if self.fail_after is not None and len(self.asked) >= self.fail_after:
                raise RuntimeError("backend died")
            self.asked.append(r.prompt)
            c = Completion(
                text=f"echo:{r.prompt}", prompt_tokens=len(r.prompt), completion_tokens=1
            )
            out.append(c)
            if on_result is not None:
                on_result(i, c)
        return out

    def score(self, prompts, candidates):
        self.asked.extend(prompts)
        return [[-float(len(c)) for c in cands] for cands in candidates]


def _requests(n, seed=0):
    return [Request(f"q{i}", params=SamplingParams(seed=seed)) for i in range(n)]


def test_answers_are_reused_across_store_instances(tmp_path):
    path = tmp_path / "labels.sqlite"
    backend = CountingBackend()
    with LabelStore(path) as store:
        first = CachedBackend(backend, store).generate(_requests(5))
    assert len(backend.asked) == 5
    with LabelStore(path) as store:
        cached = CachedBackend(backend, store)
        again = cached.generate(_requests(7))
        assert cached.stats() == {"hits": 5, "misses": 2, "stored": 7}
    assert again[:5] == first
    assert backend.asked[5:] == ["q5", "q6"]


def test_sampling_parameters_are_part_of_the_key(tmp_path):
    with LabelStore(tmp_path / "s.sqlite") as store:
        cached = CachedBackend(CountingBackend(), store)
        cached.generate(_requests(3, seed=0))
        cached.generate(_requests(3, seed=1))  # a repeat query with a new seed is a new query
        assert cached.misses == 6


def test_duplicates_in_one_batch_are_asked_once(tmp_path):
    backend = CountingBackend()
    with LabelStore(tmp_path / "s.sqlite") as store:
        out = CachedBackend(backend, store).generate([Request("a"), Request("b"), Request("a")])
    assert backend.asked == ["a", "b"]
    assert out[0] == out[2]


def test_replay_mode_fails_loudly_on_a_miss(tmp_path):
    with LabelStore(tmp_path / "s.sqlite") as store:
        CachedBackend(CountingBackend(), store).generate(_requests(2))
        backend = CountingBackend()
        replay = CachedBackend(backend, store, mode="replay")
        assert [c.text for c in replay.generate(_requests(2))] == ["echo:q0", "echo:q1"]
        with pytest.raises(CacheMiss, match=r"1 of 3 queries.*'q2'"):
            replay.generate(_requests(3))
        assert backend.asked == []


def test_unknown_cache_mode_names_the_choices(tmp_path):
    with LabelStore(tmp_path / "s.sqlite") as store:
        with pytest.raises(ValueError, match=r"unknown cache mode 'relpay'.*replay"):
            CachedBackend(CountingBackend(), store, mode="relpay")


def test_answers_before_a_backend_failure_are_kept(tmp_path):
    path = tmp_path / "s.sqlite"
    with LabelStore(path) as store:
        with pytest.raises(RuntimeError, match="backend died"):
            CachedBackend(CountingBackend(fail_after=3), store).generate(_requests(6))
        assert len(store) == 3
        backend = CountingBackend()
        CachedBackend(backend, store).generate(_requests(6))
        assert backend.asked == ["q3", "q4", "q5"]


def test_store_is_append_only_and_in_wal_mode(tmp_path):
    path = tmp_path / "s.sqlite"
    with LabelStore(path) as store:
        ident = {"kind": "k", "model": "m", "prompt": "p"}
        store.put(query_key(ident), ident, {"text": "first"})
        store.put(query_key(ident), ident, {"text": "second"})
        assert store.get_many([query_key(ident)]) == {query_key(ident): {"text": "first"}}
        assert store.rows()[0]["query"] == ident
    mode = sqlite3.connect(path).execute("PRAGMA journal_mode").fetchone()[0]
    assert mode == "wal"


def test_score_answers_are_cached(tmp_path):
    backend = CountingBackend()
    with LabelStore(tmp_path / "s.sqlite") as store:
        cached = CachedBackend(backend, store)
        first = cached.score(["p1", "p2"], [["a", "bb"], ["ccc"]])
        second = cached.score(["p1", "p2"], [["a", "bb"], ["ccc"]])
        with pytest.raises(CacheMiss):
            CachedBackend(backend, store, mode="replay").score(["p3"], [["a"]])
    assert first == second == [[-1.0, -2.0], [-3.0]]
    assert backend.asked == ["p1", "p2"]


def test_a_file_that_is_not_a_store_is_named(tmp_path):
    path = tmp_path / "labels.sqlite"
    path.write_bytes(b"this is not sqlite" * 100)
    with pytest.raises(ValueError, match="labels.sqlite is not a readable SQLite database"):
        LabelStore(path)


_SLOW_LABELER = textwrap.dedent(
    """
    import sys, time
    sys.path.insert(0, {tests_dir!r})
    from test_store import CountingBackend, _requests
    from jaxmarl_llm.lm.store import CachedBackend, LabelStore

    class Slow(CountingBackend):
        def generate(self, requests, on_result=None):
            def slow(i, c):
                time.sleep(0.02)
                on_result(i, c)
            return super().generate(requests, on_result=slow)

    CachedBackend(Slow(), LabelStore(sys.argv[1])).generate(_requests(400))
    """
)


def test_killing_a_labeling_run_loses_no_finished_answer(tmp_path):
    path = tmp_path / "kill.sqlite"
    script = tmp_path / "label.py"
    script.write_text(_SLOW_LABELER.format(tests_dir=os.path.dirname(__file__)))
    proc = subprocess.Popen([sys.executable, str(script), str(path)])
    try:
        deadline = time.time() + 60
        while time.time() < deadline:
            if path.exists():
                try:
                    n = sqlite3.connect(path).execute("SELECT COUNT(*) FROM answers").fetchone()[0]
                except sqlite3.OperationalError:
                    n = 0  # table not created yet
                if n >= 20:
                    break
            time.sleep(0.05)
        proc.send_signal(signal.SIGKILL)
        proc.wait(10)
    finally:
        if proc.poll() is None:
            proc.kill()
    with LabelStore(path) as store:
        kept = len(store)
        assert 20 <= kept < 400
        backend = CountingBackend()
        out = CachedBackend(backend, store).generate(_requests(400))
        assert len(backend.asked) == 400 - kept
        assert [c.text for c in out] == [f"echo:q{i}" for i in range(400)]
        assert len(store) == 400


def test_closing_a_backend_that_opened_its_store_writes_the_answers_into_the_file(tmp_path):
    """A store opened for the backend is closed with it: the answers leave SQLite's
    write-ahead log for the database file, and the counts stay readable."""
    path = tmp_path / "labels.sqlite"
    cached = CachedBackend(CountingBackend(), LabelStore(path), owns_store=True)
    cached.generate([Request("only-in-the-file", params=SamplingParams(seed=0))])
    cached.close()
    assert not path.with_name("labels.sqlite-wal").exists()
    assert b"echo:only-in-the-file" in path.read_bytes()
    assert cached.stats() == {"hits": 0, "misses": 1, "stored": 1}
    shared = LabelStore(path)  # a store passed in stays the caller's to close
    CachedBackend(CountingBackend(), shared).close()
    assert len(shared) == 1
    shared.close()

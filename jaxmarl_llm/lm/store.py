"""The label store: every query and answer, on disk, append-only and crash-safe.

SQLite in WAL mode: each answer is committed as soon as it arrives, so killing a
labeling run loses no finished answer, and a restarted run finds them and asks only for
the rest. Rows are never updated or deleted. A query's key is the SHA-256 of what
determines its answer (backend kind, model, prompt, sampling parameters; see
``Backend.cache_identity``); to ask the same prompt several times (multi-query labels),
vary ``SamplingParams.seed``.

:class:`CachedBackend` wraps any backend with the store. ``mode="replay"`` never calls
the model and fails loudly on a miss, so a published run can be re-labelled exactly.
"""

from __future__ import annotations

import hashlib
import json
import sqlite3
import threading
import time
from collections.abc import Callable, Sequence
from enum import Enum
from pathlib import Path
from typing import Any

from jaxmarl_llm.errors import RunError
from jaxmarl_llm.lm.backend import Backend, Completion, Request, canonical_json

_SCHEMA = """
CREATE TABLE IF NOT EXISTS answers (
    key TEXT PRIMARY KEY,
    kind TEXT NOT NULL,
    model TEXT NOT NULL,
    query TEXT NOT NULL,
    answer TEXT NOT NULL,
    created REAL NOT NULL
);
"""


class CacheMiss(RunError, LookupError):
    """Replay mode met a query that is not in the store."""


class CacheMode(str, Enum):
    use = "use"  # read stored answers, ask the backend on a miss, store its answer
    replay = "replay"  # read stored answers only; a miss raises CacheMiss


def query_key(identity: dict[str, Any]) -> str:
    return hashlib.sha256(canonical_json(identity).encode()).hexdigest()


class LabelStore:
    """Append-only answers keyed by query; safe to share between threads."""

    def __init__(self, path: str | Path):
        self.path = Path(path)
        self.path.parent.mkdir(parents=True, exist_ok=True)
        try:
            self._db = sqlite3.connect(self.path, check_same_thread=False, isolation_level=None)
            self._db.execute("PRAGMA journal_mode=WAL")
            # NORMAL in WAL mode survives a killed process (the case labeling runs meet);
            # only an OS crash or power loss can drop the last commits, never corrupt.
            self._db.execute("PRAGMA synchronous=NORMAL")
            self._db.execute("PRAGMA busy_timeout=30000")
            self._db.executescript(_SCHEMA)
        except sqlite3.DatabaseError as e:
            raise ValueError(
                f"label store {self.path} is not a readable SQLite database: {e}"
            ) from e
        self._lock = threading.Lock()

    def get_many(self, keys: Sequence[str]) -> dict[str, Any]:
        """Stored answers for the keys that have one (decoded JSON)."""
        found: dict[str, Any] = {}
        unique = list(dict.fromkeys(keys))
        with self._lock:
            for start in range(0, len(unique), 500):  # SQLite's host-parameter limit
                chunk = unique[start : start + 500]
                marks = ",".join("?" * len(chunk))
                rows = self._db.execute(
                    f"SELECT key, answer FROM answers WHERE key IN ({marks})", chunk
                ).fetchall()
                found.update((k, json.loads(a)) for k, a in rows)
        return found

    def put(self, key: str, identity: dict[str, Any], answer: Any) -> None:
        """Store one answer now (its own transaction). A key already stored is kept."""
        with self._lock:
            self._db.execute(
                "INSERT OR IGNORE INTO answers (key, kind, model, query, answer, created) "
                "VALUES (?, ?, ?, ?, ?, ?)",
                (
                    key,
                    str(identity.get("kind", "")),
                    str(identity.get("model", "")),
                    canonical_json(identity),
                    json.dumps(answer),
                    time.time(),
                ),
            )

    def __len__(self) -> int:
        with self._lock:
            return self._db.execute("SELECT COUNT(*) FROM answers").fetchone()[0]

    def rows(self) -> list[dict[str, Any]]:
        """Every stored (query, answer), oldest first: for audits and exports."""
        with self._lock:
            rows = self._db.execute(
                "SELECT kind, model, query, answer, created FROM answers ORDER BY rowid"
            ).fetchall()
        return [
            {"kind": k, "model": m, "query": json.loads(q), "answer": json.loads(a), "created": c}
            for k, m, q, a, c in rows
        ]

    def close(self) -> None:
        with self._lock:
            self._db.close()

    def __enter__(self) -> LabelStore:
        return self

    def __exit__(self, *exc) -> None:
        self.close()


class CachedBackend(Backend):
    """Any backend behind the label store. Counts hits and misses for the run report.
    ``owns_store``: ``close`` closes the store too (it was opened for this backend), so
    its answers are in the database file, not only in SQLite's write-ahead log."""

    def __init__(
        self,
        backend: Backend,
        store: LabelStore,
        mode: CacheMode | str = "use",
        owns_store: bool = False,
    ):
        try:
            self.mode = CacheMode(mode)
        except ValueError:
            raise ValueError(
                f"unknown cache mode {mode!r}; valid: {[m.value for m in CacheMode]}"
            ) from None
        self.backend = backend
        self.store = store
        self.owns_store = owns_store
        self._stored_at_close: int | None = None
        self.kind = backend.kind
        self.model = backend.model
        self.hits = 0
        self.misses = 0

    def cache_identity(self, request: Request) -> dict[str, Any]:
        return self.backend.cache_identity(request)

    def _miss(self, what: str, identity: dict[str, Any]) -> CacheMiss:
        head = str(identity.get("prompt", identity.get("score_prompt", "")))[:120]
        return CacheMiss(
            f"replay mode: {what} not in label store {self.store.path} "
            f"(backend {self.kind!r}, model {self.model!r}, prompt starting {head!r}); "
            "run once with cache mode 'use' to label it"
        )

    def generate(
        self,
        requests: Sequence[Request],
        on_result: Callable[[int, Completion], None] | None = None,
    ) -> list[Completion]:
        identities = [self.backend.cache_identity(r) for r in requests]
        keys = [query_key(i) for i in identities]
        stored = self.store.get_many(keys)
        results: list[Completion | None] = [None] * len(requests)
        todo: list[int] = []
        first_of_key: dict[str, int] = {}
        for i, key in enumerate(keys):
            if key in stored:
                results[i] = Completion(**stored[key])
                self.hits += 1
                if on_result is not None:
                    on_result(i, results[i])
            elif key in first_of_key:
                continue  # duplicate query in this batch: ask once, copy below
            else:
                first_of_key[key] = i
                todo.append(i)
        if todo and self.mode == CacheMode.replay:
            raise self._miss(f"{len(todo)} of {len(requests)} queries", identities[todo[0]])

        def store_one(j: int, completion: Completion) -> None:
            i = todo[j]
            self.store.put(keys[i], identities[i], completion.__dict__)
            results[i] = completion
            if on_result is not None:
                on_result(i, completion)

        if todo:
            self.misses += len(todo)
            answers = self.backend.generate([requests[i] for i in todo], on_result=store_one)
            for j, completion in enumerate(answers):
                if results[todo[j]] is None:  # backend did not call back for this one
                    store_one(j, completion)
        for i, key in enumerate(keys):
            if results[i] is None:
                results[i] = results[first_of_key[key]]
                if on_result is not None:
                    on_result(i, results[i])
        return results  # type: ignore[return-value]

    def score(
        self, prompts: Sequence[str], candidates: Sequence[Sequence[str]]
    ) -> list[list[float]]:
        identities = [
            self.backend.score_identity(p, c) for p, c in zip(prompts, candidates, strict=True)
        ]
        keys = [query_key(i) for i in identities]
        stored = self.store.get_many(keys)
        todo = [i for i, k in enumerate(keys) if k not in stored]
        if todo and self.mode == CacheMode.replay:
            raise self._miss(f"{len(todo)} of {len(prompts)} scoring queries", identities[todo[0]])
        self.hits += len(prompts) - len(todo)
        self.misses += len(todo)
        if todo:
            scores = self.backend.score([prompts[i] for i in todo], [candidates[i] for i in todo])
            for i, s in zip(todo, scores, strict=True):
                stored[keys[i]] = [float(x) for x in s]
                self.store.put(keys[i], identities[i], stored[keys[i]])
        return [list(stored[k]) for k in keys]

    def stats(self) -> dict[str, int]:
        stored = len(self.store) if self._stored_at_close is None else self._stored_at_close
        return {"hits": self.hits, "misses": self.misses, "stored": stored}

    def close(self) -> None:
        self.backend.close()
        if self.owns_store and self._stored_at_close is None:
            self._stored_at_close = len(self.store)
            self.store.close()

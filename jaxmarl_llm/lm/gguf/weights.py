"""A family's float32 decoder weights from a GGUF file: dequantized once, laid out as the
decoder's parameters (layer-stacked, ``[in, out]`` kernels) and kept in the on-disk cache,
which later loads read instead."""

from __future__ import annotations

import dataclasses
import os
import pathlib
import time
from typing import Any

import numpy as np

from .cache import (
    CACHE_FORMAT,
    cache_dir,
    file_key,
    read_weights_cache,
    sha256,
    write_weights_cache,
)
from .dequantize import dequantize
from .errors import GGUFWeightsError
from .family import GGUFFamily, TensorLayout
from .reader import open_gguf, read_metadata


@dataclasses.dataclass
class LoadedWeights:
    config: Any  # the family's config
    arrays: dict[str, np.ndarray]  # flat "a/b/c" -> float32
    gguf_path: pathlib.Path
    cache_path: pathlib.Path | None
    from_cache: bool
    seconds: float
    sha256: str = ""  # of the GGUF file: identifies the model in the label store
    # The parsed GGUF when the weights were read from it (None from the cache): parsing a
    # large vocabulary takes seconds, so the tokenizer is built from this one.
    reader: Any = None


def load_weights(
    family: GGUFFamily, gguf_path: str | os.PathLike | None = None, *, use_cache: bool = True
) -> LoadedWeights:
    """``family``'s config and float32 weights from ``gguf_path`` (default: the family's
    file); dequantizes on first use and caches the result."""
    t0 = time.perf_counter()
    path = pathlib.Path(gguf_path) if gguf_path is not None else family.default_path()
    if not path.is_file():
        open_gguf(path, family.error)  # raises the helpful error
    entry = cache_dir() / family.cache_entry.format(stem=path.stem, key=file_key(path))
    if use_cache and (hit := read_weights_cache(entry, path, family.config_type)) is not None:
        cfg, arrays, sha = hit
        npz = entry / "weights.npz"
        return LoadedWeights(cfg, arrays, path, npz, True, time.perf_counter() - t0, sha)
    reader = open_gguf(path, family.error)
    cfg = family.config_type.from_metadata(read_metadata(reader), {t.name for t in reader.tensors})
    try:
        raw = {t.name: dequantize(t, family.error) for t in reader.tensors}
    except Exception as e:  # noqa: BLE001 - re-raised with the fix
        raise family.error.undequantizable(path, e) from e
    arrays = arrange(family.tensor_layout(cfg), raw, cfg, family.error)
    del raw
    sha = sha256(path)
    info = {"config": cfg.to_json(), "gguf": str(path), "gguf_sha256": sha, "format": CACHE_FORMAT}
    cache_path = write_weights_cache(entry, arrays, info) if use_cache else None
    seconds = time.perf_counter() - t0
    return LoadedWeights(cfg, arrays, path, cache_path, False, seconds, sha, reader)


def arrange(
    layout: TensorLayout,
    raw: dict[str, np.ndarray],
    cfg: Any,
    error: type[GGUFWeightsError] = GGUFWeightsError,
) -> dict[str, np.ndarray]:
    """GGUF tensors (numpy axis order) -> the decoder's flat ``"a/b/c"`` parameters, their
    shapes checked against ``cfg.decoder``."""

    def tensor(name: str) -> np.ndarray:
        if name not in raw:
            raise error(f"GGUF lacks tensor {name!r}")
        return raw[name]

    def place(path: str, a: np.ndarray) -> np.ndarray:
        if layout.prepare is not None:
            a = layout.prepare(path, a)
        return a.T if path.endswith("/kernel") else a

    out = {}
    for path, name in layout.whole.items():
        a = place(path, tensor(name))
        out[path] = np.ascontiguousarray(a) if path.endswith("/kernel") else a
    for path, name in layout.per_layer.items():
        stacked = [place(f"layers/{path}", tensor(f"blk.{i}.{name}")) for i in range(cfg.n_layers)]
        out[f"layers/{path}"] = np.ascontiguousarray(np.stack(stacked))
    for path, shape in expected_shapes(cfg.decoder).items():
        if out[path].shape != shape:
            raise error(f"{path} has shape {out[path].shape}, config implies {shape}")
    return out


def expected_shapes(cfg) -> dict[str, tuple[int, ...]]:
    """The shapes a :class:`~jaxmarl_llm.lm.decoder.DecoderConfig` implies for the
    embedding and the layers' projections."""
    q_out, kv_out = cfg.n_heads * cfg.head_dim, cfg.n_kv_heads * cfg.head_dim
    shapes = {
        "embed/embedding": (cfg.vocab_size, cfg.d_model),
        "layers/attn/q/kernel": (cfg.n_layers, cfg.d_model, q_out),
        "layers/attn/k/kernel": (cfg.n_layers, cfg.d_model, kv_out),
        "layers/attn/v/kernel": (cfg.n_layers, cfg.d_model, kv_out),
        "layers/attn/o/kernel": (cfg.n_layers, q_out, cfg.d_model),
        "layers/mlp/gate/kernel": (cfg.n_layers, cfg.d_model, cfg.ffn_dim),
        "layers/mlp/down/kernel": (cfg.n_layers, cfg.ffn_dim, cfg.d_model),
    }
    if not cfg.tie_embeddings:
        shapes["lm_head/kernel"] = (cfg.d_model, cfg.vocab_size)
    return shapes


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

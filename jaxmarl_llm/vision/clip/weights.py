"""CLIP weights from a Hugging Face ``CLIPModel`` checkpoint directory.

The directory holds ``config.json`` and ``model.safetensors`` (or ``pytorch_model.bin``,
which needs torch to read), and usually the tokenizer files (``vocab.json`` +
``merges.txt`` or ``tokenizer.json``). Nothing is downloaded here: the user provides the
directory (``shaping.kwargs.clip_weights=PATH``).

Layout conversions: torch ``nn.Linear`` weights ``[out, in]`` become Flax kernels
``[in, out]``; the patch conv ``[out, in, kh, kw]`` becomes ``[kh, kw, in, out]``;
per-layer tensors are stacked on a leading layer axis for ``nn.scan``.
"""

from __future__ import annotations

import dataclasses
import json
import os
import pathlib
from collections.abc import Callable
from typing import Any

import jax
import numpy as np

from .config import CLIPConfig, CLIPWeightsError
from .model import Params, param_shapes
from .tokenizer import CLIPTokenizer

WEIGHTS_HINT = (
    "no CLIP weights can be downloaded here; provide a Hugging Face CLIP checkpoint "
    "directory (config.json + model.safetensors, e.g. a local copy of "
    "openai/clip-vit-base-patch32) with shaping.kwargs.clip_weights=PATH"
)


def _linear(w: np.ndarray) -> np.ndarray:
    return w.T


def _conv(w: np.ndarray) -> np.ndarray:
    return w.transpose(2, 3, 1, 0)


def _same(w: np.ndarray) -> np.ndarray:
    return w


# per-layer HF suffix -> (our path under ``layers/``, conversion)
_LAYER = {
    "self_attn.q_proj.weight": ("q/kernel", _linear),
    "self_attn.q_proj.bias": ("q/bias", _same),
    "self_attn.k_proj.weight": ("k/kernel", _linear),
    "self_attn.k_proj.bias": ("k/bias", _same),
    "self_attn.v_proj.weight": ("v/kernel", _linear),
    "self_attn.v_proj.bias": ("v/bias", _same),
    "self_attn.out_proj.weight": ("o/kernel", _linear),
    "self_attn.out_proj.bias": ("o/bias", _same),
    "layer_norm1.weight": ("ln1/scale", _same),
    "layer_norm1.bias": ("ln1/bias", _same),
    "layer_norm2.weight": ("ln2/scale", _same),
    "layer_norm2.bias": ("ln2/bias", _same),
    "mlp.fc1.weight": ("fc1/kernel", _linear),
    "mlp.fc1.bias": ("fc1/bias", _same),
    "mlp.fc2.weight": ("fc2/kernel", _linear),
    "mlp.fc2.bias": ("fc2/bias", _same),
}

# HF name -> (our path, conversion), the tensors outside the layer stacks
_TOP: dict[str, tuple[str, Callable[[np.ndarray], np.ndarray]]] = {
    "logit_scale": ("logit_scale", _same),
    "visual_projection.weight": ("visual_projection/kernel", _linear),
    "text_projection.weight": ("text_projection/kernel", _linear),
    "vision_model.embeddings.class_embedding": ("vision/class_embedding", _same),
    "vision_model.embeddings.patch_embedding.weight": ("vision/patch_embed/kernel", _conv),
    "vision_model.embeddings.position_embedding.weight": ("vision/position_embedding", _same),
    "vision_model.pre_layrnorm.weight": ("vision/pre_ln/scale", _same),
    "vision_model.pre_layrnorm.bias": ("vision/pre_ln/bias", _same),
    "vision_model.post_layernorm.weight": ("vision/post_ln/scale", _same),
    "vision_model.post_layernorm.bias": ("vision/post_ln/bias", _same),
    "text_model.embeddings.token_embedding.weight": ("text/token_embedding/embedding", _same),
    "text_model.embeddings.position_embedding.weight": ("text/position_embedding", _same),
    "text_model.final_layer_norm.weight": ("text/final_ln/scale", _same),
    "text_model.final_layer_norm.bias": ("text/final_ln/bias", _same),
}


def _flat_shapes(tree: Params, prefix: str = "") -> dict[str, tuple[int, ...]]:
    out = {}
    for k, v in tree.items():
        if isinstance(v, dict):
            out.update(_flat_shapes(v, f"{prefix}{k}/"))
        else:
            out[f"{prefix}{k}"] = tuple(v.shape)
    return out


def _unflatten(arrays: dict[str, Any]) -> Params:
    tree: dict[str, Any] = {}
    for key, value in arrays.items():
        node = tree
        *parents, leaf = key.split("/")
        for p in parents:
            node = node.setdefault(p, {})
        node[leaf] = value
    return tree


def params_from_hf(cfg: CLIPConfig, tensors: dict[str, np.ndarray]) -> Params:
    """HF ``CLIPModel`` state dict (numpy) -> our parameter tree, shape-checked against ``cfg``."""
    expect = _flat_shapes(param_shapes(cfg))
    out: dict[str, np.ndarray] = {}

    def put(src: str, dst: str, conv, want: tuple[int, ...]) -> np.ndarray:
        if src not in tensors:
            raise CLIPWeightsError(f"CLIP checkpoint lacks tensor {src!r}")
        a = conv(np.asarray(tensors[src], np.float32))
        if a.shape != want:
            raise CLIPWeightsError(
                f"CLIP tensor {src!r} has shape {a.shape} after conversion to {dst!r}, "
                f"but the config implies {want}"
            )
        return a

    for src, (dst, conv) in _TOP.items():
        out[dst] = put(src, dst, conv, expect[dst])
    used = set(_TOP)
    for tower, n_layers in (("vision", cfg.vision_layers), ("text", cfg.text_layers)):
        for suffix, (sub, conv) in _LAYER.items():
            dst = f"{tower}/layers/{sub}"
            per_layer = []
            for i in range(n_layers):
                src = f"{tower}_model.encoder.layers.{i}.{suffix}"
                per_layer.append(put(src, dst, conv, expect[dst][1:]))
                used.add(src)
            out[dst] = np.ascontiguousarray(np.stack(per_layer))
        extra = f"{tower}_model.encoder.layers.{n_layers}.{next(iter(_LAYER))}"
        if extra in tensors:
            raise CLIPWeightsError(
                f"CLIP checkpoint has tensor {extra!r} but the config has {n_layers} {tower} layers"
            )
    unknown = sorted(k for k in tensors if k not in used and not k.endswith("position_ids"))
    if unknown:
        raise CLIPWeightsError(f"CLIP checkpoint has unexpected tensors: {unknown[:5]}")
    return jax.tree.map(np.asarray, _unflatten(out))


def read_tensors(directory: pathlib.Path) -> dict[str, np.ndarray]:
    """The state dict in ``directory`` as float32 numpy arrays."""
    st = directory / "model.safetensors"
    if st.is_file():
        from safetensors.numpy import load_file

        try:
            return load_file(str(st))
        except Exception as e:  # noqa: BLE001 - re-raised with the file named
            raise CLIPWeightsError(f"cannot read {st}: {type(e).__name__}: {e}") from e
    pt = directory / "pytorch_model.bin"
    if pt.is_file():
        try:
            import torch
        except ImportError as e:
            raise CLIPWeightsError(
                f"{pt} is a PyTorch pickle and torch is not installed; convert it to "
                "model.safetensors (safetensors.torch.save_file) on a machine with torch"
            ) from e
        state = torch.load(str(pt), map_location="cpu", weights_only=True)
        return {k: v.float().numpy() for k, v in state.items()}
    raise CLIPWeightsError(
        f"CLIP weights directory {directory} has neither model.safetensors nor "
        f"pytorch_model.bin; {WEIGHTS_HINT}"
    )


@dataclasses.dataclass
class LoadedCLIP:
    config: CLIPConfig
    params: Params
    tokenizer: CLIPTokenizer | None  # None when the directory has no tokenizer files
    path: pathlib.Path


def load_clip(path: str | os.PathLike) -> LoadedCLIP:
    """Config, parameters and (if present) tokenizer from a HF CLIP checkpoint directory."""
    directory = pathlib.Path(path).expanduser()
    if not directory.exists():
        raise CLIPWeightsError(f"CLIP weights path not found: {directory}; {WEIGHTS_HINT}")
    if directory.is_file():  # a weights file given directly: use its directory
        directory = directory.parent
    cfg_file = directory / "config.json"
    if not cfg_file.is_file():
        raise CLIPWeightsError(f"CLIP weights directory {directory} lacks config.json")
    try:
        cfg = CLIPConfig.from_hf(json.loads(cfg_file.read_text()))
    except json.JSONDecodeError as e:
        raise CLIPWeightsError(f"{cfg_file} is not valid JSON: {e}") from e
    params = params_from_hf(cfg, read_tensors(directory))
    tokenizer = CLIPTokenizer.from_directory(directory, cfg.context_length, missing_ok=True)
    return LoadedCLIP(cfg, params, tokenizer, directory)

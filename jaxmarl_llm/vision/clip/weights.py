"""CLIP weights from a Hugging Face ``CLIPModel`` checkpoint directory (OpenAI-layout
state dicts, e.g. RN50, are mapped in :mod:`.openai`; both fill a :class:`.builder.Builder`),
and back: :func:`params_to_hf`, :func:`config_to_hf` and :func:`save_clip` write a directory
that :func:`load_clip` (and transformers' ``CLIPModel``) reads.

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

import numpy as np
from flax.traverse_util import flatten_dict

from .builder import Builder, flat_shapes
from .config import CLIPConfig, CLIPWeightsError
from .model import Params, param_shapes
from .openai import config_from_openai, is_openai, params_from_openai
from .tokenizer import CLIPTokenizer

WEIGHTS_HINT = (
    "no CLIP weights can be downloaded here; provide a local checkpoint with "
    "shaping.kwargs.clip_weights=PATH: a Hugging Face CLIP directory (config.json + "
    "model.safetensors, e.g. openai/clip-vit-base-patch32) or an OpenAI-layout state-dict "
    "file (e.g. RN50 as .safetensors, or OpenAI's RN50.pt with torch installed)"
)


def _linear(w: np.ndarray) -> np.ndarray:
    return w.T


def _conv(w: np.ndarray) -> np.ndarray:
    return w.transpose(2, 3, 1, 0)


def _same(w: np.ndarray) -> np.ndarray:
    return w


def _conv_back(w: np.ndarray) -> np.ndarray:
    return w.transpose(3, 2, 0, 1)


# each conversion's inverse, for writing checkpoints
_INVERSE = {_linear: _linear, _conv: _conv_back, _same: _same}


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


def params_from_hf(cfg: CLIPConfig, tensors: dict[str, np.ndarray]) -> Params:
    """HF ``CLIPModel`` state dict (numpy) -> our parameter tree, shape-checked against ``cfg``."""
    if cfg.vision_kind != "vit":
        raise CLIPWeightsError("Hugging Face CLIP checkpoints hold ViT models only")
    b = Builder(cfg, tensors)
    for src, (dst, conv) in _TOP.items():
        b.put(dst, src, conv)
    for tower, n_layers in (("vision", cfg.vision_layers), ("text", cfg.text_layers)):
        for suffix, (sub, conv) in _LAYER.items():
            srcs = [f"{tower}_model.encoder.layers.{i}.{suffix}" for i in range(n_layers)]
            b.stack(f"{tower}/layers/{sub}", srcs, conv)
    return b.finish(ignore=("position_ids",))


def params_to_hf(cfg: CLIPConfig, params: Params) -> dict[str, np.ndarray]:
    """Our parameter tree -> HF ``CLIPModel`` state dict (numpy float32), the inverse of
    :func:`params_from_hf` (``params_from_hf(cfg, params_to_hf(cfg, p))`` equals ``p``)."""
    if cfg.vision_kind != "vit":
        raise ValueError("Hugging Face CLIP checkpoints hold ViT models only")
    flat = {"/".join(k): np.asarray(v, np.float32) for k, v in flatten_dict(params).items()}
    expect = flat_shapes(param_shapes(cfg))
    if {k: v.shape for k, v in flat.items()} != expect:
        raise ValueError("params do not match the parameter tree of cfg (init_params(cfg, ...))")
    out = {src: _INVERSE[conv](flat[dst]) for src, (dst, conv) in _TOP.items()}
    for tower, n_layers in (("vision", cfg.vision_layers), ("text", cfg.text_layers)):
        for suffix, (sub, conv) in _LAYER.items():
            stacked = flat[f"{tower}/layers/{sub}"]  # [layers, ...]
            for i in range(n_layers):
                name = f"{tower}_model.encoder.layers.{i}.{suffix}"
                out[name] = _INVERSE[conv](stacked[i])
    return {k: np.array(v, np.float32, order="C") for k, v in out.items()}


def config_to_hf(cfg: CLIPConfig) -> dict:
    """A Hugging Face ``CLIPModel`` ``config.json`` dict that :meth:`CLIPConfig.from_hf`
    reads back as ``cfg`` (ViT models)."""
    if cfg.vision_kind != "vit":
        raise ValueError("Hugging Face CLIP configs describe ViT models only")
    if cfg.eot_token_id == 2:  # from_hf reads eos 2 as OpenAI's argmax pooling
        raise ValueError("eot_token_id 2 cannot be stored: HF configs read it as argmax pooling")
    # eos 2 is transformers' legacy marker of argmax pooling (eot_token_id None)
    eos = 2 if cfg.eot_token_id is None else cfg.eot_token_id
    common = {
        "hidden_act": cfg.activation,
        "layer_norm_eps": cfg.layer_norm_eps,
        "projection_dim": cfg.embed_dim,
        "attention_dropout": 0.0,
        "initializer_range": 0.02,
        "initializer_factor": 1.0,
    }
    text = {
        **common,
        "model_type": "clip_text_model",
        "hidden_size": cfg.text_width,
        "intermediate_size": cfg.text_mlp_dim,
        "num_hidden_layers": cfg.text_layers,
        "num_attention_heads": cfg.text_heads,
        "max_position_embeddings": cfg.context_length,
        "vocab_size": cfg.vocab_size,
        "bos_token_id": max(eos - 1, 0),  # OpenAI's layout: just before <|endoftext|>
        "eos_token_id": eos,
        "pad_token_id": 0,
    }
    vision = {
        **common,
        "model_type": "clip_vision_model",
        "hidden_size": cfg.vision_width,
        "intermediate_size": cfg.vision_mlp_dim,
        "num_hidden_layers": cfg.vision_layers,
        "num_attention_heads": cfg.vision_heads,
        "image_size": cfg.image_size,
        "patch_size": cfg.patch_size,
        "num_channels": 3,
    }
    return {
        "architectures": ["CLIPModel"],
        "model_type": "clip",
        "projection_dim": cfg.embed_dim,
        "logit_scale_init_value": 2.6592,
        "text_config": text,
        "vision_config": vision,
    }


def save_clip(
    directory: str | os.PathLike, cfg: CLIPConfig, params: Params, dtype=np.float32
) -> pathlib.Path:
    """Write ``config.json`` and ``model.safetensors`` (tensors cast to ``dtype``, e.g.
    ``np.float16`` to halve the size; :func:`load_clip` reads them back as float32) into
    ``directory``; tokenizer files are the caller's. Returns the directory."""
    from safetensors.numpy import save_file

    d = pathlib.Path(directory)
    d.mkdir(parents=True, exist_ok=True)
    tensors = {k: v.astype(dtype) for k, v in params_to_hf(cfg, params).items()}
    (d / "config.json").write_text(json.dumps(config_to_hf(cfg), indent=1) + "\n")
    save_file(tensors, str(d / "model.safetensors"))
    return d


def read_file(path: pathlib.Path) -> dict[str, np.ndarray]:
    """A state dict file (``.safetensors``, ``.npz``, or with torch ``.pt``/``.bin``) as numpy."""
    try:
        if path.suffix == ".safetensors":
            from safetensors.numpy import load_file

            return load_file(str(path))
        if path.suffix == ".npz":
            with np.load(path) as f:
                return {k: f[k] for k in f.files}
    except Exception as e:  # noqa: BLE001 - re-raised with the file named
        raise CLIPWeightsError(f"cannot read {path}: {type(e).__name__}: {e}") from e
    try:
        import torch
    except ImportError as e:
        raise CLIPWeightsError(
            f"{path} is a PyTorch file and torch is not installed; convert it to "
            ".safetensors (safetensors.torch.save_file) on a machine with torch"
        ) from e
    try:  # OpenAI's released .pt files are TorchScript archives
        state = torch.jit.load(str(path), map_location="cpu").state_dict()
    except RuntimeError:
        state = torch.load(str(path), map_location="cpu", weights_only=True)
    return {k: v.float().numpy() for k, v in state.items() if hasattr(v, "numpy")}


def read_tensors(directory: pathlib.Path) -> dict[str, np.ndarray]:
    """The HF state dict in ``directory`` as float32 numpy arrays."""
    for name in ("model.safetensors", "pytorch_model.bin"):
        if (directory / name).is_file():
            return read_file(directory / name)
    raise CLIPWeightsError(
        f"CLIP weights directory {directory} has neither model.safetensors nor "
        f"pytorch_model.bin; {WEIGHTS_HINT}"
    )


@dataclasses.dataclass
class LoadedCLIP:
    config: CLIPConfig
    params: Params
    tokenizer: CLIPTokenizer | None  # None when no tokenizer files lie beside the weights
    path: pathlib.Path


def load_clip(path: str | os.PathLike, config: CLIPConfig | None = None) -> LoadedCLIP:
    """Config, parameters and (if present) tokenizer of a local CLIP checkpoint.

    ``path`` is a Hugging Face CLIP directory (``config.json`` + weights; ViT models), or
    a state-dict file in OpenAI's layout (RN50 and ViT; ``.safetensors``, ``.npz``, or
    ``.pt`` with torch) whose hyperparameters are inferred from its shapes unless
    ``config`` is given. The tokenizer is read from the directory (or the file's).
    """
    target = pathlib.Path(path).expanduser()
    if not target.exists():
        raise CLIPWeightsError(f"CLIP weights path not found: {target}; {WEIGHTS_HINT}")
    directory = target if target.is_dir() else target.parent
    if target.is_file():
        tensors = read_file(target)
        if not is_openai(tensors):
            raise CLIPWeightsError(
                f"{target} is not an OpenAI-layout CLIP state dict; pass a Hugging Face "
                "checkpoint's directory instead of its weights file"
            )
        cfg = config or config_from_openai(tensors)
        params = params_from_openai(cfg, tensors)
    else:
        cfg_file = directory / "config.json"
        if config is None:
            if not cfg_file.is_file():
                raise CLIPWeightsError(f"CLIP weights directory {directory} lacks config.json")
            try:
                config = CLIPConfig.from_hf(json.loads(cfg_file.read_text()))
            except json.JSONDecodeError as e:
                raise CLIPWeightsError(f"{cfg_file} is not valid JSON: {e}") from e
        cfg = config
        params = params_from_hf(cfg, read_tensors(directory))
    tokenizer = CLIPTokenizer.from_directory(directory, cfg.context_length, missing_ok=True)
    return LoadedCLIP(cfg, params, tokenizer, target)

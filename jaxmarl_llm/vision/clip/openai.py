"""CLIP weights in OpenAI's own layout (``clip/model.py`` state dicts; open_clip's
``open_clip_model.safetensors`` for OpenAI models uses the same names).

This is the format of OpenAI's RN50 (transformers has no ResNet CLIP). Hyperparameters
are inferred from tensor shapes as OpenAI's ``build_model`` does (heads = width / 64),
unless a config is given. Conversions: ``nn.Linear``/conv layouts as in :mod:`.weights`;
``in_proj_weight [3W, W]`` is split into q/k/v; ``text_projection`` and ``visual.proj``
are already ``[in, out]``; batch-norm running statistics become ``mean``/``var``.
"""

from __future__ import annotations

import numpy as np

from .builder import Builder
from .config import CLIPConfig, CLIPWeightsError
from .model import Params


def is_openai(tensors) -> bool:
    return "token_embedding.weight" in tensors and "ln_final.weight" in tensors


def config_from_openai(sd: dict[str, np.ndarray]) -> CLIPConfig:
    """Hyperparameters from shapes (OpenAI's ``build_model`` rules)."""
    try:
        embed_dim = sd["text_projection"].shape[1]
        width = sd["ln_final.weight"].shape[0]
        text = dict(
            embed_dim=int(embed_dim),
            context_length=int(sd["positional_embedding"].shape[0]),
            vocab_size=int(sd["token_embedding.weight"].shape[0]),
            text_width=int(width),
            text_heads=max(1, int(width) // 64),
            text_layers=len({k.split(".")[2] for k in sd if k.startswith("transformer.resblocks")}),
            text_mlp_dim=int(sd["transformer.resblocks.0.mlp.c_fc.weight"].shape[0]),
        )
        if "visual.proj" in sd:
            vw = int(sd["visual.conv1.weight"].shape[0])
            patch = int(sd["visual.conv1.weight"].shape[-1])
            grid = round((sd["visual.positional_embedding"].shape[0] - 1) ** 0.5)
            vision = dict(
                vision_kind="vit",
                vision_width=vw,
                vision_heads=max(1, vw // 64),
                vision_layers=len(
                    {k.split(".")[3] for k in sd if k.startswith("visual.transformer.resblocks")}
                ),
                vision_mlp_dim=int(sd["visual.transformer.resblocks.0.mlp.c_fc.weight"].shape[0]),
                patch_size=patch,
                image_size=patch * grid,
            )
        else:
            rw = int(sd["visual.layer1.0.conv1.weight"].shape[0])
            grid = round((sd["visual.attnpool.positional_embedding"].shape[0] - 1) ** 0.5)
            vision = dict(
                vision_kind="resnet",
                resnet_width=rw,
                resnet_layers=tuple(
                    len({k.split(".")[2] for k in sd if k.startswith(f"visual.layer{b}.")})
                    for b in (1, 2, 3, 4)
                ),
                vision_heads=max(1, rw * 32 // 64),
                image_size=grid * 32,
            )
    except KeyError as e:
        raise CLIPWeightsError(f"OpenAI CLIP state dict lacks tensor {e.args[0]!r}") from e
    return CLIPConfig(**text, **vision, eot_token_id=None)  # OpenAI pools at the max id


def _split(i: int):
    return lambda w: w.reshape(3, -1, *w.shape[1:])[i]


def _split_t(i: int):
    return lambda w: w.reshape(3, -1, *w.shape[1:])[i].T


def _resblocks(b: Builder, src: str, dst: str, n: int) -> None:
    for j, name in enumerate("qkv"):
        b.stack(
            f"{dst}/{name}/kernel",
            [f"{src}.{i}.attn.in_proj_weight" for i in range(n)],
            _split_t(j),
        )
        b.stack(f"{dst}/{name}/bias", [f"{src}.{i}.attn.in_proj_bias" for i in range(n)], _split(j))
    pairs = {
        "o/kernel": ("attn.out_proj.weight", True),
        "o/bias": ("attn.out_proj.bias", False),
        "ln1/scale": ("ln_1.weight", False),
        "ln1/bias": ("ln_1.bias", False),
        "ln2/scale": ("ln_2.weight", False),
        "ln2/bias": ("ln_2.bias", False),
        "fc1/kernel": ("mlp.c_fc.weight", True),
        "fc1/bias": ("mlp.c_fc.bias", False),
        "fc2/kernel": ("mlp.c_proj.weight", True),
        "fc2/bias": ("mlp.c_proj.bias", False),
    }
    for sub, (name, transpose) in pairs.items():
        conv = (lambda w: w.T) if transpose else None
        b.stack(f"{dst}/{sub}", [f"{src}.{i}.{name}" for i in range(n)], conv)


def _bn(b: Builder, src: str, dst: str) -> None:
    for ours, theirs in (("scale", "weight"), ("bias", "bias"), ("mean", "running_mean")):
        b.put(f"{dst}/{ours}", f"{src}.{theirs}")
    b.put(f"{dst}/var", f"{src}.running_var")


def params_from_openai(cfg: CLIPConfig, sd: dict[str, np.ndarray]) -> Params:
    """OpenAI-layout state dict (numpy) -> our parameter tree, shape-checked against ``cfg``."""
    b = Builder(cfg, sd)
    conv = lambda w: w.transpose(2, 3, 1, 0)  # noqa: E731 - [out, in, kh, kw] -> [kh, kw, in, out]
    b.put("logit_scale", "logit_scale")
    b.put("text_projection/kernel", "text_projection")
    b.put("text/token_embedding/embedding", "token_embedding.weight")
    b.put("text/position_embedding", "positional_embedding")
    b.put("text/final_ln/scale", "ln_final.weight")
    b.put("text/final_ln/bias", "ln_final.bias")
    _resblocks(b, "transformer.resblocks", "text/layers", cfg.text_layers)
    if cfg.vision_kind == "vit":
        b.put("visual_projection/kernel", "visual.proj")
        b.put("vision/patch_embed/kernel", "visual.conv1.weight", conv)
        b.put("vision/class_embedding", "visual.class_embedding")
        b.put("vision/position_embedding", "visual.positional_embedding")
        for ours, theirs in (("pre_ln", "ln_pre"), ("post_ln", "ln_post")):
            b.put(f"vision/{ours}/scale", f"visual.{theirs}.weight")
            b.put(f"vision/{ours}/bias", f"visual.{theirs}.bias")
        _resblocks(b, "visual.transformer.resblocks", "vision/layers", cfg.vision_layers)
    else:
        for k in (1, 2, 3):
            b.put(f"vision/conv{k}/kernel", f"visual.conv{k}.weight", conv)
            _bn(b, f"visual.bn{k}", f"vision/bn{k}")
        for i, blocks in enumerate(cfg.resnet_layers):
            for j in range(blocks):
                src, dst = f"visual.layer{i + 1}.{j}", f"vision/layer{i + 1}_{j}"
                for k in (1, 2, 3):
                    b.put(f"{dst}/conv{k}/kernel", f"{src}.conv{k}.weight", conv)
                    _bn(b, f"{src}.bn{k}", f"{dst}/bn{k}")
                if f"{dst}/downsample_conv/kernel" in b.expect:
                    b.put(f"{dst}/downsample_conv/kernel", f"{src}.downsample.0.weight", conv)
                    _bn(b, f"{src}.downsample.1", f"{dst}/downsample_bn")
        b.put("vision/attnpool/position_embedding", "visual.attnpool.positional_embedding")
        for ours, theirs in (("q", "q_proj"), ("k", "k_proj"), ("v", "v_proj"), ("c", "c_proj")):
            b.put(
                f"vision/attnpool/{ours}/kernel", f"visual.attnpool.{theirs}.weight", lambda w: w.T
            )
            b.put(f"vision/attnpool/{ours}/bias", f"visual.attnpool.{theirs}.bias")
    ignored = ("num_batches_tracked", "input_resolution", "context_length", "vocab_size")
    return b.finish(ignore=ignored)

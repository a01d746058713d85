"""OpenAI CLIP (ViT and ResNet, e.g. RN50) in JAX/Flax: image/text encoders, weight loading
(Hugging Face directories and OpenAI-layout state dicts) and the tokenizer.

Typical use (weights from a local Hugging Face checkpoint directory; nothing is
downloaded)::

    clip = load_clip(path)
    enc = jax.jit(functools.partial(encode_image, clip.config))
    img = enc(clip.params, fit_images(frames, clip.config.image_size))  # [B, D]
    txt = encode_text(clip.config, clip.params, clip.tokenizer(["push the box"]))
    sim = cosine(img, txt)  # [B, 1]
"""

from .config import IMAGE_MEAN, IMAGE_STD, CLIPConfig, CLIPWeightsError
from .model import (
    CLIP,
    cosine,
    encode_image,
    encode_text,
    fit_images,
    init_params,
    logits,
    param_shapes,
    quick_gelu,
)
from .openai import config_from_openai, params_from_openai
from .tokenizer import CLIPTokenizer
from .weights import (
    WEIGHTS_HINT,
    LoadedCLIP,
    config_to_hf,
    load_clip,
    params_from_hf,
    params_to_hf,
    read_file,
    read_tensors,
    save_clip,
)

__all__ = [
    "CLIP",
    "IMAGE_MEAN",
    "IMAGE_STD",
    "WEIGHTS_HINT",
    "CLIPConfig",
    "CLIPTokenizer",
    "CLIPWeightsError",
    "LoadedCLIP",
    "config_from_openai",
    "config_to_hf",
    "cosine",
    "encode_image",
    "encode_text",
    "fit_images",
    "init_params",
    "load_clip",
    "logits",
    "param_shapes",
    "params_from_hf",
    "params_from_openai",
    "params_to_hf",
    "quick_gelu",
    "read_file",
    "read_tensors",
    "save_clip",
]

"""The CLIP model behind V-GEPF's potential: which checkpoint, loading it, and its inputs.

Pretrained CLIP weights cannot be downloaded here, so the default is the small CLIP that
``experiments/train_clip.py`` trains on rendered football frames captioned by the skill
predicates, committed under ``experiments/models/football_clip/`` (a Hugging Face
CLIP directory; 48 px frames, a 4 x 4 patch, 3 x 96 ViT image tower, sized for running on
every state of training). ``shaping.kwargs.clip_weights=PATH`` selects any other
checkpoint that :func:`jaxmarl_llm.vision.clip.load_clip` reads: e.g.
``experiments/models/football_clip_vit4x128_96px`` (96 px, 4 x 128, the CLIP of the runs
in ``experiments/results/vgepf/``) or a converted CLIP-RN50, the paper's.

Frames for the default model are ``envs.football.render.render(state, image_size)`` at
the checkpoint's own image size, as in its training data (``potential.image_embeddings``).
"""

from __future__ import annotations

import os
import pathlib
from collections.abc import Mapping, Sequence
from typing import Any

import jax
import jax.numpy as jnp

from jaxmarl_llm.vision.clip import (
    CLIPWeightsError,
    LoadedCLIP,
    encode_text,
    load_clip,
)

from .skills import SKILLS

REPO_ROOT = pathlib.Path(__file__).resolve().parents[3]
DEFAULT_CLIP_DIR = "experiments/models/football_clip"
TRAIN_HINT = "python experiments/train_clip.py"


def default_clip_path() -> pathlib.Path:
    """The committed football CLIP directory (``experiments/models/football_clip``)."""
    return REPO_ROOT / DEFAULT_CLIP_DIR


def clip_path(kwargs: Mapping[str, Any] | None = None) -> pathlib.Path:
    """``kwargs["clip_weights"]`` (the shaping kwargs) if set, else :func:`default_clip_path`."""
    given = (kwargs or {}).get("clip_weights")
    return pathlib.Path(os.fspath(given)).expanduser() if given else default_clip_path()


def load_vgepf_clip(kwargs: Mapping[str, Any] | None = None) -> LoadedCLIP:
    """The CLIP of ``shaping.kwargs.clip_weights``, or the committed football CLIP.

    Raises :class:`CLIPWeightsError` when the directory is missing (for the default: run
    ``python experiments/train_clip.py``), when a tensor's shape does not match the
    checkpoint's ``config.json`` (``load_clip`` names the tensor and both shapes), or when
    the checkpoint has no tokenizer files (the skill instructions must be tokenised).
    """
    path = clip_path(kwargs)
    if not path.exists() and path == default_clip_path():
        raise CLIPWeightsError(
            f"the default football CLIP {path} is missing; train it with `{TRAIN_HINT}` "
            "(a few minutes on a CPU) or pass shaping.kwargs.clip_weights=PATH"
        )
    try:
        clip = load_clip(path)
    except CLIPWeightsError as e:
        if path != default_clip_path():
            raise
        raise CLIPWeightsError(
            f"{e}; the default football CLIP is rebuilt by `{TRAIN_HINT}`"
        ) from e
    if clip.tokenizer is None:
        raise CLIPWeightsError(
            f"CLIP checkpoint {path} has no tokenizer files (vocab.json + merges.txt or "
            "tokenizer.json); V-GEPF needs them to encode the skill instructions"
        )
    return clip


def instruction_embeddings(clip: LoadedCLIP, texts: Sequence[str] | None = None) -> jax.Array:
    """Unit-norm text embeddings ``[K, D]`` of ``texts`` (default: the seven skills'
    instructions in :data:`.skills.SKILLS` order)."""
    texts = [s.instruction for s in SKILLS] if texts is None else list(texts)
    emb = encode_text(clip.config, clip.params, jnp.asarray(clip.tokenizer(texts)))
    return emb / jnp.linalg.norm(emb, axis=-1, keepdims=True)

"""Settings of V-GEPF (``shaping.name: vgepf``, the keys of ``shaping.kwargs``)."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from jaxmarl_llm.methods.vgepf.skills import SKILL_NAMES, skill

SELECTORS = ("none", "scripted", "backend", "vision")
CACHE_MODES = ("use", "replay")


@dataclass
class Selection:
    """How the skill (the CLIP instruction) is chosen during training.

    Every ``every`` learner updates, ``rounds`` times, each seed's policy plays
    ``collect_steps`` steps per env; the selector reads the training records (and, for
    ``vision``, frames of the last episode) and names the next skill (and, with
    ``normalise``, the potential is renormalised on those steps under it). The paper
    selects every 50 epochs.
    """

    # none: the initial skill all run long; scripted: a fixed rule over the records (no
    # model); backend: the appendix B.3 prompt (text) through a language-model backend;
    # vision: the same prompt with frames of the last episode as images (an
    # OpenAI-compatible vision endpoint, backend: http)
    selector: str = "scripted"
    every: int = 50
    rounds: int = 5
    collect_steps: int = 64
    # backend / vision: the LM factory's kind and its options (jaxmarl_llm/lm/factory.py)
    backend: str = "scripted"
    backend_options: dict[str, Any] = field(default_factory=dict)
    store: str | None = None  # label store; default <run_dir>/vgepf/labels.sqlite
    cache_mode: str = "use"  # replay: answer only from the store, never the model
    max_tokens: int = 400
    temperature: float = 0.0
    retries: int = 2  # corrective follow-ups after an answer that names no skill
    frames: int = 4  # vision: frames of the last episode sent with the prompt
    frame_size: int = 224  # vision: their side in pixels
    # scripted rule's targets: mean shots per episode, then win rate
    shot_target: float = 1.0
    win_target: float = 0.5


@dataclass
class VGEPFConfig:
    """The CLIP potential ``phi(s | skill)`` and its skill selection.

    ``shaping.coef`` is the paper's rho (0.5); ``gamma`` must be the learner's discount
    for the shaping to leave the optimal policy unchanged.
    """

    # a Hugging Face CLIP directory or an OpenAI-layout state-dict file; null: the
    # project's football CLIP (methods/vgepf/clip_model.py)
    clip_weights: str | None = None
    skill: str = "encourage attack"  # the first skill (the only one with selector: none)
    gamma: float = 0.995
    # phi is evaluated on states whose episode step is a multiple of every_k and is 0
    # (the normalised mean; > 1 needs normalise: true) on the others; 1: every state
    every_k: int = 1
    # frames are drawn at this side and resized to the CLIP input; null: the CLIP's size
    image_size: int | None = None
    # false: phi is the raw cosine, as eq. 2 defines it; true: (phi - mean) / std with the
    # stats of the skill's first batch (as sec. 5.3 analyses Fig. 5's potentials), which
    # scales F by 1 / std(cos): about 10x with the in-project CLIP
    normalise: bool = False
    # with normalise: random-play steps per env (and envs) that normalise the first skill
    # before any policy has played (0: no normalisation until the first selection)
    normalise_steps: int = 16
    normalise_envs: int = 8
    selection: Selection = field(default_factory=Selection)

    @staticmethod
    def check(cfg: VGEPFConfig) -> None:
        skill(cfg.skill)  # raises naming the pool
        sel = cfg.selection
        if sel.selector not in SELECTORS:
            raise ValueError(
                f"selection.selector={sel.selector!r}; valid choices: {', '.join(SELECTORS)}"
            )
        if sel.cache_mode not in CACHE_MODES:
            raise ValueError(
                f"selection.cache_mode={sel.cache_mode!r}; valid choices: {', '.join(CACHE_MODES)}"
            )
        for key in ("every", "collect_steps", "frames", "frame_size"):
            if getattr(sel, key) < 1:
                raise ValueError(f"selection.{key} must be >= 1, got {getattr(sel, key)}")
        for key in ("rounds", "retries"):
            if getattr(sel, key) < 0:
                raise ValueError(f"selection.{key} must be >= 0, got {getattr(sel, key)}")
        if cfg.every_k < 1:
            raise ValueError(f"every_k must be >= 1, got {cfg.every_k}")
        if cfg.every_k > 1 and not cfg.normalise:
            # a skipped state's 0 is the normalised phi's mean, but far below the raw
            # cosine's (0.3 with the in-project CLIP): F would jump by it every few steps
            raise ValueError(
                f"every_k={cfg.every_k} needs normalise: true (skipped states get phi 0, "
                "the normalised potential's mean, not the raw cosine's)"
            )
        if not 0.0 < cfg.gamma <= 1.0:
            raise ValueError(f"gamma must be in (0, 1], got {cfg.gamma}")
        if cfg.image_size is not None and cfg.image_size < 8:
            raise ValueError(f"image_size must be >= 8, got {cfg.image_size}")
        if cfg.normalise_steps < 0 or cfg.normalise_envs < 1:
            raise ValueError("normalise_steps must be >= 0 and normalise_envs >= 1")
        if sel.selector in ("none", "scripted") and sel.backend_options:
            raise ValueError("selection.backend_options are only used with a backend selector")


__all__ = ["SELECTORS", "SKILL_NAMES", "Selection", "VGEPFConfig"]

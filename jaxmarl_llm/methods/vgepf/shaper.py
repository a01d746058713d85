"""The V-GEPF shaper for a config: CLIP, first skill, normalisation, selection rounds."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import jax
import numpy as np
from omegaconf import OmegaConf

from envs.capabilities import FootballMatch, require
from jaxmarl_llm.lm.backend import SamplingParams
from jaxmarl_llm.methods.vgepf.clip_model import load_vgepf_clip
from jaxmarl_llm.methods.vgepf.config import VGEPFConfig
from jaxmarl_llm.methods.vgepf.online import (
    VGEPFFeedback,
    embed_states,
    evaluated_states,
    normalisation,
)
from jaxmarl_llm.methods.vgepf.potential import (
    image_embeddings,
    initial_params,
    potential_shaper,
)
from jaxmarl_llm.methods.vgepf.select import (
    SCRIPTED_TEACHER,
    BackendSelector,
    ScriptedSelector,
    Selector,
)
from jaxmarl_llm.shaper import CombineMode, Shaper
from jaxmarl_llm.vision.clip import LoadedCLIP


def vgepf_config(kwargs) -> VGEPFConfig:
    """``shaping.kwargs`` as a ``VGEPFConfig`` (defaults filled in)."""
    return OmegaConf.to_object(OmegaConf.merge(OmegaConf.structured(VGEPFConfig), kwargs))


def require_football(env) -> None:
    require(env, FootballMatch, needed_by="the vgepf shaper (it renders football states)")


def selector_factory(
    cfg: VGEPFConfig, artifact_dir: Path | None, seed: int
) -> Callable[[], tuple[Selector, Callable[[], None]]]:
    """A function building one round's selector and the function that releases it."""
    sel = cfg.selection
    scripted = ScriptedSelector(sel.shot_target, sel.win_target)
    if sel.selector == "scripted":
        return lambda: (scripted, lambda: None)

    def make():
        from jaxmarl_llm.lm.factory import make_backend

        options = dict(sel.backend_options)
        if sel.backend == "scripted":
            options.setdefault("teacher", SCRIPTED_TEACHER)
        store = sel.store or (str(Path(artifact_dir) / "labels.sqlite") if artifact_dir else None)
        backend = make_backend(sel.backend, store=store, cache_mode=sel.cache_mode, **options)
        params = SamplingParams(max_tokens=sel.max_tokens, temperature=sel.temperature, seed=seed)
        vision = sel.selector == "vision"
        return BackendSelector(backend, params, sel.retries, vision, scripted), backend.close

    return make


def first_normalisation(env, cfg: VGEPFConfig, clip: LoadedCLIP, params, seed: int):
    """``params`` normalised on random play (``normalise_steps`` x ``normalise_envs``
    states), standing in for the first epoch of the untrained policy."""
    if not cfg.normalise or cfg.normalise_steps == 0:
        return params
    from jaxmarl_llm.learners.acting import random_play

    key = jax.random.fold_in(jax.random.PRNGKey(seed), 0x6E9F)
    batch = jax.jit(random_play, static_argnums=(0, 2, 3))(
        env, key, cfg.normalise_envs, cfg.normalise_steps
    )
    states = jax.tree.map(lambda x: np.asarray(x).reshape(-1, *x.shape[2:]), batch.state)
    size = int(cfg.image_size or clip.config.image_size)
    embed = jax.jit(lambda s: image_embeddings(clip.config, params.image, s, size))
    emb = embed_states(embed, evaluated_states(states, cfg.every_k))
    mean, std = normalisation(emb @ np.asarray(params.text), True)
    return params.replace(mean=np.float32(mean), std=np.float32(std))


def vgepf_shaper(
    env,
    cfg: VGEPFConfig,
    clip: LoadedCLIP,
    mode: CombineMode = CombineMode.add,
    coef: float = 0.5,
    seed: int = 0,
    artifact_dir: Path | None = None,
    make_selector: Callable[[], tuple[Selector, Callable[[], None]]] | None = None,
) -> Shaper:
    """The V-GEPF shaper of ``env`` (an ``ArrayEnv`` of a football scenario) with ``clip``;
    with a selector and rounds, its ``feedback`` switches skills during training."""
    require_football(env)
    VGEPFConfig.check(cfg)
    params = first_normalisation(env, cfg, clip, initial_params(clip, cfg.skill), seed)
    sel = cfg.selection
    feedback = None
    if sel.selector != "none" and sel.rounds > 0:
        make = make_selector or selector_factory(cfg, artifact_dir, seed)
        feedback = VGEPFFeedback(cfg, clip, make, artifact_dir)
    return potential_shaper(
        clip.config, params, mode, coef, cfg.gamma, cfg.image_size, cfg.every_k, feedback
    )


def build(kwargs, env, mode, coef, context) -> Shaper:
    """The registry's builder: ``shaping.kwargs`` -> the shaper, CLIP from ``clip_weights``."""
    cfg = vgepf_config(kwargs)
    VGEPFConfig.check(cfg)
    require_football(env)
    clip = load_vgepf_clip({"clip_weights": cfg.clip_weights})
    return vgepf_shaper(env, cfg, clip, mode, coef, context.seed, context.artifact_dir("vgepf"))

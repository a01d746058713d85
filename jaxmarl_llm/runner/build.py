"""What a run is built from its config: the env, the shaper and learner, the seed keys.
A run and a reload of its checkpoint (``load_trained``) build them the same way."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import jax
from omegaconf import DictConfig, OmegaConf

import envs
from jaxmarl_llm.errors import ConfigError
from jaxmarl_llm.learners import make_learner
from jaxmarl_llm.shaping.registry import ShaperContext, build_shaper


def make_env(cfg: DictConfig) -> envs.ArrayEnv:
    """``cfg.env``'s environment; a ConfigError naming ``env.kwargs`` where the
    environment refuses its kwargs (an unknown kwarg, or a value it does not accept)."""
    kwargs = OmegaConf.to_container(cfg.env.kwargs, resolve=True)
    try:
        return envs.make_array_env(cfg.env.name, **kwargs)
    except ValueError as e:  # the registry reports an unknown kwarg as one too
        raise ConfigError(f"bad value for config key 'env.kwargs' ({kwargs}): {e}") from e


def make_shaper_and_learner(cfg: DictConfig, env: envs.ArrayEnv, run_dir: Path) -> tuple[Any, Any]:
    """``cfg.shaping``'s shaper (its artifacts under ``run_dir``) and ``cfg.algo``'s
    learner training with it."""
    shaper = build_shaper(cfg.shaping, env, ShaperContext(run_dir=run_dir, seed=int(cfg.seed)))
    return shaper, make_learner(cfg.algo, env, shaper)


def seed_keys(cfg: DictConfig) -> jax.Array:
    """One init key per seed, ``[num_seeds, 2]``."""
    return jax.random.split(jax.random.PRNGKey(cfg.seed), cfg.num_seeds)

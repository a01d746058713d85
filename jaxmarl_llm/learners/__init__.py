"""Learners by name. Each module exposes ``make_learner(cfg, env, shaper) -> Learner``,
``make_train(cfg, env, shaper) -> train(rng)`` and ``check_config(cfg)``."""

from __future__ import annotations

import importlib

from jaxmarl_llm.learners.base import Learner, run_chunk

# algo name -> module implementing it (imported lazily so one learner's deps don't load all)
_MODULES = {
    "ippo": "jaxmarl_llm.learners.ppo",
    "mappo": "jaxmarl_llm.learners.ppo",
    "qmix": "jaxmarl_llm.learners.qlearning",
    "vdn": "jaxmarl_llm.learners.qlearning",
    "qplex": "jaxmarl_llm.learners.qlearning",
    "maddpg": "jaxmarl_llm.learners.maddpg",
}


def algo_names() -> list[str]:
    return list(_MODULES)


def _module(name: str):
    if name not in _MODULES:
        raise ValueError(f"unknown algorithm {name!r}; valid: {', '.join(_MODULES)}")
    return importlib.import_module(_MODULES[name])


def make_learner(cfg, env, shaper) -> Learner:
    return _module(cfg.name).make_learner(cfg, env, shaper)


def check_config(cfg) -> None:
    """The learner's own checks of its ``algo`` config (a ConfigError naming the key),
    without building it: a run checks them before its folder or its shaper's labels."""
    _module(cfg.name).check_config(cfg)


def make_train(cfg, env, shaper):
    return make_learner(cfg, env, shaper).train


__all__ = ["Learner", "algo_names", "check_config", "make_learner", "make_train", "run_chunk"]

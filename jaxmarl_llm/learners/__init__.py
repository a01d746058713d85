"""Learners by name. Each module exposes ``make_learner(cfg, env, shaper) -> Learner``
and ``make_train(cfg, env, shaper) -> train(rng)``."""

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


def make_learner(cfg, env, shaper) -> Learner:
    if cfg.name not in _MODULES:
        raise ValueError(f"unknown algorithm {cfg.name!r}; valid: {', '.join(_MODULES)}")
    return importlib.import_module(_MODULES[cfg.name]).make_learner(cfg, env, shaper)


def make_train(cfg, env, shaper):
    return make_learner(cfg, env, shaper).train


__all__ = ["Learner", "algo_names", "make_learner", "make_train", "run_chunk"]

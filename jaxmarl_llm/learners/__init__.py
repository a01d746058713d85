"""Learners by name (``registry.py``). Each algorithm module exposes its config schema,
``check_config(cfg)`` and ``make_learner(cfg, env, shaper) -> Learner``."""

from __future__ import annotations

from jaxmarl_llm.learners.base import Learner, TrainState, run_chunk
from jaxmarl_llm.learners.registry import (
    AlgoSpec,
    algo_names,
    algo_spec,
    algorithms,
    check_config,
    make_learner,
    make_train,
    register_algorithm,
)

__all__ = [
    "AlgoSpec",
    "Learner",
    "TrainState",
    "algo_names",
    "algo_spec",
    "algorithms",
    "check_config",
    "make_learner",
    "make_train",
    "register_algorithm",
    "run_chunk",
]

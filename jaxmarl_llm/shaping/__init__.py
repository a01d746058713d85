"""Reward shaping: one pure interface for every method and learner."""

from jaxmarl_llm.shaping.base import (
    ALL_FIELDS,
    CombineMode,
    Shaper,
    TransitionBatch,
    constant_shaper,
    identity_shaper,
    shaped_reward,
    team_reward,
)

__all__ = [
    "ALL_FIELDS",
    "CombineMode",
    "Shaper",
    "TransitionBatch",
    "constant_shaper",
    "identity_shaper",
    "shaped_reward",
    "team_reward",
]

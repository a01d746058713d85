"""Reward shaping: one pure interface for every method and learner.

The interface itself (``Shaper``, ``TransitionBatch`` and the reward combination) lives
below the learners, in ``jaxmarl_llm.shaper`` and ``jaxmarl_llm.transitions``; this
package builds shapers by name and is where methods and users import them from.
"""

from jaxmarl_llm.shaper import CombineMode, Shaper, shaped_reward, team_reward
from jaxmarl_llm.shaping.builtin import constant_shaper, identity_shaper
from jaxmarl_llm.transitions import ALL_FIELDS, TransitionBatch

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

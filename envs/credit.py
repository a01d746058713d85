"""What credit-assignment methods (LCA and its baselines) read from an environment.

``CreditAssignmentEnv`` is the env as LCA uses it: state pairs are sampled from it,
described to a language model from each agent's point of view, ranked by the paper's
heuristic (the scripted teacher), scored by state-scoring models on ``agent_features``,
and rewarded through the shaper inside the training scan. Its parts are the capability
kinds ``RankingHeuristic`` and ``StateDescriber`` of ``envs.capabilities``, which an env
declares and methods look up with ``envs.require``.
"""

from __future__ import annotations

from typing import Any, Protocol

import jax
import numpy as np

from envs.capabilities import RankingHeuristic, StateDescriber


class CreditAssignmentEnv(RankingHeuristic, StateDescriber, Protocol):
    """An env that provides both ``RankingHeuristic`` and ``StateDescriber`` itself."""


def map_states(fn, states: Any, batch_shape: tuple[int, ...]) -> Any:
    """Apply a per-state function to env states with leading ``batch_shape`` axes."""
    n = int(np.prod(batch_shape)) if batch_shape else 1
    flat = jax.tree.map(lambda x: x.reshape((n, *x.shape[len(batch_shape) :])), states)
    out = jax.vmap(fn)(flat)
    return jax.tree.map(lambda x: x.reshape((*batch_shape, *x.shape[1:])), out)

"""LCA's individual reward as a shaper: ``r_i = scale * (sigma_i(o'_i) - sigma_i(o_i))``.

``sigma_i`` is the state-scoring model of agent ``i``'s role applied to its agent-specific
encoding (``env.agent_features``); the reward is zero for an agent that stays still
(takes the env's ``noop_action``; paper eq. 4). The model parameters and the scale are
the shaper's params, so the reward model runs batched inside the training scan.
"""

from __future__ import annotations

from typing import Any

import jax
import jax.numpy as jnp
from flax import struct

from envs.credit import CreditAssignmentEnv, map_states
from jaxmarl_llm.preferences.models import RewardModel
from jaxmarl_llm.shaper import CombineMode, Shaper
from jaxmarl_llm.transitions import TransitionBatch


@struct.dataclass
class PotentialParams:
    model: Any  # RewardModel parameters, leaves [E, G, ...]
    scale: jax.Array  # [] float32


def role_groups(env: CreditAssignmentEnv) -> tuple[int, ...] | None:
    """Group index per agent from its role (one shared model when all roles agree)."""
    order = list(dict.fromkeys(env.roles))
    return None if len(order) == 1 else tuple(order.index(r) for r in env.roles)


def potential_rewards(
    env: CreditAssignmentEnv,
    model: RewardModel,
    params: PotentialParams,
    state: Any,
    actions: jax.Array,
    next_state: Any,
    gamma: float = 1.0,
) -> jax.Array:
    """Per-agent LCA rewards ``[..., N]`` of transitions (leading shape ``actions.shape[:-1]``)."""
    lead = actions.shape[:-1]
    f = map_states(env.agent_features, state, lead)
    f_next = map_states(env.agent_features, next_state, lead)
    r = model.potential_difference(params.model, f, f_next, gamma) * params.scale
    return jnp.where(actions == env.noop_action, 0.0, r)


def potential_shaper(
    env: CreditAssignmentEnv,
    model: RewardModel,
    params: PotentialParams,
    mode: CombineMode = CombineMode.add,
    coef: float = 1.0,
    gamma: float = 1.0,
) -> Shaper:
    def apply(p: PotentialParams, batch: TransitionBatch) -> jax.Array:
        return potential_rewards(env, model, p, batch.state, batch.actions, batch.next_state, gamma)

    return Shaper(
        apply=apply,
        params=params,
        fields=("actions", "state", "next_state"),
        mode=mode,
        coef=coef,
        name="lca",
    )

"""The hand-crafted individual rewards of an env as a shaper (LCA's "team + individual"
MAPPO baseline): ``shaping.name: individual``."""

from __future__ import annotations

import jax
import jax.numpy as jnp

from envs.capabilities import RankingHeuristic, require
from envs.credit import map_states
from jaxmarl_llm.shaper import Shaper
from jaxmarl_llm.shaping.registry import register_shaper
from jaxmarl_llm.transitions import TransitionBatch


def individual_shaper(env, mode, coef) -> Shaper:
    raw = require(env, RankingHeuristic, needed_by="the individual shaper")
    # Fail at build time, naming the env, if it has no such rewards (Pistonball).
    jax.eval_shape(
        lambda k: raw.individual_reward(
            raw.random_state(k),
            jnp.zeros(len(raw.roles), jnp.int32),
            raw.random_state(k),
        ),
        jax.random.PRNGKey(0),
    )

    def apply(params, batch: TransitionBatch) -> jax.Array:
        lead = batch.actions.shape[:-1]
        both = (batch.state, batch.actions, batch.next_state)
        return map_states(lambda x: raw.individual_reward(*x), both, lead)

    return Shaper(
        apply=apply,
        fields=("actions", "state", "next_state"),
        mode=mode,
        coef=coef,
        name="individual",
    )


def _build(kwargs, env, mode, coef, context):
    if kwargs:
        raise TypeError(f"individual takes no kwargs, got {sorted(kwargs)}")
    try:
        return individual_shaper(env, mode, coef)
    except NotImplementedError as e:
        raise ValueError(f"shaper 'individual': {e}") from e


register_shaper("individual", _build)


def heuristic_potential_shaper(env, mode, coef, scale: float = 0.1) -> Shaper:
    """``scale * (phi_i(s') - phi_i(s))`` of the env's ranking heuristic itself, zero for the
    noop: LCA with a perfect labeller and a perfect state-scoring model (an upper bound)."""
    raw = require(env, RankingHeuristic, needed_by="the heuristic_potential shaper")

    def apply(params, batch: TransitionBatch) -> jax.Array:
        lead = batch.actions.shape[:-1]
        phi = map_states(raw.heuristic_potential, batch.state, lead)
        phi_next = map_states(raw.heuristic_potential, batch.next_state, lead)
        r = params * (phi_next - phi)
        return jnp.where(batch.actions == raw.noop_action, 0.0, r)

    return Shaper(
        apply=apply,
        params=jnp.asarray(scale, jnp.float32),
        fields=("actions", "state", "next_state"),
        mode=mode,
        coef=coef,
        name="heuristic_potential",
    )


def _build_heuristic(kwargs, env, mode, coef, context):
    scale = float(kwargs.pop("scale", 0.1))
    if kwargs:
        raise TypeError(f"heuristic_potential takes only 'scale', got {sorted(kwargs)}")
    return heuristic_potential_shaper(env, mode, coef, scale)


register_shaper("heuristic_potential", _build_heuristic)

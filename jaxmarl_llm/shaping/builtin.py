"""The shapers that need no method: the env reward unchanged, and a constant bonus."""

from __future__ import annotations

import jax.numpy as jnp

from jaxmarl_llm.shaper import CombineMode, Shaper


def identity_shaper() -> Shaper:
    """Train on the env reward unchanged (the default)."""
    return Shaper(apply=lambda params, batch: jnp.zeros_like(batch.reward), name="identity")


def constant_shaper(value: float, mode: CombineMode = CombineMode.add, coef: float = 1.0) -> Shaper:
    """Adds (or replaces the reward with) ``coef * value`` on every step; ``value`` is a param."""
    return Shaper(
        apply=lambda params, batch: jnp.full_like(batch.reward, params),
        params=jnp.asarray(value, jnp.float32),
        mode=CombineMode(mode),
        coef=coef,
        name="constant",
    )

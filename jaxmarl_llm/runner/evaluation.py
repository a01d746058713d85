"""The evaluation a run makes between chunks (``eval.every`` > 0): every seed's
deterministic policy over ``eval.episodes`` episodes (and its sampled policy with
``eval.sampled``), with keys fixed by the seed and the update count."""

from __future__ import annotations

from collections.abc import Callable

import jax
from omegaconf import DictConfig

from jaxmarl_llm.errors import ConfigError
from jaxmarl_llm.learners.evaluation import make_evaluate


def seed_evaluate(cfg: DictConfig, env, learner) -> Callable | None:
    """The jitted, seed-vmapped greedy evaluation, or None when ``eval.every`` is 0."""
    if not cfg.eval.every:
        return None
    if learner.policy is None:
        raise ConfigError(
            f"eval.every={cfg.eval.every}: algo {cfg.algo.name!r} has no greedy policy to "
            "evaluate; set eval.every=0"
        )
    episodes, max_steps = int(cfg.eval.episodes), int(cfg.eval.max_steps)
    greedy = make_evaluate(env, learner.policy, episodes, max_steps)
    if not cfg.eval.get("sampled", False):
        return jax.jit(jax.vmap(greedy))
    if learner.policy.sample is None:
        raise ConfigError(
            f"eval.sampled=true: algo {cfg.algo.name!r} has no stochastic policy to sample "
            "(value-based learners test greedily); set eval.sampled=false"
        )
    sampled = make_evaluate(env, learner.policy, episodes, max_steps, sampled=True)

    def both(state, key):
        # the greedy episodes keep the key they had without sampled ones
        return {**greedy(state, key), **sampled(state, jax.random.fold_in(key, 0x5A))}

    return jax.jit(jax.vmap(both))


def eval_keys(cfg: DictConfig, updates_done: int) -> jax.Array:
    """Evaluation keys per seed, fixed by the seed and the update count (so a resumed
    run evaluates exactly as an uninterrupted one)."""
    key = jax.random.fold_in(jax.random.PRNGKey(cfg.seed), 0xE7A1)
    return jax.random.split(jax.random.fold_in(key, updates_done), cfg.num_seeds)


def eval_due(cfg: DictConfig, updates_done: int, total_updates: int) -> bool:
    """Whether a run evaluates after ``updates_done`` updates: every ``eval.every``
    chunks, and at the end."""
    return bool(cfg.eval.every) and (
        updates_done % (int(cfg.log_every) * cfg.eval.every) == 0 or updates_done >= total_updates
    )

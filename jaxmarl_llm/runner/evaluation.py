"""The greedy evaluation a run makes between chunks (``eval.every`` > 0): every seed's
deterministic policy over ``eval.episodes`` episodes, with keys fixed by the seed and
the update count."""

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
    fn = make_evaluate(env, learner.policy, int(cfg.eval.episodes), int(cfg.eval.max_steps))
    return jax.jit(jax.vmap(fn))


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

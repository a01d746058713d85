"""A whole learner in one module, registered from a test: uniformly random legal actions,
nothing learned. It shows what a new algorithm needs (a config schema, ``check_config``,
``make_learner``) and lets tests reach the runner's paths for a learner without
``collect``."""

from __future__ import annotations

from dataclasses import dataclass

import jax
import jax.numpy as jnp

from jaxmarl_llm.errors import ConfigError
from jaxmarl_llm.learners.base import Learner, TrainState, episode_metrics
from jaxmarl_llm.learners.registry import AlgoSpec


@dataclass
class UniformConfig:
    name: str = "uniform"
    total_timesteps: int = 1_000
    num_envs: int = 4
    num_steps: int = 8  # env steps per env per update


class UniformState(TrainState):
    obs: jax.Array  # [E, N, D]


SPEC = AlgoSpec(
    "uniform", __name__, "UniformConfig", "uniformly random legal actions", collects=False
)


def check_config(cfg) -> None:
    for key in ("total_timesteps", "num_envs", "num_steps"):
        if getattr(cfg, key) <= 0:
            raise ConfigError(f"bad value for config key 'algo.{key}': must be > 0")


def make_learner(cfg, env, shaper) -> Learner:
    E, T = int(cfg.num_envs), int(cfg.num_steps)

    def init(rng):
        rng, k = jax.random.split(rng)
        obs, env_state = jax.vmap(env.reset)(jax.random.split(k, E))
        return UniformState(
            env_state=env_state,
            shaper_params=shaper.params,
            rng=rng,
            update_step=jnp.zeros((), jnp.int32),
            obs=obs,
        )

    def step(s, key):
        k_act, k_env = jax.random.split(key)
        avail = jax.vmap(env.avail_actions)(s.env_state)
        actions = jax.vmap(env.random_actions)(jax.random.split(k_act, E), avail)
        res = jax.vmap(env.step)(jax.random.split(k_env, E), s.env_state, actions)
        return s.replace(env_state=res.state, obs=res.obs), (res.done, res.info)

    def update(s):
        rng, k = jax.random.split(s.rng)
        s, (done, info) = jax.lax.scan(step, s.replace(rng=rng), jax.random.split(k, T))
        metrics = episode_metrics(done, info, env.has_won, env.return_reduction)
        return s.replace(update_step=s.update_step + 1), metrics

    return Learner(
        init=init,
        update=update,
        num_updates=int(cfg.total_timesteps) // (E * T),
        env_steps_per_update=E * T,
    )

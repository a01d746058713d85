"""A whole host-loop algorithm in one module, registered from a test: a random walk of a
weight vector per seed, trained on the host one iteration at a time. It shows what an
algorithm with ``host_loop=True`` gives the runner (a config schema, ``check_config``,
``make_trainer`` returning a ``HostTrainer``) and lets tests reach the host loop without
a language model."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from jaxmarl_llm.errors import ConfigError
from jaxmarl_llm.learners.registry import AlgoSpec


@dataclass
class CounterConfig:
    name: str = "host_counter"
    total_timesteps: int = 40
    num_steps: int = 10  # env steps of an iteration


SPEC = AlgoSpec(
    "host_counter", __name__, "CounterConfig", "a random walk trained on the host",
    collects=False, host_loop=True,
)  # fmt: skip


def check_config(cfg) -> None:
    for key in ("total_timesteps", "num_steps"):
        if getattr(cfg, key) <= 0:
            raise ConfigError(f"bad value for config key 'algo.{key}': must be > 0")


def make_learner(cfg, env, shaper):
    raise ConfigError(f"algo.name={cfg.name} trains on the host")


def make_trainer(cfg) -> CounterTrainer:
    return CounterTrainer(cfg)


class CounterTrainer:
    def __init__(self, cfg):
        self.seed = int(cfg.seed)
        self.num_seeds = int(cfg.num_seeds)
        self.algo = cfg.algo

    @property
    def steps_per_iteration(self) -> int:
        return int(self.algo.num_steps)

    @property
    def iterations(self) -> int:
        return int(self.algo.total_timesteps) // self.steps_per_iteration

    def init(self, seed_index: int) -> dict:
        rng = np.random.default_rng([self.seed, seed_index])
        return {"weight": rng.normal(size=3).astype(np.float32), "moves": np.zeros((), np.int32)}

    def iteration(self, state: dict, seed_index: int, iteration: int) -> tuple[dict, dict]:
        rng = np.random.default_rng([self.seed, seed_index, iteration, 1])
        weight = state["weight"] + rng.normal(size=3).astype(np.float32)
        metrics = {"episode_return": float(weight.sum()), "win_rate": float(weight.sum() > 0)}
        return {"weight": weight, "moves": state["moves"] + 1}, metrics

    def checkpoint_tree(self, states: list[dict]) -> dict:
        return {f"seed{s}": state for s, state in enumerate(states)}

    def from_checkpoint(self, tree: dict) -> list[dict]:
        return [
            {k: np.asarray(v) for k, v in tree[f"seed{s}"].items()} for s in range(self.num_seeds)
        ]

    def summary(self, metrics: list[list[dict]]) -> dict:
        return {"iterations_in_this_process": len(metrics)}

"""Environment registry: ``make(name, **kwargs)`` returns a jaxmarl ``MultiAgentEnv``.

Each entry is an ``EnvSpec``: a factory plus what the engine needs to know about the
environment beyond jaxmarl's interface (how to tell a win, the centralized state,
agent groups) and the capabilities methods may ask for (``envs.capabilities``).
``make_array_env`` wraps the result in ``ArrayEnv`` for learners.
"""

from __future__ import annotations

import difflib
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

from jaxmarl.environments.multi_agent_env import MultiAgentEnv

from envs.array_env import ArrayEnv, StatsFn, WonFn, WorldStateFn

#: capability kind -> function of the (raw jaxmarl) env returning the provider
Capabilities = Mapping[type, Callable[[Any], Any]]

# The registry entry an env was made from is recorded on the env under this name.
SPEC_NAME_ATTR = "_registry_name"


class UnknownEnvError(ValueError):
    pass


@dataclass(frozen=True)
class EnvSpec:
    name: str
    factory: Callable[..., MultiAgentEnv]
    description: str
    default_kwargs: dict[str, Any] = field(default_factory=dict)
    won_fn: WonFn | None = None
    # (env, terminal env state) -> {name: scalar}: episode statistics learners log
    stats_fn: StatsFn | None = None
    world_state_fn: WorldStateFn | None = None
    world_state_reads_obs: bool = True  # see ArrayEnv
    # (env) -> group index per agent; default: one group
    groups_fn: Callable[[MultiAgentEnv], tuple[int, ...]] | None = None
    # how logged episode returns reduce over agents; see ArrayEnv
    return_reduction: str = "mean"
    # what methods may ask of the env (envs.capabilities.provides); adds to the
    # ``capabilities`` of the factory when it is a class (or a functools.partial of one)
    capabilities: Capabilities = field(default_factory=dict)


_REGISTRY: dict[str, EnvSpec] = {}


def register(spec: EnvSpec, overwrite: bool = False) -> EnvSpec:
    if spec.name in _REGISTRY and not overwrite:
        raise ValueError(f"environment {spec.name!r} is already registered")
    _REGISTRY[spec.name] = spec
    return spec


def names() -> list[str]:
    return sorted(_REGISTRY)


def spec(name: str) -> EnvSpec:
    if name not in _REGISTRY:
        close = difflib.get_close_matches(name, _REGISTRY, n=3)
        hint = f" Did you mean {', '.join(map(repr, close))}?" if close else ""
        raise UnknownEnvError(
            f"unknown environment {name!r}.{hint} Known environments: {', '.join(names())}"
        )
    return _REGISTRY[name]


def make(name: str, **kwargs) -> MultiAgentEnv:
    s = spec(name)
    try:
        env = s.factory(**{**s.default_kwargs, **kwargs})
    except TypeError as e:
        raise ValueError(f"bad kwargs for environment {name!r}: {e}") from e
    # the entry's capability declarations are found through this name
    setattr(env, SPEC_NAME_ATTR, name)
    return env


def make_array_env(name: str, **kwargs) -> ArrayEnv:
    s = spec(name)
    env = make(name, **kwargs)
    groups = s.groups_fn(env) if s.groups_fn is not None else None
    return ArrayEnv(
        env,
        won_fn=s.won_fn,
        world_state_fn=s.world_state_fn,
        agent_groups=groups,
        return_reduction=s.return_reduction,
        world_state_reads_obs=s.world_state_reads_obs,
        stats_fn=s.stats_fn,
    )

"""Environments: jaxmarl's and our own, behind one registry.

``envs.make(name, **kwargs)`` returns a jaxmarl ``MultiAgentEnv``;
``envs.make_array_env(name, **kwargs)`` returns the stacked-array view learners use;
``envs.capability(env, Kind)`` / ``envs.require(env, Kind, needed_by=...)`` give what an
environment offers methods beyond jaxmarl's interface (``envs.capabilities``).
"""

from envs import (
    _jaxmarl_streams,  # noqa: F401  (first: jaxmarl's import would reset sys.stdout/stderr)
    football,  # noqa: F401
    lbf,  # noqa: F401
    matrix_game,  # noqa: F401
    mpe,  # noqa: F401  (registers entries)
    overcooked,  # noqa: F401
    pistonball,  # noqa: F401
    salad,  # noqa: F401
    smax,  # noqa: F401
    two_switch,  # noqa: F401
    victim_rubble,  # noqa: F401
)
from envs.array_env import ArrayEnv, ArrayEnvState, StepResult
from envs.capabilities import capability, providers, provides, require
from envs.registry import EnvSpec, UnknownEnvError, make, make_array_env, names, register, spec

__all__ = [
    "ArrayEnv",
    "ArrayEnvState",
    "EnvSpec",
    "StepResult",
    "UnknownEnvError",
    "capability",
    "make",
    "make_array_env",
    "names",
    "provides",
    "providers",
    "register",
    "require",
    "spec",
]

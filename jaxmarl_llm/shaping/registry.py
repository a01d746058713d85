"""Shapers by name, for configs: ``build_shaper(cfg.shaping, env)``.

Method issues register their shapers here (learned potentials, planning bonuses, ...).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from jaxmarl_llm.shaping.base import CombineMode, Shaper, constant_shaper, identity_shaper

# name -> builder(kwargs: dict, env: ArrayEnv, mode: CombineMode, coef: float) -> Shaper
_BUILDERS: dict[str, Callable[..., Shaper]] = {}


def register_shaper(name: str, builder: Callable[..., Shaper]) -> None:
    if name in _BUILDERS:
        raise ValueError(f"shaper {name!r} is already registered")
    _BUILDERS[name] = builder


def shaper_names() -> list[str]:
    return sorted(_BUILDERS)


def build_shaper(shaping_cfg: Any, env: Any) -> Shaper:
    name = shaping_cfg.name
    if name not in _BUILDERS:
        raise ValueError(f"unknown shaper {name!r}; valid: {', '.join(shaper_names())}")
    kwargs = dict(shaping_cfg.kwargs or {})
    try:
        return _BUILDERS[name](kwargs, env, CombineMode(shaping_cfg.mode), float(shaping_cfg.coef))
    except TypeError as e:
        raise ValueError(f"bad shaping.kwargs for shaper {name!r}: {e}") from e


def _identity(kwargs, env, mode, coef):
    if kwargs:
        raise TypeError(f"identity takes no kwargs, got {sorted(kwargs)}")
    if mode == CombineMode.replace:
        # 'replace' with identity would zero the reward: almost surely a config slip.
        raise ValueError("shaping.mode=replace with the identity shaper would train on zero reward")
    return identity_shaper()


def _constant(kwargs, env, mode, coef):
    return constant_shaper(float(kwargs.pop("value", 0.0)), mode=mode, coef=coef, **kwargs)


register_shaper("identity", _identity)
register_shaper("constant", _constant)

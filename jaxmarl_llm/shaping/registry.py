"""Shapers by name, for configs: ``build_shaper(cfg.shaping, env, context)``.

Method packages register their shapers here (learned potentials, planning bonuses, ...)
with a schema for ``shaping.kwargs`` so a bad key fails when the config is loaded,
before anything is sampled, labelled or compiled. This module does not know the
methods: packages that register shapers are named as entry points of the group
``jaxmarl_llm.shapers`` (this project's own in ``pyproject.toml``; another package adds
its methods the same way) and imported the first time a name is looked up.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from importlib.metadata import entry_points
from pathlib import Path
from typing import Any

from jaxmarl_llm.shaper import CombineMode, Shaper
from jaxmarl_llm.shaping.builtin import constant_shaper, identity_shaper

# Entry-point group of the packages whose import registers shapers (imported lazily:
# they import heavier modules).
PLUGIN_GROUP = "jaxmarl_llm.shapers"


@dataclasses.dataclass(frozen=True)
class ShaperContext:
    """What a builder may need beyond its kwargs: where to keep artifacts, the run seed."""

    run_dir: Path | None = None
    seed: int = 0

    def artifact_dir(self, name: str) -> Path | None:
        if self.run_dir is None:
            return None
        path = Path(self.run_dir) / name
        path.mkdir(parents=True, exist_ok=True)
        return path


@dataclasses.dataclass(frozen=True)
class ShaperEntry:
    # builder(kwargs: dict, env: ArrayEnv, mode: CombineMode, coef: float, context) -> Shaper
    builder: Callable[..., Shaper]
    # dataclass type validating ``shaping.kwargs`` (None: the builder checks them itself)
    schema: type | None = None


_ENTRIES: dict[str, ShaperEntry] = {}
_loaded = False


def register_shaper(name: str, builder: Callable[..., Shaper], schema: type | None = None) -> None:
    if name in _ENTRIES:
        raise ValueError(f"shaper {name!r} is already registered")
    _ENTRIES[name] = ShaperEntry(builder, schema)


def _load_methods() -> None:
    global _loaded
    if not _loaded:
        _loaded = True
        for plugin in entry_points(group=PLUGIN_GROUP):
            plugin.load()


def shaper_names() -> list[str]:
    _load_methods()
    return sorted(_ENTRIES)


def shaper_schema(name: str) -> type | None:
    _load_methods()
    return _ENTRIES[name].schema if name in _ENTRIES else None


def build_shaper(shaping_cfg: Any, env: Any, context: ShaperContext | None = None) -> Shaper:
    _load_methods()
    name = shaping_cfg.name
    if name not in _ENTRIES:
        raise ValueError(f"unknown shaper {name!r}; valid: {', '.join(shaper_names())}")
    kwargs = dict(shaping_cfg.kwargs or {})
    context = context or ShaperContext()
    try:
        return _ENTRIES[name].builder(
            kwargs, env, CombineMode(shaping_cfg.mode), float(shaping_cfg.coef), context
        )
    except TypeError as e:
        raise ValueError(f"bad shaping.kwargs for shaper {name!r}: {e}") from e


def _identity(kwargs, env, mode, coef, context):
    if kwargs:
        raise TypeError(f"identity takes no kwargs, got {sorted(kwargs)}")
    if mode == CombineMode.replace:
        # 'replace' with identity would zero the reward: almost surely a config slip.
        raise ValueError("shaping.mode=replace with the identity shaper would train on zero reward")
    return identity_shaper()


def _constant(kwargs, env, mode, coef, context):
    return constant_shaper(float(kwargs.pop("value", 0.0)), mode=mode, coef=coef, **kwargs)


register_shaper("identity", _identity)
register_shaper("constant", _constant)

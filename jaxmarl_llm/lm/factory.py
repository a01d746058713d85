"""Build a backend from configuration: ``make_backend("gemma", store="runs/x/labels.sqlite")``.

The method recipes call this with their config's ``lm`` section, so switching a run from
the scripted teacher to Gemma or to an HTTP endpoint is one key, and every backend comes
back wrapped by the label store when a store is given.
"""

from __future__ import annotations

import importlib
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

from jaxmarl_llm.lm.backend import Backend
from jaxmarl_llm.lm.scripted import (
    ScriptedBackend,
    pair_choice_teacher,
    written_answer_teacher,
)
from jaxmarl_llm.lm.store import CachedBackend, LabelStore
from jaxmarl_llm.lm.teachers import TeacherNoise

# Scripted teachers by name: (noise) -> answer function; methods add theirs
# (``register_teacher``).
TEACHERS: dict[str, Callable[[TeacherNoise], Any]] = {
    "pair_choice": lambda noise: pair_choice_teacher(noise, style="digit"),
    "pair_choice_hash": lambda noise: pair_choice_teacher(noise, style="hash"),
    "written_answer": lambda noise: written_answer_teacher(),  # noise-free by nature
}

BACKEND_KINDS = ("scripted", "gemma", "smollm2", "llama", "http")


def register_teacher(name: str, factory: Callable[[TeacherNoise], Any]) -> None:
    """Add a method's scripted teacher (``make_backend("scripted", teacher=name)``);
    methods register theirs when they are imported."""
    known = TEACHERS.get(name)
    if known is not None and known is not factory:
        raise ValueError(f"scripted teacher {name!r} is already registered")
    TEACHERS[name] = factory


def _scripted(teacher: str = "pair_choice", noise: Mapping[str, float] | None = None) -> Backend:
    if teacher not in TEACHERS:
        raise ValueError(f"unknown scripted teacher {teacher!r}; valid: {sorted(TEACHERS)}")
    fields = set(TeacherNoise.__dataclass_fields__)
    unknown = set(noise or {}) - fields
    if unknown:
        raise ValueError(f"unknown teacher noise keys {sorted(unknown)}; valid: {sorted(fields)}")
    return ScriptedBackend(teacher, TEACHERS[teacher](TeacherNoise(**(noise or {})).validate()))


def _needs_extra(module: str, cls: str) -> Callable[..., Backend]:
    """A builder importing ``module.cls`` on use, naming the extra if it is missing."""

    def build(**kwargs) -> Backend:
        try:
            backend_cls = getattr(importlib.import_module(module), cls)
        except ImportError as e:
            raise ImportError(
                f"{cls} needs the [llm] extra ({e}); run: pip install -e '.[llm]'"
            ) from e
        return backend_cls(**kwargs)

    return build


_BUILDERS = {
    "scripted": _scripted,
    "gemma": _needs_extra("jaxmarl_llm.lm.gemma", "GemmaBackend"),
    "smollm2": _needs_extra("jaxmarl_llm.lm.llama", "smollm2_backend"),
    "llama": _needs_extra("jaxmarl_llm.lm.llama", "LlamaBackend"),  # model_path=FILE.gguf
    "http": _needs_extra("jaxmarl_llm.lm.http", "OpenAICompatibleBackend"),
}


def make_backend(
    kind: str,
    *,
    store: str | Path | LabelStore | None = None,
    cache_mode: str = "use",
    **kwargs: Any,
) -> Backend:
    """A backend of ``kind`` (one of ``BACKEND_KINDS``), cached in ``store``."""
    if kind not in _BUILDERS:
        raise ValueError(f"unknown language-model backend {kind!r}; valid: {list(BACKEND_KINDS)}")
    try:
        backend = _BUILDERS[kind](**kwargs)
    except TypeError as e:
        raise ValueError(f"bad options for the {kind!r} backend: {e}") from e
    if store is None:
        if cache_mode == "replay":
            raise ValueError("cache_mode='replay' needs a label store (store=PATH)")
        return backend
    if isinstance(store, LabelStore):
        return CachedBackend(backend, store, mode=cache_mode)
    return CachedBackend(backend, LabelStore(store), mode=cache_mode, owns_store=True)

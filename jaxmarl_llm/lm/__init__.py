"""Language/vision-model layer: backends behind one interface, the on-disk label store,
the loading and rendering of prompt templates (data files that each method registers with
its answer forms), ``ParseError`` and the reading shared by answer parsers, scripted
teachers and the labeling policy.

Backends with heavy optional dependencies (``gemma``, ``llama``, ``http``) are imported from their
own modules, so this package imports without the ``[llm]`` extra.
"""

from jaxmarl_llm.lm.backend import Backend, BackendError, Completion, Request, SamplingParams
from jaxmarl_llm.lm.labeling import LabelingPolicy, LabelingReport, ask
from jaxmarl_llm.lm.parsers import ParseError
from jaxmarl_llm.lm.store import CachedBackend, CacheMiss, CacheMode, LabelStore

__all__ = [
    "Backend",
    "BackendError",
    "CacheMiss",
    "CacheMode",
    "CachedBackend",
    "Completion",
    "LabelStore",
    "LabelingPolicy",
    "LabelingReport",
    "ParseError",
    "Request",
    "SamplingParams",
    "ask",
]

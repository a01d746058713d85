"""What loading one family of GGUF models needs to know: its config, where its tensors go
in the decoder's parameter tree, its tokenizer, its default file and its error."""

from __future__ import annotations

import dataclasses
import pathlib
from collections.abc import Callable, Mapping
from typing import Any

import numpy as np

from .errors import GGUFWeightsError


@dataclasses.dataclass(frozen=True)
class TensorLayout:
    """Where a GGUF's tensors go in the decoder's flat ``"a/b/c"`` parameters.

    ``whole``: parameter path -> tensor name; ``per_layer``: parameter path under
    ``layers/`` -> tensor name after ``blk.N.``, stacked over a leading layer axis. Kernels
    (``.../kernel``) arrive ``[out, in]`` (torch's ``nn.Linear`` layout) and are transposed
    to ``[in, out]``; ``prepare(path, array)``, where given, first undoes a converter's
    quirk in a tensor.
    """

    whole: Mapping[str, str]
    per_layer: Mapping[str, str]
    prepare: Callable[[str, np.ndarray], np.ndarray] | None = None


@dataclasses.dataclass(frozen=True)
class GGUFFamily:
    """A family of GGUF models the decoder runs.

    ``config_type``: a frozen dataclass with ``from_metadata(meta, tensor_names)``,
    ``to_json()`` and ``decoder`` (its :class:`~jaxmarl_llm.lm.decoder.DecoderConfig`);
    ``tensor_layout(config)``: its :class:`TensorLayout`; ``tokenizer(loaded)``: the
    tokenizer of a :class:`~jaxmarl_llm.lm.gguf.weights.LoadedWeights`; ``default_path()``:
    the file used when none is given; ``cache_entry``: the name of a file's cache folder,
    formatted with the file's ``stem`` and ``key``.
    """

    name: str
    config_type: type
    tensor_layout: Callable[[Any], TensorLayout]
    tokenizer: Callable[[Any], Any]
    default_path: Callable[[], pathlib.Path]
    error: type[GGUFWeightsError]
    cache_entry: str

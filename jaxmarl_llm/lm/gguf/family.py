"""What loading one family of GGUF models needs to know: its config, where its tensors go
in the decoder's parameter tree, its tokenizer, its default file and its error."""

from __future__ import annotations

import dataclasses
import pathlib
from collections.abc import Callable, Mapping
from typing import Any

import numpy as np

from .errors import GGUFWeightsError

# llama.cpp's names of the tensors every pre-norm decoder block has (after ``blk.N.``)
WHOLE_TENSORS = {"embed/embedding": "token_embd.weight", "final_norm/scale": "output_norm.weight"}
BLOCK_TENSORS = {
    "pre_attn_norm/scale": "attn_norm.weight",
    "pre_ffw_norm/scale": "ffn_norm.weight",
    "attn/q/kernel": "attn_q.weight",
    "attn/k/kernel": "attn_k.weight",
    "attn/v/kernel": "attn_v.weight",
    "attn/o/kernel": "attn_output.weight",
    "mlp/gate/kernel": "ffn_gate.weight",
    "mlp/up/kernel": "ffn_up.weight",
    "mlp/down/kernel": "ffn_down.weight",
}


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

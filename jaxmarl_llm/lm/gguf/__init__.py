"""GGUF model files (llama.cpp's format) for the decoder: the reader, dequantization, the
on-disk cache of dequantized weights and tokenizers with its file lock, and
:func:`load_weights` for a :class:`GGUFFamily` (its config and tensor layout).

Needs the language-model extra (``pip install -e ".[llm]"``: ``gguf``, ``tokenizers``);
importing this package does not import them.
"""

from .cache import cache_dir, cache_lock
from .dequantize import dequantize
from .errors import LLM_EXTRA, GGUFWeightsError
from .family import GGUFFamily, TensorLayout
from .reader import open_gguf, read_gguf, read_metadata
from .tokenizer import GGUFTokenizer, cached_tokenizer, require_tokenizers
from .weights import LoadedWeights, load_weights, unflatten

__all__ = [
    "LLM_EXTRA",
    "GGUFFamily",
    "GGUFTokenizer",
    "GGUFWeightsError",
    "LoadedWeights",
    "TensorLayout",
    "cache_dir",
    "cache_lock",
    "cached_tokenizer",
    "dequantize",
    "load_weights",
    "open_gguf",
    "read_gguf",
    "read_metadata",
    "require_tokenizers",
    "unflatten",
]

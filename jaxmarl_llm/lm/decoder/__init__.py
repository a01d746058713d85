"""The one decoder every GGUF family runs on (Gemma 3, Llama, SmolLM2, Qwen2): a
:class:`DecoderConfig` of sizes and architecture switches, the :class:`Decoder` module
and its KV cache (:func:`init_cache`)."""

from .cache import INVALID_POS, Cache, init_cache
from .config import DecoderConfig
from .model import Decoder

__all__ = ["INVALID_POS", "Cache", "Decoder", "DecoderConfig", "init_cache"]

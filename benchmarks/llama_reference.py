"""Reference data for the Flax llama-family model, from transformers' PyTorch models.

Builds two tiny random models in float32 and writes ``tests/lm/data/llama_reference.npz``
with, per model, its weights (Hugging Face names, ``[out, in]`` projections), a batch of
token ids and the logits of the full forward pass:

- ``llama``: ``LlamaForCausalLM``, grouped-query attention (4 query heads, 2 KV heads),
  tied embeddings, RoPE base 10k;
- ``qwen2``: ``Qwen2ForCausalLM``, q/k/v biases, untied output head, 4 query heads sharing
  1 KV head, RoPE base 1M.

``tests/lm/test_llama.py`` writes these weights into GGUF files laid out as llama.cpp's
converter does (q/k rows permuted for ``llama``), loads them with our loader and compares
logits; that test does not need torch. To regenerate (needs torch, not a project
dependency)::

    python benchmarks/llama_reference.py
"""

from __future__ import annotations

import pathlib

import numpy as np

OUT = pathlib.Path(__file__).resolve().parents[1] / "tests" / "lm" / "data" / "llama_reference.npz"
VOCAB, BATCH, LENGTH = 96, 3, 11

CONFIGS = {
    "llama": dict(
        hidden_size=64, intermediate_size=96, num_hidden_layers=2, num_attention_heads=4,
        num_key_value_heads=2, head_dim=16, rope_theta=10_000.0, rms_norm_eps=1e-5,
        tie_word_embeddings=True,
    ),
    "qwen2": dict(
        hidden_size=48, intermediate_size=80, num_hidden_layers=3, num_attention_heads=4,
        num_key_value_heads=1, rope_theta=1_000_000.0, rms_norm_eps=1e-6,
        tie_word_embeddings=False,
    ),
}  # fmt: skip


def main() -> None:
    import torch
    import transformers
    from transformers import LlamaConfig, LlamaForCausalLM, Qwen2Config, Qwen2ForCausalLM

    classes = {"llama": (LlamaConfig, LlamaForCausalLM), "qwen2": (Qwen2Config, Qwen2ForCausalLM)}
    arrays: dict[str, np.ndarray] = {}
    rng = np.random.default_rng(0)
    for name, kwargs in CONFIGS.items():
        torch.manual_seed(0)
        config_cls, model_cls = classes[name]
        config = config_cls(
            vocab_size=VOCAB,
            max_position_embeddings=64,
            attn_implementation="eager",
            initializer_range=0.25,  # sharp attention: RoPE and masking errors show
            **kwargs,
        )
        model = model_cls(config).float().eval()
        with torch.no_grad():  # random norm scales and biases, so a dropped one shows
            for pname, p in model.named_parameters():
                if pname.endswith("norm.weight"):
                    p.copy_(1.0 + 0.3 * torch.randn_like(p))
                elif pname.endswith(".bias"):
                    p.copy_(0.5 * torch.randn_like(p))
        tokens = rng.integers(0, VOCAB, size=(BATCH, LENGTH)).astype(np.int64)
        with torch.no_grad():
            logits = model(torch.from_numpy(tokens)).logits.numpy()
        for pname, p in model.state_dict().items():
            if pname == "lm_head.weight" and config.tie_word_embeddings:
                continue
            arrays[f"{name}/weights/{pname}"] = p.numpy().astype(np.float32)
        arrays[f"{name}/tokens"] = tokens.astype(np.int32)
        arrays[f"{name}/logits"] = logits.astype(np.float32)
        for key in ("rope_theta", "rms_norm_eps"):
            arrays[f"{name}/{key}"] = np.asarray(kwargs[key], np.float64)
    arrays["versions"] = np.asarray(
        f"transformers {transformers.__version__}, torch {torch.__version__}"
    )
    np.savez_compressed(OUT, **arrays)
    print(f"wrote {OUT} ({OUT.stat().st_size} bytes)")


if __name__ == "__main__":
    main()

"""Reference data for the Flax CLIP, from transformers' PyTorch ``CLIPModel``.

Builds a tiny random ``CLIPModel`` (seed 0; every parameter perturbed so layer norms and
biases are not at their trivial init), saves it as a Hugging Face checkpoint directory
(``config.json`` + ``model.safetensors``) in ``tests/vision/data/tiny_clip/`` and its
float32 outputs on a fixed image batch and two token batches (full context and a
shorter length) as ``reference.npz`` there: unnormalised image and text embeddings and
``logits_per_image``.

``tests/vision/test_clip.py`` loads the checkpoint with our loader and compares; that test
does not need torch. To regenerate (needs torch, not a project dependency)::

    pip install torch==2.13.0   # the CPU wheel on this machine image is enough
    python benchmarks/clip_reference.py
"""

from __future__ import annotations

import json
import pathlib
import sys

import numpy as np

OUT = pathlib.Path(__file__).resolve().parents[1] / "tests" / "vision" / "data" / "tiny_clip"
MEAN = np.array([0.48145466, 0.4578275, 0.40821073], np.float32)
STD = np.array([0.26862954, 0.26130258, 0.27577711], np.float32)
VOCAB, CONTEXT, BOS, EOS = 100, 16, 98, 99


def token_batch(rng: np.random.Generator, lengths: list[int], width: int) -> np.ndarray:
    """``[B, width]`` rows ``BOS, ids..., EOS, 0...`` with ``lengths[b]`` ids between."""
    out = np.zeros((len(lengths), width), np.int64)  # [B, width]
    for row, n in enumerate(lengths):
        out[row, : n + 2] = [BOS, *rng.integers(1, BOS, n), EOS]
    return out


def main() -> None:
    import torch
    from safetensors.torch import save_file
    from transformers import CLIPConfig, CLIPModel

    torch.manual_seed(0)
    config = CLIPConfig(
        text_config=dict(
            vocab_size=VOCAB,
            hidden_size=32,
            intermediate_size=64,
            num_hidden_layers=2,
            num_attention_heads=2,
            max_position_embeddings=CONTEXT,
            hidden_act="quick_gelu",
            bos_token_id=BOS,
            eos_token_id=EOS,
            pad_token_id=0,
        ),
        vision_config=dict(
            hidden_size=32,
            intermediate_size=64,
            num_hidden_layers=2,
            num_attention_heads=2,
            image_size=32,
            patch_size=8,
            hidden_act="quick_gelu",
        ),
        projection_dim=16,
    )
    model = CLIPModel(config).eval()
    with torch.no_grad():
        for name, p in model.named_parameters():
            if name != "logit_scale":
                p.add_(0.1 * torch.randn_like(p))
    OUT.mkdir(parents=True, exist_ok=True)
    state = {k: v.contiguous() for k, v in model.state_dict().items() if "position_ids" not in k}
    save_file(state, str(OUT / "model.safetensors"))
    (OUT / "config.json").write_text(json.dumps(config.to_dict(), indent=1, sort_keys=True) + "\n")

    rng = np.random.default_rng(0)
    images = rng.uniform(0, 1, (3, 32, 32, 3)).astype(np.float32)  # [B, H, W, 3] in [0, 1]
    tokens = token_batch(rng, [3, 14, 0, 7], CONTEXT)  # [4, 16]; 14 ids fill the context
    tokens_short = token_batch(rng, [2, 5], 9)  # [2, 9]
    pixels = torch.from_numpy(((images - MEAN) / STD).transpose(0, 3, 1, 2))  # [B, 3, H, W]
    with torch.no_grad():
        image_embeds = model.get_image_features(pixel_values=pixels)
        text_embeds = model.get_text_features(input_ids=torch.from_numpy(tokens))
        short_embeds = model.get_text_features(input_ids=torch.from_numpy(tokens_short))
        logits = model(pixel_values=pixels, input_ids=torch.from_numpy(tokens)).logits_per_image

    def arr(x):
        return (x if isinstance(x, torch.Tensor) else x.pooler_output).numpy().astype(np.float32)

    np.savez(
        OUT / "reference.npz",
        images=images,
        tokens=tokens.astype(np.int32),
        tokens_short=tokens_short.astype(np.int32),
        image_embeds=arr(image_embeds),
        text_embeds=arr(text_embeds),
        text_embeds_short=arr(short_embeds),
        logits_per_image=arr(logits),
        versions=np.array([__import__("transformers").__version__, torch.__version__]),
    )
    sizes = {p.name: p.stat().st_size for p in OUT.iterdir()}
    print(f"wrote {OUT}: {sizes}", file=sys.stderr)


if __name__ == "__main__":
    main()

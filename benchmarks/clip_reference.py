"""Reference data for the Flax CLIP, from transformers' PyTorch ``CLIPModel``.

Builds a tiny random ``CLIPModel`` (seed 0; every parameter perturbed so layer norms and
biases are not at their trivial init), saves it as a Hugging Face checkpoint directory
(``config.json`` + ``model.safetensors``) in ``tests/vision/data/tiny_clip/`` and its
float32 outputs on a fixed image batch and two token batches (full context and a
shorter length) as ``reference.npz`` there: unnormalised image and text embeddings and
``logits_per_image``.

It also writes ``tests/vision/data/tiny_clip_rn/``: a tiny ResNet CLIP (transformers has
none) as an OpenAI-layout state dict (``model.safetensors``) and ``reference.npz``, from
a PyTorch transcription of OpenAI's ``clip/model.py`` (``ModifiedResNet`` with frozen
batch norms in eval mode, ``AttentionPool2d`` through ``F.multi_head_attention_forward``,
the text transformer through ``nn.MultiheadAttention``).

``tests/vision/test_clip.py`` loads the checkpoints with our loader and compares; that test
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


def openai_resnet_clip():
    """A tiny CLIP in OpenAI's ``clip/model.py`` layout and code (ResNet image tower)."""
    from collections import OrderedDict

    import torch
    import torch.nn.functional as F
    from torch import nn

    class Bottleneck(nn.Module):
        def __init__(self, inplanes, planes, stride=1):
            super().__init__()
            self.conv1 = nn.Conv2d(inplanes, planes, 1, bias=False)
            self.bn1 = nn.BatchNorm2d(planes)
            self.conv2 = nn.Conv2d(planes, planes, 3, padding=1, bias=False)
            self.bn2 = nn.BatchNorm2d(planes)
            self.avgpool = nn.AvgPool2d(stride) if stride > 1 else nn.Identity()
            self.conv3 = nn.Conv2d(planes, planes * 4, 1, bias=False)
            self.bn3 = nn.BatchNorm2d(planes * 4)
            self.downsample = None
            if stride > 1 or inplanes != planes * 4:
                self.downsample = nn.Sequential(
                    OrderedDict(
                        [
                            ("-1", nn.AvgPool2d(stride)),
                            ("0", nn.Conv2d(inplanes, planes * 4, 1, bias=False)),
                            ("1", nn.BatchNorm2d(planes * 4)),
                        ]
                    )
                )

        def forward(self, x):
            out = F.relu(self.bn1(self.conv1(x)))
            out = F.relu(self.bn2(self.conv2(out)))
            out = self.bn3(self.conv3(self.avgpool(out)))
            identity = x if self.downsample is None else self.downsample(x)
            return F.relu(out + identity)

    class AttentionPool2d(nn.Module):
        def __init__(self, spacial_dim, embed_dim, num_heads, output_dim):
            super().__init__()
            self.positional_embedding = nn.Parameter(torch.randn(spacial_dim**2 + 1, embed_dim))
            self.k_proj = nn.Linear(embed_dim, embed_dim)
            self.q_proj = nn.Linear(embed_dim, embed_dim)
            self.v_proj = nn.Linear(embed_dim, embed_dim)
            self.c_proj = nn.Linear(embed_dim, output_dim)
            self.num_heads = num_heads

        def forward(self, x):
            x = x.flatten(start_dim=2).permute(2, 0, 1)  # NCHW -> (HW)NC
            x = torch.cat([x.mean(dim=0, keepdim=True), x], dim=0)
            x = x + self.positional_embedding[:, None, :]
            x, _ = F.multi_head_attention_forward(
                query=x[:1], key=x, value=x, embed_dim_to_check=x.shape[-1],
                num_heads=self.num_heads, q_proj_weight=self.q_proj.weight,
                k_proj_weight=self.k_proj.weight, v_proj_weight=self.v_proj.weight,
                in_proj_weight=None,
                in_proj_bias=torch.cat([self.q_proj.bias, self.k_proj.bias, self.v_proj.bias]),
                bias_k=None, bias_v=None, add_zero_attn=False, dropout_p=0.0,
                out_proj_weight=self.c_proj.weight, out_proj_bias=self.c_proj.bias,
                use_separate_proj_weight=True, training=False, need_weights=False,
            )  # fmt: skip
            return x.squeeze(0)

    class ModifiedResNet(nn.Module):
        def __init__(self, layers, output_dim, heads, input_resolution, width):
            super().__init__()
            self.conv1 = nn.Conv2d(3, width // 2, 3, stride=2, padding=1, bias=False)
            self.bn1 = nn.BatchNorm2d(width // 2)
            self.conv2 = nn.Conv2d(width // 2, width // 2, 3, padding=1, bias=False)
            self.bn2 = nn.BatchNorm2d(width // 2)
            self.conv3 = nn.Conv2d(width // 2, width, 3, padding=1, bias=False)
            self.bn3 = nn.BatchNorm2d(width)
            self.avgpool = nn.AvgPool2d(2)
            self._inplanes = width
            self.layer1 = self._make_layer(width, layers[0])
            self.layer2 = self._make_layer(width * 2, layers[1], stride=2)
            self.layer3 = self._make_layer(width * 4, layers[2], stride=2)
            self.layer4 = self._make_layer(width * 8, layers[3], stride=2)
            self.attnpool = AttentionPool2d(input_resolution // 32, width * 32, heads, output_dim)

        def _make_layer(self, planes, blocks, stride=1):
            layers = [Bottleneck(self._inplanes, planes, stride)]
            self._inplanes = planes * 4
            layers += [Bottleneck(self._inplanes, planes) for _ in range(1, blocks)]
            return nn.Sequential(*layers)

        def forward(self, x):
            x = F.relu(self.bn1(self.conv1(x)))
            x = F.relu(self.bn2(self.conv2(x)))
            x = self.avgpool(F.relu(self.bn3(self.conv3(x))))
            x = self.layer4(self.layer3(self.layer2(self.layer1(x))))
            return self.attnpool(x)

    class QuickGELU(nn.Module):
        def forward(self, x):
            return x * torch.sigmoid(1.702 * x)

    class ResidualAttentionBlock(nn.Module):
        def __init__(self, d_model, n_head, attn_mask):
            super().__init__()
            self.attn = nn.MultiheadAttention(d_model, n_head)
            self.ln_1 = nn.LayerNorm(d_model)
            self.mlp = nn.Sequential(
                OrderedDict(
                    [
                        ("c_fc", nn.Linear(d_model, d_model * 4)),
                        ("gelu", QuickGELU()),
                        ("c_proj", nn.Linear(d_model * 4, d_model)),
                    ]
                )
            )
            self.ln_2 = nn.LayerNorm(d_model)
            self.attn_mask = attn_mask

        def forward(self, x):
            h = self.ln_1(x)
            x = x + self.attn(h, h, h, need_weights=False, attn_mask=self.attn_mask)[0]
            return x + self.mlp(self.ln_2(x))

    class CLIP(nn.Module):
        def __init__(self, embed_dim, image_resolution, vision_layers, vision_width,
                     vision_heads, context_length, vocab_size, width, heads, layers):  # fmt: skip
            super().__init__()
            self.visual = ModifiedResNet(
                vision_layers, embed_dim, vision_heads, image_resolution, vision_width,
            )  # fmt: skip
            mask = torch.full((context_length, context_length), float("-inf")).triu_(1)
            self.transformer = nn.Module()
            self.transformer.resblocks = nn.Sequential(
                *[ResidualAttentionBlock(width, heads, mask) for _ in range(layers)]
            )
            self.token_embedding = nn.Embedding(vocab_size, width)
            self.positional_embedding = nn.Parameter(torch.randn(context_length, width) * 0.01)
            self.ln_final = nn.LayerNorm(width)
            self.text_projection = nn.Parameter(torch.randn(width, embed_dim) * width**-0.5)
            self.logit_scale = nn.Parameter(torch.tensor(float(np.log(1 / 0.07))))

        def encode_image(self, image):
            return self.visual(image)

        def encode_text(self, text):
            x = self.token_embedding(text) + self.positional_embedding
            x = self.transformer.resblocks(x.permute(1, 0, 2)).permute(1, 0, 2)  # LND <-> NLD
            x = self.ln_final(x)
            return x[torch.arange(x.shape[0]), text.argmax(dim=-1)] @ self.text_projection

    # OpenAI's RN50 has 32 * width // 64 attention-pool heads; here 2 on 32 * 2 channels
    return CLIP(16, 64, (1, 2, 1, 1), 2, 2, CONTEXT, VOCAB, 32, 2, 2)


def main_resnet() -> None:
    import torch
    from safetensors.torch import save_file

    out = OUT.parent / "tiny_clip_rn"
    torch.manual_seed(1)
    model = openai_resnet_clip().eval()
    with torch.no_grad():
        for name, p in model.named_parameters():
            if name != "logit_scale":
                p.add_(0.1 * torch.randn_like(p))
        for name, buf in model.named_buffers():  # batch-norm statistics, not the identity
            if name.endswith("running_mean"):
                buf.copy_(0.1 * torch.randn_like(buf))
            elif name.endswith("running_var"):
                buf.copy_(torch.rand_like(buf) + 0.5)
    out.mkdir(parents=True, exist_ok=True)
    state = {k: v.contiguous() for k, v in model.state_dict().items()}
    save_file(state, str(out / "model.safetensors"))
    rng = np.random.default_rng(1)
    pixels_u8 = rng.integers(0, 256, (2, 64, 64, 3), dtype=np.uint8)  # [B, H, W, 3]
    images = pixels_u8.astype(np.float32) / 255.0  # stored as uint8: a small file
    tokens = token_batch(rng, [4, 14, 1], CONTEXT)  # [3, 16]
    pixels = torch.from_numpy(((images - MEAN) / STD).transpose(0, 3, 1, 2))  # [B, 3, H, W]
    with torch.no_grad():
        image_embeds = model.encode_image(pixels).numpy()
        text_embeds = model.encode_text(torch.from_numpy(tokens)).numpy()
    np.savez(
        out / "reference.npz",
        images_u8=pixels_u8,
        tokens=tokens.astype(np.int32),
        image_embeds=image_embeds.astype(np.float32),
        text_embeds=text_embeds.astype(np.float32),
        versions=np.array([torch.__version__]),
    )
    sizes = {p.name: p.stat().st_size for p in out.iterdir()}
    print(f"wrote {out}: {sizes}", file=sys.stderr)


if __name__ == "__main__":
    main()
    main_resnet()

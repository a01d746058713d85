"""CLIP hyperparameters: the ViT-B/32 preset, tiny test configs and Hugging Face configs."""

from __future__ import annotations

import dataclasses
from typing import Any

from jaxmarl_llm.errors import RunError

# CLIP's preprocessing statistics (RGB), applied to images in [0, 1].
IMAGE_MEAN = (0.48145466, 0.4578275, 0.40821073)
IMAGE_STD = (0.26862954, 0.26130258, 0.27577711)
ACTIVATIONS = ("quick_gelu", "gelu")


class CLIPWeightsError(RunError, RuntimeError):
    """CLIP weights (or their config/tokenizer files) are missing, unreadable or mismatched."""


@dataclasses.dataclass(frozen=True)
class CLIPConfig:
    """OpenAI CLIP; defaults are ViT-B/32's numbers, :meth:`rn50` is the ResNet-50 model."""

    embed_dim: int = 512  # joint image-text embedding size
    vision_kind: str = "vit"  # "vit" (VisionTransformer) or "resnet" (ModifiedResNet)
    # vision transformer (vision_heads is also the ResNet attention pool's head count)
    image_size: int = 224
    patch_size: int = 32
    vision_width: int = 768
    vision_layers: int = 12
    vision_heads: int = 12
    vision_mlp_dim: int = 3072
    # ModifiedResNet: bottleneck blocks per stage and the stem width (stage i has
    # 4 * width * 2**i output channels; the attention pool works on 32 * width)
    resnet_layers: tuple[int, ...] = (3, 4, 6, 3)
    resnet_width: int = 64
    # text transformer
    context_length: int = 77
    vocab_size: int = 49408
    text_width: int = 512
    text_layers: int = 12
    text_heads: int = 8
    text_mlp_dim: int = 2048
    # token whose position pools the text (its first occurrence); None: the largest id in
    # the row, OpenAI's rule (``<|endoftext|>`` is the last vocabulary entry)
    eot_token_id: int | None = 49407
    activation: str = "quick_gelu"  # OpenAI's checkpoints: x * sigmoid(1.702 x)
    layer_norm_eps: float = 1e-5

    def __post_init__(self):
        if self.activation not in ACTIVATIONS:
            raise ValueError(f"activation must be one of {ACTIVATIONS}, got {self.activation!r}")
        if self.vision_kind not in ("vit", "resnet"):
            raise ValueError(f"vision_kind must be 'vit' or 'resnet', got {self.vision_kind!r}")
        if self.image_size % self.patch_size:
            raise ValueError(f"image_size {self.image_size} not a multiple of {self.patch_size}")
        widths = {"vision": self.vision_width, "text": self.text_width}
        if self.vision_kind == "resnet":
            widths["vision"] = 32 * self.resnet_width
        for name, width in widths.items():
            heads = getattr(self, f"{name}_heads")
            if width % heads:
                raise ValueError(f"{name} width {width} not divisible by {name}_heads {heads}")

    @property
    def num_patches(self) -> int:
        """Image tokens before pooling: ViT patches, or the ResNet's final feature map cells."""
        return (self.image_size // self.patch_size) ** 2

    @classmethod
    def rn50(cls) -> CLIPConfig:
        """OpenAI's RN50 (the V-GEPF paper's model); vision_width/mlp/layers are unused."""
        return cls(embed_dim=1024, vision_kind="resnet", vision_heads=32)

    @classmethod
    def tiny_resnet(cls) -> CLIPConfig:
        """A random-weights ModifiedResNet config for tests."""
        return dataclasses.replace(
            cls.tiny(),
            vision_kind="resnet",
            image_size=64,
            resnet_layers=(1, 2, 1, 1),
            resnet_width=2,
            vision_heads=2,
            text_mlp_dim=128,  # OpenAI's layout fixes it at 4 * text_width
            eot_token_id=None,  # OpenAI's pooling rule
        )

    @classmethod
    def vit_b32(cls) -> CLIPConfig:
        return cls()

    @classmethod
    def tiny(cls) -> CLIPConfig:
        """A random-weights config for tests (a few thousand parameters)."""
        return cls(
            embed_dim=16,
            image_size=32,
            patch_size=8,
            vision_width=32,
            vision_layers=2,
            vision_heads=2,
            vision_mlp_dim=64,
            context_length=16,
            vocab_size=100,
            text_width=32,
            text_layers=2,
            text_heads=2,
            text_mlp_dim=64,
            eot_token_id=99,
        )

    @classmethod
    def from_hf(cls, hf: dict[str, Any]) -> CLIPConfig:
        """From a Hugging Face ``CLIPModel`` ``config.json`` dict."""
        try:
            t, v = hf["text_config"], hf["vision_config"]
            t_act, v_act = t.get("hidden_act", "quick_gelu"), v.get("hidden_act", "quick_gelu")
            if t_act != v_act:
                raise CLIPWeightsError(f"text activation {t_act!r} != vision activation {v_act!r}")
            eos = t.get("eos_token_id", 2)
            return cls(
                embed_dim=int(hf.get("projection_dim", t.get("projection_dim", 512))),
                image_size=int(v["image_size"]),
                patch_size=int(v["patch_size"]),
                vision_width=int(v["hidden_size"]),
                vision_layers=int(v["num_hidden_layers"]),
                vision_heads=int(v["num_attention_heads"]),
                vision_mlp_dim=int(v["intermediate_size"]),
                context_length=int(t["max_position_embeddings"]),
                vocab_size=int(t["vocab_size"]),
                text_width=int(t["hidden_size"]),
                text_layers=int(t["num_hidden_layers"]),
                text_heads=int(t["num_attention_heads"]),
                text_mlp_dim=int(t["intermediate_size"]),
                # transformers keeps OpenAI's argmax pooling for configs with the legacy
                # eos_token_id 2 (openai/clip-vit-*), and pools at eos_token_id otherwise
                eot_token_id=None if eos == 2 else int(eos),
                activation=t_act,
                layer_norm_eps=float(t.get("layer_norm_eps", 1e-5)),
            )
        except KeyError as e:
            raise CLIPWeightsError(f"CLIP config.json lacks key {e.args[0]!r}") from e
        except ValueError as e:
            raise CLIPWeightsError(f"unsupported CLIP config.json: {e}") from e

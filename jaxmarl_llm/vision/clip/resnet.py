"""OpenAI CLIP's ModifiedResNet image encoder (RN50 and friends) in Flax (linen).

Differences from a torchvision ResNet, as in OpenAI's ``clip/model.py``:

- a stem of three 3x3 convs (the first with stride 2) and a 2x2 average pool instead of
  one 7x7 conv and a max pool;
- strided bottlenecks downsample with a 2x2 average pool after the 3x3 conv (and before
  the 1x1 conv on the shortcut) instead of strided convs;
- the head is a single multi-head attention layer whose query is the spatial mean of the
  final feature map (plus positional embeddings); its output projection maps to the
  joint embedding size.

Batch norms are frozen (inference only: CLIP is never trained here), with their running
statistics held as ordinary parameters.
"""

from __future__ import annotations

import flax.linen as nn
import jax
import jax.numpy as jnp

from .config import CLIPConfig


class FrozenBatchNorm(nn.Module):
    eps: float = 1e-5

    @nn.compact
    def __call__(self, x):
        c = x.shape[-1]
        scale = self.param("scale", nn.initializers.ones, (c,))
        bias = self.param("bias", nn.initializers.zeros, (c,))
        mean = self.param("mean", nn.initializers.zeros, (c,))
        var = self.param("var", nn.initializers.ones, (c,))
        return (x - mean) * (scale * jax.lax.rsqrt(var + self.eps)) + bias


def _conv(features: int, k: int, name: str, stride: int = 1) -> nn.Conv:
    pad = ((k // 2, k // 2), (k // 2, k // 2))
    return nn.Conv(features, (k, k), (stride, stride), pad, use_bias=False, name=name)


def _avg_pool(x, s: int):
    return nn.avg_pool(x, (s, s), strides=(s, s)) if s > 1 else x


class Bottleneck(nn.Module):
    planes: int
    stride: int

    @nn.compact
    def __call__(self, x):  # x: [B, H, W, C_in] -> [B, H/stride, W/stride, 4 planes]
        out = nn.relu(FrozenBatchNorm(name="bn1")(_conv(self.planes, 1, "conv1")(x)))
        out = nn.relu(FrozenBatchNorm(name="bn2")(_conv(self.planes, 3, "conv2")(out)))
        out = _avg_pool(out, self.stride)
        out = FrozenBatchNorm(name="bn3")(_conv(self.planes * 4, 1, "conv3")(out))
        if self.stride > 1 or x.shape[-1] != self.planes * 4:
            x = _conv(self.planes * 4, 1, "downsample_conv")(_avg_pool(x, self.stride))
            x = FrozenBatchNorm(name="downsample_bn")(x)
        return nn.relu(out + x)


class AttentionPool(nn.Module):
    heads: int
    out_dim: int

    @nn.compact
    def __call__(self, x):  # x: [B, h, w, C] -> [B, out_dim]
        b, h, w, c = x.shape
        x = x.reshape(b, h * w, c)
        x = jnp.concatenate([x.mean(axis=1, keepdims=True), x], axis=1)  # [B, hw+1, C]
        pos = self.param("position_embedding", nn.initializers.normal(c**-0.5), (h * w + 1, c))
        x = x + pos
        dh = c // self.heads
        q = nn.Dense(c, name="q")(x[:, :1]).reshape(b, 1, self.heads, dh) * (dh**-0.5)
        k = nn.Dense(c, name="k")(x).reshape(b, h * w + 1, self.heads, dh)
        v = nn.Dense(c, name="v")(x).reshape(b, h * w + 1, self.heads, dh)
        probs = jax.nn.softmax(jnp.einsum("bqhd,bkhd->bhqk", q, k), axis=-1)  # [B, H, 1, hw+1]
        out = jnp.einsum("bhqk,bkhd->bqhd", probs, v).reshape(b, c)
        return nn.Dense(self.out_dim, name="c")(out)


class ModifiedResNet(nn.Module):
    """Normalised images ``[B, S, S, 3]`` -> embeddings ``[B, embed_dim]`` (already projected)."""

    cfg: CLIPConfig

    @nn.compact
    def __call__(self, x):
        cfg = self.cfg
        w = cfg.resnet_width
        x = nn.relu(FrozenBatchNorm(name="bn1")(_conv(w // 2, 3, "conv1", stride=2)(x)))
        x = nn.relu(FrozenBatchNorm(name="bn2")(_conv(w // 2, 3, "conv2")(x)))
        x = nn.relu(FrozenBatchNorm(name="bn3")(_conv(w, 3, "conv3")(x)))
        x = _avg_pool(x, 2)  # [B, S/4, S/4, w]
        for i, blocks in enumerate(cfg.resnet_layers):
            for j in range(blocks):
                stride = 2 if (i > 0 and j == 0) else 1
                x = Bottleneck(w * 2**i, stride, name=f"layer{i + 1}_{j}")(x)
        return AttentionPool(cfg.vision_heads, cfg.embed_dim, name="attnpool")(x)  # [B, D]

"""OpenAI CLIP (ViT image encoder + causal text transformer) in Flax (linen).

Architecture (as in OpenAI's ``clip/model.py`` and transformers' ``CLIPModel``):

- both towers use pre-LN residual blocks ``x + attn(ln1(x))``, ``x + mlp(ln2(x))`` with
  biased q/k/v/out projections, queries scaled by ``head_dim ** -0.5`` and an MLP
  ``fc2(act(fc1(x)))`` where ``act`` is ``quick_gelu`` for OpenAI's checkpoints;
- vision: non-overlapping ``patch x patch`` conv (no bias) -> prepend the class token ->
  add positional embeddings -> pre-LN -> transformer -> post-LN on the class token ->
  linear projection (no bias);
- text: token + positional embeddings -> transformer with a causal mask -> final LN ->
  the hidden state at the end-of-text token -> linear projection (no bias);
- ``logit_scale`` is stored as a log; logits are ``exp(logit_scale) * cosine``;
- with ``cfg.vision_kind == "resnet"`` the image tower is :class:`.resnet.ModifiedResNet`,
  whose attention pool already projects to the joint embedding (no visual projection).

Layers are stacked and run with ``nn.scan`` (one compiled layer body per tower).
``encode_image`` / ``encode_text`` are pure functions of ``(cfg, params, inputs)``; wrap
them with ``functools.partial(fn, cfg)`` and ``jax.jit`` (``cfg`` is hashable).
"""

from __future__ import annotations

from typing import Any

import flax.linen as nn
import jax
import jax.numpy as jnp

from .config import IMAGE_MEAN, IMAGE_STD, CLIPConfig
from .resnet import ModifiedResNet

Params = dict[str, Any]


def quick_gelu(x):
    return x * jax.nn.sigmoid(1.702 * x)


def _act(name: str):
    return quick_gelu if name == "quick_gelu" else lambda x: jax.nn.gelu(x, approximate=False)


class Block(nn.Module):
    """One pre-LN transformer layer; scanned over layers (carry: hidden state, mask)."""

    width: int
    heads: int
    mlp_dim: int
    activation: str
    eps: float

    @nn.compact
    def __call__(self, carry, _):
        x, mask = carry  # x: [B, T, W]; mask: [T, T] bool or None
        b, t, w = x.shape
        dh = w // self.heads
        h = nn.LayerNorm(self.eps, name="ln1")(x)
        q = nn.Dense(w, name="q")(h).reshape(b, t, self.heads, dh) * (dh**-0.5)
        k = nn.Dense(w, name="k")(h).reshape(b, t, self.heads, dh)
        v = nn.Dense(w, name="v")(h).reshape(b, t, self.heads, dh)
        scores = jnp.einsum("bqhd,bkhd->bhqk", q, k)  # [B, H, T, T]
        if mask is not None:
            scores = jnp.where(mask, scores, jnp.finfo(scores.dtype).min)
        probs = jax.nn.softmax(scores, axis=-1)
        a = jnp.einsum("bhqk,bkhd->bqhd", probs, v).reshape(b, t, w)
        x = x + nn.Dense(w, name="o")(a)
        h = nn.LayerNorm(self.eps, name="ln2")(x)
        h = nn.Dense(w, name="fc2")(_act(self.activation)(nn.Dense(self.mlp_dim, name="fc1")(h)))
        return (x + h, mask), None


def _stack(width, heads, mlp_dim, cfg: CLIPConfig, layers: int, name: str):
    return nn.scan(
        Block,
        variable_axes={"params": 0},
        split_rngs={"params": True},
        length=layers,
    )(width, heads, mlp_dim, cfg.activation, cfg.layer_norm_eps, name=name)


class VisionTransformer(nn.Module):
    """Normalised images ``[B, S, S, 3]`` -> class-token features ``[B, vision_width]``."""

    cfg: CLIPConfig

    @nn.compact
    def __call__(self, x):
        cfg = self.cfg
        w, p = cfg.vision_width, cfg.patch_size
        x = nn.Conv(w, (p, p), strides=(p, p), padding="VALID", use_bias=False, name="patch_embed")(
            x
        )  # [B, S/p, S/p, W]
        b = x.shape[0]
        x = x.reshape(b, -1, w)  # [B, N, W], patches in row-major order
        cls = self.param("class_embedding", nn.initializers.normal(w**-0.5), (w,))
        x = jnp.concatenate([jnp.broadcast_to(cls, (b, 1, w)).astype(x.dtype), x], axis=1)
        pos = self.param(
            "position_embedding", nn.initializers.normal(w**-0.5), (cfg.num_patches + 1, w)
        )
        x = nn.LayerNorm(cfg.layer_norm_eps, name="pre_ln")(x + pos)  # [B, N+1, W]
        layers = _stack(w, cfg.vision_heads, cfg.vision_mlp_dim, cfg, cfg.vision_layers, "layers")
        (x, _), _ = layers((x, None), None)
        return nn.LayerNorm(cfg.layer_norm_eps, name="post_ln")(x[:, 0])  # [B, W]


class TextTransformer(nn.Module):
    """Token ids ``[B, L]`` (``L <= context_length``) -> pooled features ``[B, text_width]``."""

    cfg: CLIPConfig

    @nn.compact
    def __call__(self, tokens):
        cfg = self.cfg
        w = cfg.text_width
        n = tokens.shape[1]
        x = nn.Embed(cfg.vocab_size, w, name="token_embedding")(tokens)  # [B, L, W]
        pos = self.param(
            "position_embedding", nn.initializers.normal(0.01), (cfg.context_length, w)
        )
        x = x + pos[:n]
        causal = jnp.tril(jnp.ones((n, n), bool))  # [L, L]: query i sees keys <= i
        layers = _stack(w, cfg.text_heads, cfg.text_mlp_dim, cfg, cfg.text_layers, "layers")
        (x, _), _ = layers((x, causal), None)
        x = nn.LayerNorm(cfg.layer_norm_eps, name="final_ln")(x)
        if cfg.eot_token_id is None:
            eot = jnp.argmax(tokens, axis=-1)  # [B]
        else:
            eot = jnp.argmax(tokens == cfg.eot_token_id, axis=-1)  # [B], first occurrence
        return x[jnp.arange(x.shape[0]), eot]  # [B, W]


class CLIP(nn.Module):
    """Both towers, their projections and the logit scale (see module docstring)."""

    cfg: CLIPConfig

    def setup(self):
        cfg = self.cfg
        self.text = TextTransformer(cfg, name="text")
        if cfg.vision_kind == "resnet":
            self.vision = ModifiedResNet(cfg, name="vision")
        else:
            self.vision = VisionTransformer(cfg, name="vision")
            self.visual_projection = nn.Dense(
                cfg.embed_dim, use_bias=False, name="visual_projection"
            )
        self.text_projection = nn.Dense(cfg.embed_dim, use_bias=False, name="text_projection")
        self.logit_scale = self.param(
            "logit_scale", nn.initializers.constant(jnp.log(1 / 0.07)), ()
        )

    def encode_image(self, images):
        """Images ``[B, S, S, 3]`` in [0, 1] (RGB) -> embeddings ``[B, D]`` (not normalised)."""
        mean = jnp.asarray(IMAGE_MEAN, jnp.float32)
        std = jnp.asarray(IMAGE_STD, jnp.float32)
        x = (images.astype(jnp.float32) - mean) / std
        if self.cfg.vision_kind == "resnet":
            return self.vision(x)
        return self.visual_projection(self.vision(x))

    def encode_text(self, tokens):
        """Token ids ``[B, L]`` -> embeddings ``[B, D]`` (not normalised)."""
        return self.text_projection(self.text(tokens))

    def __call__(self, images, tokens):
        """Image-text logits ``[B_img, B_txt]``: ``exp(logit_scale) * cosine``."""
        return jnp.exp(self.logit_scale) * cosine(
            self.encode_image(images), self.encode_text(tokens)
        )


def init_params(cfg: CLIPConfig, rng: jax.Array) -> Params:
    """Random parameters (for tests and shape checks)."""
    images = jnp.zeros((1, cfg.image_size, cfg.image_size, 3), jnp.float32)
    tokens = jnp.zeros((1, cfg.context_length), jnp.int32)
    return CLIP(cfg).init(rng, images, tokens)["params"]


def param_shapes(cfg: CLIPConfig) -> Params:
    """The parameter tree of ``cfg`` as ``jax.ShapeDtypeStruct`` leaves (no compute)."""
    return jax.eval_shape(lambda: init_params(cfg, jax.random.key(0)))


def _check_image_shape(cfg: CLIPConfig, images) -> None:
    want = (cfg.image_size, cfg.image_size, 3)
    if images.ndim != 4 or tuple(images.shape[1:]) != want:
        raise ValueError(f"images must be [B, {want[0]}, {want[1]}, 3], got {images.shape}")


def encode_image(cfg: CLIPConfig, params: Params, images) -> jax.Array:
    """Images ``[B, S, S, 3]`` float in [0, 1] -> embeddings ``[B, embed_dim]``."""
    _check_image_shape(cfg, images)
    return CLIP(cfg).apply({"params": params}, images, method=CLIP.encode_image)


def encode_text(cfg: CLIPConfig, params: Params, tokens) -> jax.Array:
    """Token ids ``[B, L]`` int, ``L <= context_length`` -> embeddings ``[B, embed_dim]``."""
    if tokens.ndim != 2 or tokens.shape[1] > cfg.context_length:
        raise ValueError(f"tokens must be [B, L<={cfg.context_length}], got {tokens.shape}")
    return CLIP(cfg).apply({"params": params}, tokens, method=CLIP.encode_text)


def logits(cfg: CLIPConfig, params: Params, images, tokens) -> jax.Array:
    """``[B_img, B_txt]`` image-text logits, transformers' ``logits_per_image``."""
    _check_image_shape(cfg, images)
    return CLIP(cfg).apply({"params": params}, images, tokens)


def fit_images(images, size: int) -> jax.Array:
    """Frames ``[B, H, W, 3]`` -> ``[B, size, size, 3]`` as CLIP's preprocessing does it:
    bicubic resize (antialiased) of the shorter side to ``size``, then a centre crop.

    PIL's bicubic (OpenAI's pipeline) uses a slightly different kernel, so pixels differ
    from OpenAI's preprocessing by small amounts; the layout and field of view match.
    """
    b, h, w, c = images.shape
    if (h, w) == (size, size):
        return images
    scale = size / min(h, w)
    nh, nw = max(size, round(h * scale)), max(size, round(w * scale))
    x = jax.image.resize(images, (b, nh, nw, c), method="bicubic", antialias=True)
    top, left = (nh - size) // 2, (nw - size) // 2
    return jnp.clip(x[:, top : top + size, left : left + size], 0.0, 1.0)  # [B, size, size, 3]


def cosine(image_emb, text_emb) -> jax.Array:
    """Cosine similarities ``[B_img, B_txt]`` between ``[B_img, D]`` and ``[B_txt, D]``."""
    a = image_emb / jnp.linalg.norm(image_emb, axis=-1, keepdims=True)
    b = text_emb / jnp.linalg.norm(text_emb, axis=-1, keepdims=True)
    return a @ b.T

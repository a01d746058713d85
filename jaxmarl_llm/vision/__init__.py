"""Vision(-language) models in JAX/Flax: CLIP image/text encoders for vision-based shaping."""

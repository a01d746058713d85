"""Verco: language-model agents whose action adapter is trained by PPO on the scores the
model gives each available macro-action, and whose message adapter imitates a teacher's
messages by SFT (two LoRA adapters over one frozen decoder)."""

from jaxmarl_llm.methods.verco import answers  # noqa: F401  (registers the prompt templates)

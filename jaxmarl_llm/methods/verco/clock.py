"""Where an iteration's time goes, and the model work it counts."""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass

TIME_SPLIT = ("env_s", "lm_s", "update_s", "text_s")
COUNTS = ("lm_tokens", "update_tokens", "trunk_hits", "trunk_misses")


@dataclass
class Clock:
    """Seconds spent on the env (device), the LM in the rollout (action scoring, critic
    prefill and value head), the PPO update, and host text (observations, prompts,
    tokenizing, bookkeeping)."""

    env_s: float = 0.0
    lm_s: float = 0.0
    update_s: float = 0.0
    text_s: float = 0.0
    # real token positions the rollout's model calls ran (prompts, and candidates where
    # scored), batch-filling copies included; a trunk pass counts as part of the scoring
    # or critic call it serves, so both lora_layers settings count the same work
    lm_tokens: int = 0
    update_tokens: int = 0  # prompt and candidate positions of the update's minibatches
    trunk_hits: int = 0  # prompts whose trunk states were kept (lora_layers=last:K)
    trunk_misses: int = 0

    def as_dict(self) -> dict:
        return dataclasses.asdict(self)


def hit_rate(hits: int, misses: int) -> float:
    return hits / (hits + misses) if hits + misses else float("nan")

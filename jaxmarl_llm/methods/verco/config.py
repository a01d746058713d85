"""The ``algo`` block of ``verco``, ``twosome`` and ``lm_zero_shot`` and its checks."""

from __future__ import annotations

from dataclasses import dataclass, field

from jaxmarl_llm.errors import ConfigError
from jaxmarl_llm.learners.registry import algo_spec
from jaxmarl_llm.lm.lora import parse_lora_layers
from jaxmarl_llm.methods.verco.message_sources import MESSAGE_SOURCES
from jaxmarl_llm.methods.verco.models import check_model_name
from jaxmarl_llm.methods.verco.policy import NORMALIZATIONS


@dataclass
class VercoConfig:
    """The ``algo`` block of ``verco``, ``twosome`` and ``lm_zero_shot``."""

    name: str = "verco"
    model: str = "smollm2"  # smollm2 | gemma3_270m | tiny | a .gguf path
    # teammate messages: "none", "teammate_observation", "student" (the SFT message adapter),
    # "teacher" (the scripted teacher's own, from the whole kitchen) or a registered source
    messages: str = "none"
    total_timesteps: int = 2048  # env steps per seed
    num_envs: int = 4
    num_steps: int = 32  # rollout length per iteration
    update_epochs: int = 1
    minibatch_size: int = 16  # decisions per PPO minibatch
    gamma: float = 0.99
    gae_lambda: float = 0.95
    clip_eps: float = 0.2
    value_coef: float = 0.5
    entropy_coef: float = 0.01
    # TWOSOME uses 5e-7 / 5e-5 on a 7B model over 5e5 steps; a 135M adapter on a CPU
    # budget of a few thousand steps needs a larger actor step
    actor_lr: float = 1e-4
    critic_lr: float = 5e-5
    max_grad_norm: float = 0.5
    target_kl: float | None = 0.02  # stop the update's epochs past this KL (TWOSOME)
    normalization: str = "word"  # candidate score: sum of token log-probs / word count
    lora_rank: int = 8
    lora_alpha: float = 16.0
    lora_targets: list[str] = field(default_factory=lambda: ["q", "v"])
    # both adapters' blocks: "all" (TWOSOME's and Verco's setting) or "last:K", the top K
    # blocks over a frozen trunk whose states are computed once per prompt and kept
    lora_layers: str = "all"
    trunk_cache_mb: float = 1024.0  # bound on the kept trunk states (last:K)
    value_hidden: list[int] = field(default_factory=lambda: [1024, 512])
    max_prompt_tokens: int = 96
    # messages=student: the SFT-trained message adapter (experiments/verco_messages.py),
    # same rank, alpha and targets as the action adapter, and its decoding budget in tokens
    message_adapter: str | None = None
    message_max_tokens: int = 20


def check_config(cfg) -> None:
    check_model_name(str(cfg.model))
    if cfg.normalization not in NORMALIZATIONS:
        raise ConfigError(
            f"bad value for config key 'algo.normalization': {cfg.normalization!r}; "
            f"valid choices: {', '.join(NORMALIZATIONS)}"
        )
    if cfg.messages not in MESSAGE_SOURCES:
        raise ConfigError(
            f"bad value for config key 'algo.messages': {cfg.messages!r}; valid choices: "
            f"{', '.join(MESSAGE_SOURCES)} (a message module adds itself with "
            "register_message_source)"
        )
    if algo_spec(cfg.name).exchanges_messages and cfg.messages == "none":
        raise ConfigError(
            "config key 'algo.messages' is 'none' but algo.name=verco exchanges messages; "
            "use algo.name=twosome for agents without messages"
        )
    try:
        parse_lora_layers(cfg.lora_layers, None)
    except ValueError as e:
        raise ConfigError(str(e)) from None
    if cfg.trunk_cache_mb < 0:
        raise ConfigError("bad value for config key 'algo.trunk_cache_mb': must be >= 0")
    for key in ("total_timesteps", "num_envs", "num_steps", "update_epochs", "minibatch_size",
                "lora_rank", "max_prompt_tokens"):  # fmt: skip
        if getattr(cfg, key) <= 0:
            raise ConfigError(f"bad value for config key 'algo.{key}': must be > 0")
    if cfg.total_timesteps < cfg.num_envs * cfg.num_steps:
        raise ConfigError(
            f"bad value for config key 'algo.total_timesteps': {cfg.total_timesteps} is less "
            f"than one iteration (num_envs * num_steps = {cfg.num_envs * cfg.num_steps})"
        )

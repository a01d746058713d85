"""What an agent tells its teammate (``algo.messages``): the message sources by name."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any, Protocol

import jax

from jaxmarl_llm.errors import ConfigError
from jaxmarl_llm.lm.lora import init_lora, load_adapters
from jaxmarl_llm.methods.verco.models import PolicyModel, adapted_layers


class MessageSource(Protocol):
    """What an agent tells its teammate: one message per sender, from the sender's own
    observation text (``obs_texts``); ``senders`` are their ``(env, agent)`` indices into
    ``env_state``, the kitchens' batched states, for a source that reads the whole state."""

    def messages(self, obs_texts: list[str], senders=None, env_state=None) -> list[str]: ...


class NoMessages:
    """TWOSOME: agents say nothing."""

    def messages(self, obs_texts: list[str], senders=None, env_state=None) -> list[str]:
        return [""] * len(obs_texts)


class TeammateObservation:
    """The teammate's own view in its words (its holding and what it sees, first ``max_words``
    words): the message a team without a trained message adapter can exchange."""

    def __init__(self, max_words: int = 16):
        self.max_words = max_words

    def messages(self, obs_texts: list[str], senders=None, env_state=None) -> list[str]:
        out = []
        for text in obs_texts:
            sentences = [s for s in text.split(". ") if s.startswith(("You hold", "You see"))]
            said = ". ".join(s.rstrip(".") for s in sentences)
            said = said.replace("You hold", "I hold").replace("You see", "I see")
            out.append(" ".join(said.split()[: self.max_words]))
        return out


class StudentMessages:
    """Verco: the frozen message adapter's greedy message (at most 10 words) for the
    teammate's observation text, decoded once per distinct text (``MessageCache``)."""

    def __init__(self, model: PolicyModel, cfg):
        from jaxmarl_llm.methods.verco.messages import MessageCache

        if not cfg.message_adapter:
            raise ConfigError(
                "algo.messages=student needs algo.message_adapter: the folder of a message "
                "adapter trained by experiments/verco_messages.py"
            )
        path = Path(str(cfg.message_adapter))
        if not (path / "structure.json").exists():
            raise ConfigError(
                f"algo.message_adapter={path} holds no message adapter (no structure.json); "
                "make one with experiments/verco_messages.py"
            )
        like = init_lora(jax.random.PRNGKey(0), model.params, tuple(cfg.lora_targets),
                         int(cfg.lora_rank), float(cfg.lora_alpha),
                         layers=adapted_layers(cfg, model))  # fmt: skip
        try:
            lora = load_adapters(path, like)
        except ValueError as e:
            raise ConfigError(
                f"algo.message_adapter does not fit algo.model={model.name} with "
                f"algo.lora_layers={cfg.lora_layers} (an adapter made by "
                f"experiments/verco_messages.py --lora-layers L loads with algo.lora_layers=L): "
                f"{e}"
            ) from e
        self.cache = MessageCache.for_adapter(
            model.lm, model.params, lora, model.tokenizer, int(cfg.message_max_tokens)
        )

    def messages(self, obs_texts: list[str], senders=None, env_state=None) -> list[str]:
        return self.cache(obs_texts)


class TeacherMessages:
    """The scripted teacher's own message of each sender, from the whole kitchen
    (``teacher.scripted_messages``): the messages the student adapter is fitted to, without
    its errors, so that a run tells what Verco's messages are worth when they are right."""

    def __init__(self, env):
        from envs.salad.env import SaladKitchen

        if not isinstance(env, SaladKitchen):
            raise ConfigError(
                f"algo.messages=teacher needs a salad kitchen (salad:A, salad:B), whose "
                f"scripted teacher writes the messages; got {type(env).__name__}"
            )
        self.env = env

    def messages(self, obs_texts: list[str], senders=None, env_state=None) -> list[str]:
        from jaxmarl_llm.methods.verco.teacher import scripted_messages

        if senders is None or env_state is None:
            raise ValueError("teacher messages read the kitchens' states: pass senders and "
                             "env_state")  # fmt: skip
        if len(senders) != len(obs_texts):
            raise ValueError(f"{len(senders)} senders for {len(obs_texts)} observation texts")
        if not senders:
            return []
        by_env = scripted_messages(self.env, env_state)  # [env][agent]
        return [by_env[i][a] for i, a in senders]


MESSAGE_SOURCES: dict[str, Callable[[PolicyModel, Any, Any], MessageSource]] = {
    "none": lambda model, cfg, env: NoMessages(),
    "teammate_observation": lambda model, cfg, env: TeammateObservation(),
    "student": lambda model, cfg, env: StudentMessages(model, cfg),
    "teacher": lambda model, cfg, env: TeacherMessages(env),
}


def register_message_source(name: str, factory: Callable[[PolicyModel, Any, Any], MessageSource]):
    """Make ``algo.messages=name`` build ``factory(policy_model, algo_cfg, env)``."""
    if name in MESSAGE_SOURCES:
        raise ValueError(f"message source {name!r} is already registered")
    MESSAGE_SOURCES[name] = factory

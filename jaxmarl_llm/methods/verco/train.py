"""The RL stage of Verco's Algorithm 1 (and TWOSOME, and the untrained LM) on the salad
kitchen: a host loop around a language-model policy.

Each iteration, per seed: roll out ``num_envs`` kitchens for ``num_steps`` steps (env
reset and step jitted and vmapped; the text in between on the host), then, unless the
variant is ``lm_zero_shot``, a PPO update of the action adapter (LoRA) and the value head.

Per step, an agent *decides* only where more than one action is available: while its
macro-action runs (or where only "wait" is left) its one action is taken without asking
the model. A deciding agent's prompt is its observation text, its teammate's message (a
:class:`MessageSource`) and TWOSOME's cue, "you should"; the candidates are the action
phrases, scored by :func:`~jaxmarl_llm.methods.verco.policy.action_log_probs` in one
jitted batch over the distinct prompts of the step, each prompt scored once per rollout
(the adapter is fixed during it). The critic is :class:`ValueHead` on the frozen base's
:func:`prompt_features`, cached by prompt text for the whole run.

``algo.lora_layers=last:K`` puts the adapters on the top ``K`` blocks
(:mod:`~jaxmarl_llm.methods.verco.trunk`): each prompt's trunk states come from a cache by
token ids or one trunk pass, scoring and the critic's features run the top blocks from
them, the rollout keeps them in :class:`Decisions` and the update reads them there.

Semi-MDP bookkeeping (:func:`semi_mdp_advantages`): an agent's decisions are its
transitions. Decision ``j`` at step ``t_j`` earns the discounted team rewards up to its
next decision, ``R_j = sum_{t_j <= t < t_{j+1}} gamma^(t - t_j) r_t``, and bootstraps with
``gamma^(t_{j+1} - t_j) V(next decision)``; the forced steps in between carry no policy
gradient and no value target of their own. An episode's end cuts the sum there (no
bootstrap); the rollout's end bootstraps with the value of the agent's prompt after the
last step. GAE runs over decisions with ``lambda`` per decision.

Both agents share the adapter and the value head (their prompts differ).
"""

from __future__ import annotations

import dataclasses
import functools
import json
import logging
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Protocol

import jax
import jax.numpy as jnp
import numpy as np
import optax
from omegaconf import DictConfig, OmegaConf

from envs.capabilities import TextObservations, require
from jaxmarl_llm.errors import ConfigError
from jaxmarl_llm.learners.registry import algo_spec
from jaxmarl_llm.lm.lora import init_lora, load_adapters, parse_lora_layers
from jaxmarl_llm.methods.verco.losses import ppo_loss
from jaxmarl_llm.methods.verco.models import PolicyModel, check_model_name, load_policy_model
from jaxmarl_llm.methods.verco.policy import (
    NORMALIZATIONS,
    ValueHead,
    action_log_probs,
    pack_candidates,
    pack_prompts,
    prompt_features,
)
from jaxmarl_llm.methods.verco.trunk import (
    TrunkCache,
    TrunkEntry,
    pack_entries,
    split_lm,
    top_action_log_probs,
    top_prompt_features,
    trunk_states,
)

log = logging.getLogger(__name__)

PROMPT_CUE = "To make the salad, you should"


@dataclass
class VercoConfig:
    """The ``algo`` block of ``verco``, ``twosome`` and ``lm_zero_shot``."""

    name: str = "verco"
    model: str = "smollm2"  # smollm2 | gemma3_270m | tiny | a .gguf path
    # teammate messages: "none", "teammate_observation" or a registered MessageSource
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


def make_learner(cfg, env, shaper):
    raise ConfigError(
        f"algo.name={cfg.name} trains on the host (make_trainer, driven by "
        "jaxmarl_llm.runner.host_loop), not as a jitted Learner"
    )


# ----- messages ----------------------------------------------------------------------------


class MessageSource(Protocol):
    """What an agent tells its teammate, from the agent's own observation text."""

    def messages(self, obs_texts: list[str]) -> list[str]: ...


class NoMessages:
    """TWOSOME: agents say nothing."""

    def messages(self, obs_texts: list[str]) -> list[str]:
        return [""] * len(obs_texts)


class TeammateObservation:
    """The teammate's own view in its words (its holding and what it sees, first ``max_words``
    words): the message a team without a trained message adapter can exchange."""

    def __init__(self, max_words: int = 16):
        self.max_words = max_words

    def messages(self, obs_texts: list[str]) -> list[str]:
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
                f"algo.message_adapter does not fit algo.model={model.name}: {e}"
            ) from e
        self.cache = MessageCache.for_adapter(
            model.lm, model.params, lora, model.tokenizer, int(cfg.message_max_tokens)
        )

    def messages(self, obs_texts: list[str]) -> list[str]:
        return self.cache(obs_texts)


def adapted_layers(algo, model: PolicyModel) -> int:
    """The number of top blocks ``algo.lora_layers`` adapts in ``model``."""
    try:
        return parse_lora_layers(algo.lora_layers, model.lm.module.cfg.n_layers)
    except ValueError as e:
        raise ConfigError(f"{e} (algo.model={model.name})") from None


MESSAGE_SOURCES: dict[str, Callable[[PolicyModel, Any], MessageSource]] = {
    "none": lambda model, cfg: NoMessages(),
    "teammate_observation": lambda model, cfg: TeammateObservation(),
    "student": StudentMessages,
}


def register_message_source(name: str, factory: Callable[[PolicyModel, Any], MessageSource]):
    """Make ``algo.messages=name`` build ``factory(policy_model, algo_cfg)``."""
    if name in MESSAGE_SOURCES:
        raise ValueError(f"message source {name!r} is already registered")
    MESSAGE_SOURCES[name] = factory


def action_prompt(observation: str, message: str) -> str:
    """TWOSOME-style prompt: the observation without its action list, the teammate's
    message, and the cue the action phrases continue."""
    seen = observation.split(" Actions:")[0].split(" You are busy")[0]
    said = f' Your teammate says: "{message}".' if message else ""
    return f"{seen}{said} {PROMPT_CUE}"


# ----- semi-MDP returns --------------------------------------------------------------------


def semi_mdp_advantages(
    decision_steps: Sequence[int],
    values: Sequence[float],
    rewards: np.ndarray,
    dones: np.ndarray,
    last_value: float,
    gamma: float,
    lam: float,
) -> tuple[np.ndarray, np.ndarray]:
    """GAE advantages and returns ``[n]`` of one agent's ``n`` decisions in one rollout.

    ``decision_steps``: increasing rollout steps at which the agent chose;
    ``values``: the critic at each decision; ``rewards``, ``dones`` ``[T]``: the team's
    reward and episode end of every step (the step's transition); ``last_value``: the
    critic after step ``T - 1`` (used where the last decision's episode is still running).
    """
    steps = list(decision_steps)
    n, horizon = len(steps), len(rewards)
    advantages = np.zeros(n, np.float64)
    gae = 0.0
    for j in reversed(range(n)):
        end = steps[j + 1] if j + 1 < n else horizon
        segment_return, discount, terminal = 0.0, 1.0, False
        for t in range(steps[j], end):
            segment_return += discount * float(rewards[t])
            discount *= gamma
            if dones[t]:
                terminal = True
                break
        if terminal:
            next_value, discount, gae = 0.0, 0.0, 0.0
        else:
            next_value = values[j + 1] if j + 1 < n else last_value
            if j + 1 == n:
                gae = 0.0
        delta = segment_return + discount * next_value - values[j]
        gae = delta + discount * lam * gae
        advantages[j] = gae
    return advantages, advantages + np.asarray(values, np.float64)


# ----- the policy's device functions -------------------------------------------------------


class TrainState(dict):
    """Per seed: ``lora``, ``value`` (head params), ``opt`` (optimiser state), ``env``
    (the kitchens' states), ``episode_return`` and ``episode_length`` ``[E]`` so far."""


@dataclass
class Decisions:
    """One iteration's decisions of every agent, flat."""

    prompts: list[str] = field(default_factory=list)
    avail: list[np.ndarray] = field(default_factory=list)
    actions: list[int] = field(default_factory=list)
    log_probs: list[float] = field(default_factory=list)
    entropies: list[float] = field(default_factory=list)  # of the policy at each decision
    values: list[float] = field(default_factory=list)
    advantages: list[float] = field(default_factory=list)
    returns: list[float] = field(default_factory=list)
    # with algo.lora_layers=last:K, the trunk states of the prompts scored, by prompt
    trunk: dict[str, TrunkEntry] = field(default_factory=dict)


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


class LMPolicy:
    """The model, tokenized candidates, caches and jitted functions a run shares."""

    def __init__(self, algo, env, model: PolicyModel):
        self.cfg = algo
        self.env = env
        self.model = model
        self.tokenizer = model.tokenizer
        self.value_head = ValueHead(tuple(algo.value_hidden))
        self.text = require(env, TextObservations, needed_by=f"algo.name={algo.name}")
        phrases = self.text.action_phrases()
        self.num_actions = len(phrases)
        cand_ids = [self.tokenizer.encode(" " + p, add_bos=False) for p in phrases]
        self.cand_len = max(len(c) for c in cand_ids)
        self.rows = 2 * int(algo.num_envs)  # every forward runs this many prompts
        tokens, valid, _ = pack_candidates([cand_ids], self.num_actions, self.cand_len,
                                           self.tokenizer.pad_id)  # fmt: skip
        self.cand_tokens, self.cand_valid = tokens[0], valid[0]
        self.cand_size = int(self.cand_valid.sum())  # candidate positions per prompt
        self.word_counts = np.array([len(p.split()) for p in phrases], np.float32)
        self.features: dict[str, np.ndarray] = {}  # frozen-base critic input, by prompt
        self.token_ids: dict[str, list[int]] = {}
        self.normalization = str(algo.normalization)
        self.adapted_layers = adapted_layers(algo, model)
        self.split = None  # lora_layers=all: every call runs the whole model
        if str(algo.lora_layers).strip() != "all":  # last:L too: a trunk of the embedding
            self.split = split_lm(model.lm, self.adapted_layers)
            self.trunk_params, self.top_params = self.split.params(model.params)
            self.trunk_cache = TrunkCache(int(float(algo.trunk_cache_mb) * 2**20))
        # most steps have one or two deciders: with a trunk, a call runs the smallest of
        # these batch sizes that holds its prompts (all: one size, one program)
        self.batch_sizes = (self.rows,) if self.split is None else batch_sizes(self.rows)

    # -- text to tokens --
    def tokens_of(self, prompt: str) -> list[int]:
        ids = self.token_ids.get(prompt)
        if ids is None:
            ids = self.tokenizer.encode(prompt, add_bos=True)
            if len(ids) > self.cfg.max_prompt_tokens:
                raise ConfigError(
                    f"a prompt has {len(ids)} tokens, more than config key "
                    f"'algo.max_prompt_tokens' ({self.cfg.max_prompt_tokens}) allows: {prompt!r}"
                )
            self.token_ids[prompt] = ids
        return ids

    def packed(self, prompts: list[str]) -> tuple[np.ndarray, np.ndarray]:
        return pack_prompts([self.tokens_of(p) for p in prompts], self.cfg.max_prompt_tokens,
                            self.tokenizer.pad_id)  # fmt: skip

    def _fixed_batches(
        self, prompts: list[str], fn, clock: Clock, scores_candidates: bool,
        count_tokens: bool = True,
    ) -> list:  # fmt: skip
        """``fn(tokens, valid, batch_prompts)`` over ``prompts`` in batches of
        ``self.rows``, the last padded with copies of the first prompt up to the smallest
        of ``self.batch_sizes`` that holds it, so a few programs serve every call and a
        prompt's result does not depend on what it was batched with. Per prompt: its row
        of ``fn``'s array, or a tuple of its rows of ``fn``'s tuple of arrays."""
        out = []
        for i in range(0, len(prompts), self.rows):
            chunk = prompts[i : i + self.rows]
            size = min(b for b in self.batch_sizes if b >= len(chunk))
            padded = chunk + [chunk[0]] * (size - len(chunk))
            t0 = time.perf_counter()
            tokens, valid = self.packed(padded)
            clock.text_s += time.perf_counter() - t0
            t0 = time.perf_counter()
            result = jax.device_get(fn(tokens, valid, padded))
            clock.lm_s += time.perf_counter() - t0
            if count_tokens:
                clock.lm_tokens += int(valid.sum()) + scores_candidates * size * self.cand_size
            if isinstance(result, tuple):
                out.extend(zip(*(np.asarray(r)[: len(chunk)] for r in result), strict=True))
            else:
                out.extend(np.asarray(result)[: len(chunk)])
        return out

    def score_prompts(
        self, lora, prompts: list[str], clock: Clock, keep: dict | None = None
    ) -> dict[str, np.ndarray]:
        """``log pi`` over every action ``[A]`` (all available) of each prompt. With a
        trunk, the critic's features of the prompts come from the same call and their
        trunk states are put in ``keep`` (the rollout's buffer) where given."""
        m = self.model
        if self.split is None:

            def score(tokens, valid, _):
                return score_all_actions(
                    m.lm, self.normalization, m.params, lora, tokens, valid,
                    self.cand_tokens, self.cand_valid, self.word_counts,
                )  # fmt: skip

            rows = self._fixed_batches(prompts, score, clock, scores_candidates=True)
            return dict(zip(prompts, rows, strict=True))

        entries = self.trunk_entries(prompts, clock)
        if keep is not None:
            keep.update(entries)

        def score_top(tokens, valid, batch_prompts):
            states = pack_entries([entries[p] for p in batch_prompts], valid)
            log_pi, features = score_all_actions_top(
                self.split, self.normalization, self.top_params, lora, *states, valid,
                self.cand_tokens, self.cand_valid, self.word_counts,
            )  # fmt: skip
            for p, f in zip(batch_prompts, np.asarray(features), strict=True):
                self.features.setdefault(p, f)
            return log_pi

        rows = self._fixed_batches(prompts, score_top, clock, scores_candidates=True)
        return dict(zip(prompts, rows, strict=True))

    def trunk_entries(self, prompts: list[str], clock: Clock) -> dict[str, TrunkEntry]:
        """The trunk states of ``prompts``: kept ones from the cache, the rest computed
        (and offered to the cache)."""
        out, missing = {}, []
        for p in dict.fromkeys(prompts):
            entry = self.trunk_cache.get(self.tokens_of(p))
            if entry is None:
                missing.append(p)
            else:
                out[p] = entry
        clock.trunk_hits += len(out)
        clock.trunk_misses += len(missing)
        if missing:

            def run_trunk(tokens, valid, _):
                prompt_states, cand_states = trunk_all_actions(
                    self.split, self.trunk_params, tokens, valid, self.cand_tokens,
                    self.cand_valid,
                )  # fmt: skip
                return prompt_states, valid, cand_states

            rows = self._fixed_batches(missing, run_trunk, clock, False, count_tokens=False)
            for p, (prompt_states, valid, cand_states) in zip(missing, rows, strict=True):
                out[p] = TrunkEntry(prompt_states[valid], cand_states)
                self.trunk_cache.put(self.tokens_of(p), out[p])
        return out

    def _base_features(self, tokens, valid, _):
        return base_features(self.model.lm, self.model.params, tokens, valid)

    def _top_features(self, entries):
        def features(tokens, valid, batch_prompts):
            states, _ = pack_entries([entries[p] for p in batch_prompts], valid)
            return top_features(self.split, self.top_params, states, valid)

        return features

    def values(self, value_params, prompts: list[str], clock: Clock) -> np.ndarray:
        missing = list(dict.fromkeys(p for p in prompts if p not in self.features))
        if missing:
            if self.split is None:
                fn = self._base_features
            else:
                fn = self._top_features(self.trunk_entries(missing, clock))
            rows = self._fixed_batches(missing, fn, clock, False)
            self.features.update(zip(missing, rows, strict=True))
        feats = np.stack([self.features[p] for p in prompts])
        t0 = time.perf_counter()
        pad = (-len(prompts)) % self.rows  # fixed batch size: one program, same result per row
        feats = np.pad(feats, ((0, pad), (0, 0)))
        out = np.asarray(head_values(self.value_head, value_params, feats))
        clock.lm_s += time.perf_counter() - t0
        return out[: len(prompts)].astype(np.float64)


def batch_sizes(rows: int) -> tuple[int, ...]:
    """Powers of two below ``rows``, and ``rows``."""
    return tuple(sorted({2**i for i in range(rows.bit_length()) if 2**i < rows} | {rows}))


def _tile(x: np.ndarray, rows: int) -> jax.Array:
    return jnp.broadcast_to(x, (rows, *x.shape))


# The device functions take the model as a static argument and its parameters as
# arguments (not as constants folded into the program), so every trainer of one model in
# a process shares their compiled programs.
@functools.partial(jax.jit, static_argnums=(0, 1))
def score_all_actions(lm, normalization, base_params, lora, tokens, valid, cand_tokens,
                      cand_valid, word_counts):  # fmt: skip
    """``log pi`` ``[N, A]`` of every prompt over all actions (as if all were available)."""
    n = tokens.shape[0]
    log_pi, _ = action_log_probs(
        lm, base_params, lora, tokens, valid, _tile(cand_tokens, n), _tile(cand_valid, n),
        jnp.ones((n, cand_tokens.shape[0]), bool), normalization, _tile(word_counts, n),
    )  # fmt: skip
    return log_pi


@functools.partial(jax.jit, static_argnums=0)
def base_features(lm, base_params, tokens, valid):
    return prompt_features(lm, base_params, tokens, valid)


@functools.partial(jax.jit, static_argnums=0)
def trunk_all_actions(split, trunk_params, tokens, valid, cand_tokens, cand_valid):
    """The trunk's states of every prompt and all actions after it."""
    n = tokens.shape[0]
    return trunk_states(split, trunk_params, tokens, valid, _tile(cand_tokens, n),
                        _tile(cand_valid, n))  # fmt: skip


@functools.partial(jax.jit, static_argnums=(0, 1))
def score_all_actions_top(split, normalization, top_params, lora, prompt_states, cand_states,
                          valid, cand_tokens, cand_valid, word_counts):  # fmt: skip
    """``log pi`` ``[N, A]`` over all actions from the trunk's states, and the critic's
    features ``[N, D]`` (the top blocks without the adapter)."""
    n = prompt_states.shape[0]
    log_pi, _ = top_action_log_probs(
        split, top_params, lora, prompt_states, valid, cand_states, _tile(cand_tokens, n),
        _tile(cand_valid, n), jnp.ones((n, cand_tokens.shape[0]), bool), normalization,
        _tile(word_counts, n),
    )  # fmt: skip
    return log_pi, top_prompt_features(split, top_params, prompt_states, valid)


@functools.partial(jax.jit, static_argnums=0)
def top_features(split, top_params, prompt_states, valid):
    return top_prompt_features(split, top_params, prompt_states, valid)


@functools.partial(jax.jit, static_argnums=0)
def head_values(head, params, features):
    return head.apply(params, features)


def _ppo_objective(head, settings, trainable, batch, log_pi):
    _, clip_eps, value_coef, entropy_coef = settings
    values = head.apply(trainable["value"], batch["features"])
    adv = batch["advantages"]
    adv = (adv - adv.mean()) / (adv.std() + 1e-8)
    return ppo_loss(log_pi, batch["actions"], batch["log_probs"], adv, values, batch["values"],
                    batch["returns"], clip_eps, value_coef, entropy_coef)  # fmt: skip


@functools.partial(jax.jit, static_argnums=(0, 1, 2))
def ppo_grad(lm, head, settings, base_params, trainable, batch, cand_tokens, cand_valid,
             word_counts):  # fmt: skip
    """Loss, stats and gradient for ``trainable`` (``lora``, ``value``) on one minibatch;
    ``settings``: ``(normalization, clip_eps, value_coef, entropy_coef)``."""

    def loss(trainable):
        n = batch["tokens"].shape[0]
        log_pi, _ = action_log_probs(
            lm, base_params, trainable["lora"], batch["tokens"], batch["valid"],
            _tile(cand_tokens, n), _tile(cand_valid, n), batch["avail"], settings[0],
            _tile(word_counts, n),
        )  # fmt: skip
        return _ppo_objective(head, settings, trainable, batch, log_pi)

    return jax.value_and_grad(loss, has_aux=True)(trainable)


@functools.partial(jax.jit, static_argnums=(0, 1, 2))
def ppo_grad_top(split, head, settings, top_params, trainable, batch, cand_tokens, cand_valid,
                 word_counts):  # fmt: skip
    """:func:`ppo_grad` from the trunk states the rollout kept (``batch["prompt_states"]``,
    ``batch["cand_states"]``): the top blocks alone run, forward and backward."""

    def loss(trainable):
        n = batch["valid"].shape[0]
        log_pi, _ = top_action_log_probs(
            split, top_params, trainable["lora"], batch["prompt_states"], batch["valid"],
            batch["cand_states"], _tile(cand_tokens, n), _tile(cand_valid, n), batch["avail"],
            settings[0], _tile(word_counts, n),
        )  # fmt: skip
        return _ppo_objective(head, settings, trainable, batch, log_pi)

    return jax.value_and_grad(loss, has_aux=True)(trainable)


@functools.cache
def optimizer(actor_lr: float, critic_lr: float, max_grad_norm: float):
    """Adam on the adapter (``actor_lr``) and on the value head (``critic_lr``), each with
    its own gradient clipping, as TWOSOME's two optimisers; one object per setting, so
    :func:`apply_updates` compiles once."""
    clipped_adam = lambda lr: optax.chain(optax.clip_by_global_norm(max_grad_norm),  # noqa: E731
                                          optax.adam(lr))  # fmt: skip
    return optax.multi_transform(
        {"actor": clipped_adam(actor_lr), "critic": clipped_adam(critic_lr)},
        {"lora": "actor", "value": "critic"},
    )


@functools.partial(jax.jit, static_argnums=0)
def apply_updates(opt, trainable, opt_state, grads):
    updates, opt_state = opt.update(grads, opt_state, trainable)
    return optax.apply_updates(trainable, updates), opt_state


def masked_log_pi(log_pi_all: np.ndarray, avail: np.ndarray) -> np.ndarray:
    """``log pi`` renormalised over the available actions (``-inf`` elsewhere): the same
    distribution ``masked_log_softmax`` gives from the scores."""
    x = np.where(avail, log_pi_all.astype(np.float64), -np.inf)
    return x - np.logaddexp.reduce(x[avail])


def hit_rate(hits: int, misses: int) -> float:
    return hits / (hits + misses) if hits + misses else float("nan")


def entropy(log_pi: np.ndarray) -> float:
    finite = np.isfinite(log_pi)
    return float(-np.sum(np.exp(log_pi[finite]) * log_pi[finite]))


# ----- the env on the device -----------------------------------------------------------------


@functools.cache
def env_functions(env):
    """Jitted, env-vmapped ``reset(keys)``, ``avail(states) -> [E, 2, A]`` and
    ``step(keys, states, actions [E, 2]) -> (states, reward, done, success, length)`` with
    the reset after an episode's end."""

    def avail(state):
        masks = env.get_avail_actions(state)
        return jnp.stack([masks[a] for a in env.agents])

    def step(key, state, actions):
        step_key, reset_key = jax.random.split(key)
        acts = {a: actions[i] for i, a in enumerate(env.agents)}
        _, stepped, rewards, dones, _ = env.step_env(step_key, state, acts)
        done = dones["__all__"]
        _, fresh = env.reset(reset_key)
        state = jax.tree.map(lambda r, s: jnp.where(done, r, s), fresh, stepped)
        return state, rewards[env.agents[0]], done, stepped.delivered, stepped.step

    reset = jax.jit(jax.vmap(lambda k: env.reset(k)[1]))
    return reset, jax.jit(jax.vmap(avail)), jax.jit(jax.vmap(step))


# ----- the trainer ---------------------------------------------------------------------------


class Trainer:
    """One run's seeds: init, one iteration (rollout, update) per seed, metrics."""

    def __init__(self, cfg: DictConfig, env, model: PolicyModel | None = None,
                 messages: MessageSource | None = None):  # fmt: skip
        self.cfg = cfg
        self.algo = cfg.algo
        self.env = env
        self.model = model or load_policy_model(str(self.algo.model), int(cfg.seed))
        self.policy = LMPolicy(self.algo, env, self.model)
        self.messages = messages or MESSAGE_SOURCES[self.algo.messages](self.model, self.algo)
        self.trains = algo_spec(self.algo.name).trains
        self.reset, self.avail, self.step = env_functions(env)
        self.optimizer = optimizer(float(self.algo.actor_lr), float(self.algo.critic_lr),
                                   float(self.algo.max_grad_norm))  # fmt: skip

    @property
    def steps_per_iteration(self) -> int:
        return int(self.algo.num_envs) * int(self.algo.num_steps)

    @property
    def iterations(self) -> int:
        return int(self.algo.total_timesteps) // self.steps_per_iteration

    def seed_key(self, seed_index: int) -> jax.Array:
        return jax.random.fold_in(jax.random.PRNGKey(int(self.cfg.seed)), seed_index)

    def init(self, seed_index: int) -> TrainState:
        k_lora, k_value, k_env = jax.random.split(self.seed_key(seed_index), 3)
        lora = init_lora(k_lora, self.model.params, tuple(self.algo.lora_targets),
                         int(self.algo.lora_rank), float(self.algo.lora_alpha),
                         layers=self.policy.adapted_layers)  # fmt: skip
        value = self.policy.value_head.init(k_value, jnp.zeros((1, self.model.hidden_size)))
        trainable = {"lora": lora, "value": value}
        e = int(self.algo.num_envs)
        return TrainState(
            lora=lora,
            value=value,
            opt=self.optimizer.init(trainable),
            env=self.reset(jax.random.split(k_env, e)),
            episode_return=np.zeros(e, np.float32),
            episode_length=np.zeros(e, np.int32),
        )

    def checkpoint_tree(self, states: list[TrainState]) -> dict:
        return {f"seed{s}": dict(state) for s, state in enumerate(states)}

    def from_checkpoint(self, tree: dict) -> list[TrainState]:
        states = []
        for s in range(int(self.cfg.num_seeds)):
            state = TrainState(tree[f"seed{s}"])
            state["episode_return"] = np.asarray(state["episode_return"], np.float32)
            state["episode_length"] = np.asarray(state["episode_length"], np.int32)
            states.append(state)
        return states

    def summary(self, metrics: list[list[dict]]) -> dict:
        """The model, the time split and token rates over ``metrics`` (``[iteration][seed]``),
        the critic's cached prompts and, with a trunk, its cache's counts."""
        ran = [m for per_seed in metrics for m in per_seed]
        total = {k: sum(m[k] for m in ran) for k in (*TIME_SPLIT, *COUNTS)}
        out = {
            "model": self.model.name,
            "time_split_s": {k: total[k] for k in TIME_SPLIT},
            "lm_tokens_per_s": total["lm_tokens"] / total["lm_s"] if total["lm_s"] else None,
            "update_tokens_per_s": (
                total["update_tokens"] / total["update_s"] if total["update_s"] else None
            ),
            "critic_prompts_cached": len(self.policy.features),
            "lora_layers": str(self.algo.lora_layers),
        }
        if self.policy.split is not None:
            cache = self.policy.trunk_cache.stats()
            out["trunk_cache"] = {
                "hits": total["trunk_hits"],
                "misses": total["trunk_misses"],
                "hit_rate": hit_rate(total["trunk_hits"], total["trunk_misses"]),
                "entries": cache["entries"],
                "bytes": cache["bytes"],
                "evictions": cache["evictions"],
            }
        return out

    # -- rollout --
    def rollout(self, state: TrainState, seed_index: int, iteration: int, clock: Clock):
        """``num_steps`` steps of every env; the decisions with their advantages, the
        finished episodes' (return, length, success), and the state after."""
        algo, policy = self.algo, self.policy
        e, horizon = int(algo.num_envs), int(algo.num_steps)
        rng = np.random.default_rng([int(self.cfg.seed), seed_index, iteration])
        keys = jax.random.split(jax.random.fold_in(self.seed_key(seed_index), iteration + 1),
                                horizon * e).reshape(horizon, e, -1)  # fmt: skip
        lora = state["lora"] if self.trains else None
        env_state = state["env"]
        ep_return = state["episode_return"].astype(np.float64)
        ep_length = state["episode_length"].copy()
        scored: dict[str, np.ndarray] = {}
        streams = [[[] for _ in range(2)] for _ in range(e)]  # per env/agent: decision ids
        steps_of: list[int] = []
        decisions = Decisions()
        rewards = np.zeros((horizon, e))
        dones = np.zeros((horizon, e), bool)
        episodes = []
        for t in range(horizon):
            t0 = time.perf_counter()
            avail = np.asarray(self.avail(env_state))
            clock.env_s += time.perf_counter() - t0
            deciders = [(i, a) for i in range(e) for a in range(2) if avail[i, a].sum() > 1]
            actions = avail.argmax(-1).astype(np.int32)  # a forced agent's one action
            if deciders:
                prompts = self._prompts(env_state, deciders, clock)
                new = list(dict.fromkeys(p for p in prompts if p not in scored))
                if new:
                    scored.update(policy.score_prompts(lora, new, clock, keep=decisions.trunk))
                values = policy.values(state["value"], prompts, clock) if self.trains else \
                    np.zeros(len(prompts))  # fmt: skip
                t0 = time.perf_counter()
                for (i, a), prompt, value in zip(deciders, prompts, values, strict=True):
                    log_pi = masked_log_pi(scored[prompt], avail[i, a])
                    action = int(rng.choice(self.policy.num_actions, p=np.exp(log_pi)))
                    actions[i, a] = action
                    streams[i][a].append(len(decisions.prompts))
                    steps_of.append(t)
                    decisions.prompts.append(prompt)
                    decisions.avail.append(avail[i, a])
                    decisions.actions.append(action)
                    decisions.log_probs.append(float(log_pi[action]))
                    decisions.entropies.append(entropy(log_pi))
                    decisions.values.append(float(value))
                clock.text_s += time.perf_counter() - t0
            t0 = time.perf_counter()
            env_state, reward, done, success, length = self.step(keys[t], env_state, actions)
            reward, done = np.asarray(reward), np.asarray(done)
            success, length = np.asarray(success), np.asarray(length)
            clock.env_s += time.perf_counter() - t0
            rewards[t], dones[t] = reward, done
            ep_return += reward
            ep_length += 1
            for i in np.flatnonzero(done):
                episodes.append((ep_return[i], int(length[i]), bool(success[i])))
                ep_return[i], ep_length[i] = 0.0, 0
        if self.trains:
            self._advantages(env_state, streams, steps_of, decisions, rewards, dones, state, clock)
        after = TrainState(state, env=env_state, episode_return=ep_return.astype(np.float32),
                           episode_length=ep_length)  # fmt: skip
        return decisions, episodes, after

    def _prompts(self, env_state, agents: list[tuple[int, int]], clock: Clock) -> list[str]:
        """The action prompts of ``agents`` ``(env, agent)``, with their teammates' messages."""
        t0 = time.perf_counter()
        obs = self.policy.text.text_observations(env_state)
        said = self.messages.messages([obs[i][1 - a] for i, a in agents])
        prompts = [action_prompt(obs[i][a], m) for (i, a), m in zip(agents, said, strict=True)]
        clock.text_s += time.perf_counter() - t0
        return prompts

    def _advantages(self, env_state, streams, steps_of, decisions, rewards, dones, state, clock):
        e = len(streams)
        everyone = [(i, a) for i in range(e) for a in range(2)]
        last_values = self.policy.values(
            state["value"], self._prompts(env_state, everyone, clock), clock
        ).reshape(e, 2)
        t0 = time.perf_counter()
        decisions.advantages = [0.0] * len(decisions.prompts)
        decisions.returns = [0.0] * len(decisions.prompts)
        for i in range(e):
            for a in range(2):
                ids = streams[i][a]
                if not ids:
                    continue
                adv, ret = semi_mdp_advantages(
                    [steps_of[d] for d in ids], [decisions.values[d] for d in ids],
                    rewards[:, i], dones[:, i], float(last_values[i, a]),
                    float(self.algo.gamma), float(self.algo.gae_lambda),
                )  # fmt: skip
                for d, x, r in zip(ids, adv, ret, strict=True):
                    decisions.advantages[d], decisions.returns[d] = float(x), float(r)
        clock.text_s += time.perf_counter() - t0

    # -- update --
    def _grad(self, trainable, batch, states=None):
        p, a = self.policy, self.algo
        settings = (p.normalization, float(a.clip_eps), float(a.value_coef), float(a.entropy_coef))
        if p.split is None:
            return ppo_grad(self.model.lm, p.value_head, settings, self.model.params, trainable,
                            batch, p.cand_tokens, p.cand_valid, p.word_counts)  # fmt: skip
        batch = dict(batch)
        index = batch.pop("prompt_index")
        batch["prompt_states"], batch["cand_states"] = states[0][index], states[1][index]
        return ppo_grad_top(p.split, p.value_head, settings, p.top_params, trainable, batch,
                            p.cand_tokens, p.cand_valid, p.word_counts)  # fmt: skip

    def _kept_states(self, decisions: Decisions, data: dict, clock: Clock):
        """The trunk states of the decisions' prompts (from the rollout's buffer; those it
        lacks from the cache or the trunk), stacked once per distinct prompt
        (``data["prompt_index"]`` picks each decision's)."""
        unique = list(dict.fromkeys(decisions.prompts))
        kept = dict(decisions.trunk)
        lacking = [p for p in unique if p not in kept]
        if lacking:
            kept.update(self.policy.trunk_entries(lacking, clock))
        row = {p: i for i, p in enumerate(unique)}
        data["prompt_index"] = np.array([row[p] for p in decisions.prompts], np.int32)
        _, valid = self.policy.packed(unique)
        return pack_entries([kept[p] for p in unique], valid)

    def update(self, state: TrainState, decisions: Decisions, seed_index: int, iteration: int,
               clock: Clock) -> tuple[TrainState, dict]:  # fmt: skip
        """PPO epochs over fixed-size minibatches of the decisions; the last minibatch of
        an epoch is filled up with decisions drawn from the rest (one compiled shape)."""
        n = len(decisions.prompts)
        if n == 0:
            return state, {}
        t0 = time.perf_counter()
        tokens, valid = self.policy.packed(decisions.prompts)
        data = {
            "tokens": tokens,
            "valid": valid,
            "avail": np.stack(decisions.avail),
            "features": np.stack([self.policy.features[p] for p in decisions.prompts]),
            "actions": np.asarray(decisions.actions, np.int32),
            "log_probs": np.asarray(decisions.log_probs, np.float32),
            "values": np.asarray(decisions.values, np.float32),
            "advantages": np.asarray(decisions.advantages, np.float32),
            "returns": np.asarray(decisions.returns, np.float32),
        }
        states = None
        if self.policy.split is not None:
            data.pop("tokens")
            states = self._kept_states(decisions, data, clock)
        clock.text_s += time.perf_counter() - t0
        rng = np.random.default_rng([int(self.cfg.seed), seed_index, iteration, 1])
        size = int(self.algo.minibatch_size)
        trainable = {"lora": state["lora"], "value": state["value"]}
        opt_state = state["opt"]
        stats = []
        t0 = time.perf_counter()
        for _ in range(int(self.algo.update_epochs)):
            order = rng.permutation(n)
            order = np.concatenate([order, rng.choice(n, (-n) % size)])
            for start in range(0, len(order), size):
                batch = {k: v[order[start : start + size]] for k, v in data.items()}
                (_, info), grads = self._grad(trainable, batch, states)
                trainable, opt_state = apply_updates(self.optimizer, trainable, opt_state, grads)
                stats.append(jax.device_get(info))
                clock.update_tokens += int(batch["valid"].sum()) + size * self.policy.cand_size
            if self.algo.target_kl is not None and stats[-1]["approx_kl"] > self.algo.target_kl:
                break
        clock.update_s += time.perf_counter() - t0
        means = {k: float(np.mean([s[k] for s in stats])) for k in stats[0]}
        return TrainState(state, lora=trainable["lora"], value=trainable["value"],
                          opt=opt_state), means  # fmt: skip

    def iteration(self, state: TrainState, seed_index: int, iteration: int):
        """One rollout and update of one seed: the new state and the seed's metrics."""
        clock = Clock()
        t0 = time.perf_counter()
        decisions, episodes, state = self.rollout(state, seed_index, iteration, clock)
        rollout_s = time.perf_counter() - t0
        losses = {}
        if self.trains:
            state, losses = self.update(state, decisions, seed_index, iteration, clock)
        wall = time.perf_counter() - t0
        nan = float("nan")
        metrics = {
            "episode_return": float(np.mean([x[0] for x in episodes])) if episodes else nan,
            "episode_length": float(np.mean([x[1] for x in episodes])) if episodes else nan,
            "win_rate": float(np.mean([x[2] for x in episodes])) if episodes else nan,
            "episodes": len(episodes),
            "decisions": len(decisions.prompts),
            "policy_loss": losses.get("policy_loss", nan),
            "value_loss": losses.get("value_loss", nan),
            "entropy": float(np.mean(decisions.entropies)) if decisions.prompts else nan,
            "approx_kl": losses.get("approx_kl", nan),
            "clip_frac": losses.get("clip_frac", nan),
            "iteration_s": wall,
            **clock.as_dict(),
            "rollout_steps_per_s": self.steps_per_iteration / rollout_s,
            "lm_tokens_per_s": clock.lm_tokens / clock.lm_s if clock.lm_s else nan,
            "update_tokens_per_s": clock.update_tokens / clock.update_s if clock.update_s else nan,
            "trunk_hit_rate": hit_rate(clock.trunk_hits, clock.trunk_misses),
        }
        return state, metrics


# ----- the run ---------------------------------------------------------------------------------

TIME_SPLIT = ("env_s", "lm_s", "update_s", "text_s")
COUNTS = ("lm_tokens", "update_tokens", "trunk_hits", "trunk_misses")


@functools.cache
def salad_env(name: str, kwargs_json: str):
    """One kitchen per name and kwargs in a process, so that runs share its compiled
    functions (keyed by the env object)."""
    import envs

    return envs.make(name, **json.loads(kwargs_json))


def make_salad_env(cfg: DictConfig):
    """``cfg.env``'s kitchen (an env with ``TextObservations``)."""
    kwargs = OmegaConf.to_container(cfg.env.kwargs, resolve=True)
    try:
        env = salad_env(str(cfg.env.name), json.dumps(kwargs, sort_keys=True))
    except (TypeError, ValueError) as e:
        raise ConfigError(f"bad value for config key 'env.kwargs' ({kwargs}): {e}") from e
    try:
        require(env, TextObservations, needed_by=f"algo.name={cfg.algo.name}")
    except ValueError as e:
        raise ConfigError(f"bad value for config key 'env.name': {e}") from None
    return env


def make_trainer(cfg: DictConfig) -> Trainer:
    """The runner's ``HostTrainer`` of ``cfg`` (``runner.host_loop`` drives it)."""
    return Trainer(cfg, make_salad_env(cfg))

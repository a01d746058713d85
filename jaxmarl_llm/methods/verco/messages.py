"""Verco's message module: a LoRA adapter that says, from one agent's own observation,
what the teacher would have it tell its teammate (section 4.2, Eq. 1).

Pipeline:

1. :func:`collect_message_pairs` rolls out the scripted salad team with epsilon-random
   available actions (diverse states) and pairs each agent's observation text with the
   teacher's message for it at every step where an agent is free to choose;
   :func:`split_by_episode` holds whole episodes out.
2. :func:`train_message_adapter` fits the adapter by SFT (cross-entropy on the message
   tokens only) with optax, in shuffled minibatches of one padded shape (one compile).
3. :func:`generate_messages` decodes greedily for a batch of observations (one prefill
   into the KV cache, then a ``while_loop`` of single-token steps that ends when every
   row has met a stop token or the token budget) and cuts each message to the word
   budget, counting the cuts.
4. :class:`MessageCache`: the adapter is frozen after SFT and decoding is greedy, so an
   observation text always gives the same message; the RL rollout looks messages up by
   text and decodes only new texts.
5. :func:`evaluate_messages`: held-out exact match of the generated messages and
   teacher-forced next-token accuracy on the message tokens.

The student's prompt is :data:`PROMPT_FORMAT` around the observation, plain text for
every model (SFT teaches the format; a chat turn would double the prompt of a short
observation); it is encoded with the tokenizer's own BOS default, and the target is
``" " + message`` then the end token. Any tokenizer with ``encode(text, add_bos=...)``,
``decode(ids)``, ``eos_id`` and ``pad_id`` works (the project's Gemma and llama ones).
"""

from __future__ import annotations

import dataclasses
import functools
import math
import time
from collections.abc import Callable, Sequence
from typing import Any, NamedTuple, Protocol

import jax
import jax.numpy as jnp
import numpy as np
import optax

from envs.salad.env import SaladKitchen
from envs.salad.scripted import scripted_actions
from envs.salad.text import text_observations
from jaxmarl_llm.lm.lora import LoraAdapter, merge_lora
from jaxmarl_llm.methods.verco.losses import cut_message_words, message_sft_loss
from jaxmarl_llm.methods.verco.policy import DecoderLM, positions_from_valid, prefill_prompts
from jaxmarl_llm.methods.verco.teacher import MESSAGE_WORD_BUDGET, scripted_messages

PROMPT_FORMAT = "Observation: {observation}\nMessage to your teammate:"


class MessageTokenizer(Protocol):
    eos_id: int
    pad_id: int

    def encode(self, text: str, add_bos: bool | None = None) -> list[int]: ...

    def decode(self, ids: Sequence[int], skip_special: bool = True) -> str: ...


def message_prompt(observation: str) -> str:
    """The student's prompt around one agent's observation text."""
    return PROMPT_FORMAT.format(observation=observation)


# ----- data -------------------------------------------------------------------------------


@dataclasses.dataclass(frozen=True)
class MessagePairs:
    """(observation text of agent i -> teacher message of agent i) pairs."""

    observations: list[str]
    messages: list[str]
    episodes: np.ndarray  # [P] int32 episode of each pair
    agents: np.ndarray  # [P] int32 speaking agent

    def __post_init__(self):
        n = len(self.observations)
        if not len(self.messages) == len(self.episodes) == len(self.agents) == n:
            raise ValueError(
                f"MessagePairs fields differ in length: {n} observations, "
                f"{len(self.messages)} messages, {len(self.episodes)} episodes, "
                f"{len(self.agents)} agents"
            )

    def __len__(self) -> int:
        return len(self.observations)

    def select(self, rows: np.ndarray) -> MessagePairs:
        rows = np.flatnonzero(rows) if np.asarray(rows).dtype == bool else np.asarray(rows)
        return MessagePairs(
            [self.observations[i] for i in rows],
            [self.messages[i] for i in rows],
            self.episodes[rows],
            self.agents[rows],
        )


@functools.cache
def _rollout_fn(env: SaladKitchen, num_steps: int):
    def explore_actions(key, state, epsilon):
        k_explore, k_random = jax.random.split(key)
        avail = jnp.stack([env.get_avail_actions(state)[a] for a in env.agents])
        random = jax.random.categorical(k_random, jnp.where(avail, 0.0, -jnp.inf))
        explore = jax.random.uniform(k_explore, (env.num_agents,)) < epsilon
        return jnp.where(explore, random, scripted_actions(env, state)).astype(jnp.int32)

    def episode(key, epsilon):
        k_reset, k_steps = jax.random.split(key)
        _, state = env.reset(k_reset)

        def step(carry, key):
            state, alive = carry
            decision = alive & ~state.busy.all()
            actions = explore_actions(key, state, epsilon)
            joint = dict(zip(env.agents, actions, strict=True))
            _, nxt, _, dones, _ = env.step_env(key, state, joint)
            return (nxt, alive & ~dones["__all__"]), (state, decision)

        keys = jax.random.split(k_steps, num_steps)
        _, (states, decisions) = jax.lax.scan(step, (state, jnp.bool_(True)), keys)
        return states, decisions

    return jax.jit(jax.vmap(episode, in_axes=(0, None)))


def collect_message_pairs(
    env: SaladKitchen,
    key: jax.Array,
    num_episodes: int,
    epsilon: float = 0.3,
    teacher: Callable[[SaladKitchen, Any], list[list[str]]] = scripted_messages,
    num_steps: int | None = None,
) -> MessagePairs:
    """Roll out ``num_episodes`` episodes of the scripted team whose free agents take a
    random available action with probability ``epsilon``, and pair every agent's
    observation text with ``teacher``'s message for it (``teacher(env, states) ->
    [state][agent]``) at each step where an agent is free. A pair repeated within an
    episode (waiting, walking out of view of everything) is kept once."""
    if num_episodes < 1:
        raise ValueError(f"num_episodes must be >= 1, got {num_episodes}")
    if not 0.0 <= epsilon <= 1.0:
        raise ValueError(f"epsilon must be in [0, 1], got {epsilon}")
    steps = int(num_steps or env.max_steps)
    states, decisions = _rollout_fn(env, steps)(
        jax.random.split(key, num_episodes), jnp.float32(epsilon)
    )
    episode_of, step_of = np.nonzero(np.asarray(decisions))
    chosen = jax.tree.map(lambda x: np.asarray(x)[episode_of, step_of], states)
    observations = text_observations(env, chosen)
    messages = teacher(env, chosen)
    seen: set[tuple[int, int, str, str]] = set()
    rows: list[tuple[str, str, int, int]] = []
    for b, episode in enumerate(episode_of):
        for agent in range(env.num_agents):
            pair = (int(episode), agent, observations[b][agent], messages[b][agent])
            if pair not in seen:
                seen.add(pair)
                rows.append((pair[2], pair[3], pair[0], pair[1]))
    return MessagePairs(
        [r[0] for r in rows],
        [r[1] for r in rows],
        np.array([r[2] for r in rows], np.int32),
        np.array([r[3] for r in rows], np.int32),
    )


def split_by_episode(
    pairs: MessagePairs, held_out_fraction: float = 0.2, seed: int = 0
) -> tuple[MessagePairs, MessagePairs]:
    """(train, held-out) pairs with whole episodes held out (at least one each side)."""
    episodes = np.unique(pairs.episodes)
    if len(episodes) < 2:
        raise ValueError(f"splitting by episode needs >= 2 episodes, got {len(episodes)}")
    if not 0.0 < held_out_fraction < 1.0:
        raise ValueError(f"held_out_fraction must be in (0, 1), got {held_out_fraction}")
    shuffled = np.random.default_rng(seed).permutation(episodes)
    n_held = min(max(1, round(held_out_fraction * len(episodes))), len(episodes) - 1)
    held = np.isin(pairs.episodes, shuffled[:n_held])
    return pairs.select(~held), pairs.select(held)


# ----- tokens ----------------------------------------------------------------------------


def encode_pair(tokenizer: MessageTokenizer, observation: str, message: str):
    """(prompt ids, message ids ending with the end token) of one pair."""
    prompt = tokenizer.encode(message_prompt(observation))
    target = tokenizer.encode(" " + message, add_bos=False) + [tokenizer.eos_id]
    return prompt, target


def _bucket(n: int, multiple: int = 16) -> int:
    return int(math.ceil(n / multiple) * multiple)


def pack_sft_examples(
    tokenizer: MessageTokenizer,
    observations: Sequence[str],
    messages: Sequence[str],
    length: int | None = None,
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Right-padded ``(tokens, valid, message_mask)`` ``[P, length]`` of prompt + message;
    ``message_mask`` marks the message tokens and the end token. ``length`` defaults to
    the longest pair rounded up to a multiple of 16; a longer pair raises."""
    encoded = [encode_pair(tokenizer, o, m) for o, m in zip(observations, messages, strict=True)]
    longest = max(len(p) + len(t) for p, t in encoded)
    length = _bucket(longest) if length is None else length
    if longest > length:
        raise ValueError(f"a prompt + message has {longest} tokens; length {length} is too short")
    tokens = np.full((len(encoded), length), tokenizer.pad_id, np.int32)
    valid = np.zeros((len(encoded), length), bool)
    mask = np.zeros((len(encoded), length), bool)
    for row, (prompt, target) in enumerate(encoded):
        ids = prompt + target
        tokens[row, : len(ids)] = ids
        valid[row, : len(ids)] = True
        mask[row, len(prompt) : len(ids)] = True
    return tokens, valid, mask


def _pad_rows(arrays: Sequence[np.ndarray], rows: int) -> list[np.ndarray]:
    """Pad a minibatch to ``rows`` with rows scoring nothing (one valid token, no mask)."""
    tokens, valid, mask = arrays
    missing = rows - tokens.shape[0]
    if missing <= 0:
        return list(arrays)
    filler_valid = np.zeros((missing, valid.shape[1]), bool)
    filler_valid[:, 0] = True
    return [
        np.concatenate([tokens, np.zeros((missing, tokens.shape[1]), tokens.dtype)]),
        np.concatenate([valid, filler_valid]),
        np.concatenate([mask, np.zeros((missing, mask.shape[1]), bool)]),
    ]


# ----- SFT ------------------------------------------------------------------------------


@dataclasses.dataclass(frozen=True)
class SFTConfig:
    epochs: int = 3
    batch_size: int = 8
    learning_rate: float = 1e-3
    seed: int = 0

    def __post_init__(self):
        if self.epochs < 1 or self.batch_size < 1 or not self.learning_rate > 0:
            raise ValueError(
                f"SFTConfig needs epochs >= 1, batch_size >= 1 and learning_rate > 0; got {self}"
            )


@functools.partial(jax.jit, static_argnames=("lm", "optimizer"))
def sft_step(lm: DecoderLM, optimizer, lora, opt_state, base_params, tokens, valid, mask):
    """One optax step of the message adapter on a minibatch; returns (lora, opt_state,
    loss). The base parameters get no gradient."""
    loss, grads = jax.value_and_grad(
        lambda adapter: message_sft_loss(lm, base_params, adapter, tokens, valid, mask)
    )(lora)
    updates, opt_state = optimizer.update(grads, opt_state, lora)
    return optax.apply_updates(lora, updates), opt_state, loss


def train_message_adapter(
    lm: DecoderLM,
    base_params,
    lora: LoraAdapter,
    tokenizer: MessageTokenizer,
    pairs: MessagePairs,
    config: SFTConfig = SFTConfig(),
    length: int | None = None,
) -> tuple[LoraAdapter, dict[str, Any]]:
    """SFT of the message adapter on ``pairs`` with Adam; returns the adapter and a
    history (per-step losses, per-epoch mean loss, seconds)."""
    if len(pairs) == 0:
        raise ValueError("no message pairs to train on")
    arrays = pack_sft_examples(tokenizer, pairs.observations, pairs.messages, length)
    optimizer = optax.adam(config.learning_rate)
    opt_state = optimizer.init(lora)
    losses, epoch_losses = [], []
    start = time.perf_counter()
    for epoch in range(config.epochs):
        order = np.random.default_rng(config.seed + epoch).permutation(len(pairs))
        epoch_start = len(losses)
        for first in range(0, len(order), config.batch_size):
            rows = order[first : first + config.batch_size]
            batch = _pad_rows([a[rows] for a in arrays], config.batch_size)
            lora, opt_state, loss = sft_step(lm, optimizer, lora, opt_state, base_params, *batch)
            losses.append(float(loss))
        epoch_losses.append(float(np.mean(losses[epoch_start:])))
    history = {
        "losses": losses,
        "epoch_losses": epoch_losses,
        "steps": len(losses),
        "seconds": time.perf_counter() - start,
        "sequence_length": int(arrays[0].shape[1]),
    }
    return lora, history


@functools.partial(jax.jit, static_argnames=("lm",))
def message_token_accuracy(lm: DecoderLM, base_params, lora, tokens, valid, mask):
    """Teacher-forced next-token accuracy on the message tokens: (correct, counted)."""
    params = base_params if lora is None else merge_lora(base_params, lora)
    cache = lm.empty_cache(*tokens.shape)
    hidden, _ = lm.hidden(params, tokens, positions_from_valid(valid), valid, cache)
    predicted = jnp.argmax(lm.logits(params, hidden[:, :-1]), axis=-1)
    scored = (mask & valid)[:, 1:]
    correct = (predicted == tokens[:, 1:]) & scored
    return correct.sum(), scored.sum()


# ----- generation -----------------------------------------------------------------------


def stop_token_ids(tokenizer: MessageTokenizer) -> list[int]:
    """The end token, the end-of-turn token where the tokenizer has one, and the newline
    token when a newline is one token."""
    ids = {int(tokenizer.eos_id)}
    end_of_turn = getattr(tokenizer, "end_of_turn_id", None)
    if end_of_turn is not None:
        ids.add(int(end_of_turn))
    newline = tokenizer.encode("\n", add_bos=False)
    if len(newline) == 1:
        ids.add(int(newline[0]))
    return sorted(ids)


@functools.partial(jax.jit, static_argnames=("lm", "max_tokens"))
def greedy_decode(
    lm: DecoderLM,
    base_params,
    lora: LoraAdapter | None,
    prompt_tokens: jax.Array,
    prompt_valid: jax.Array,
    stop_ids: jax.Array,
    max_tokens: int,
) -> tuple[jax.Array, jax.Array]:
    """Greedy continuation of left-padded prompts ``[N, T]``: ``(tokens [N, max_tokens],
    lengths [N])``, where ``lengths`` counts the tokens before each row's first stop token
    (``max_tokens`` when it met none). Tokens after a row's stop are the stop token's
    fill (0). Decoding ends once every row has stopped."""
    params = base_params if lora is None else merge_lora(base_params, lora)
    n = prompt_tokens.shape[0]
    last_hidden, cache = prefill_prompts(lm, params, prompt_tokens, prompt_valid, max_tokens)
    first = jnp.argmax(lm.logits(params, last_hidden), axis=-1).astype(jnp.int32)
    prompt_length = prompt_valid.sum(axis=-1).astype(jnp.int32)
    out = jnp.zeros((n, max_tokens), jnp.int32).at[:, 0].set(first)
    done = jnp.isin(first, stop_ids)
    one_valid = jnp.ones((n, 1), bool)

    def keep_going(carry):
        i, _, _, _, done = carry
        return (i < max_tokens) & ~done.all()

    def step(carry):
        i, token, cache, out, done = carry
        positions = (prompt_length + i - 1)[:, None]
        hidden, cache = lm.hidden(params, token[:, None], positions, one_valid, cache)
        nxt = jnp.argmax(lm.logits(params, hidden[:, 0]), axis=-1).astype(jnp.int32)
        nxt = jnp.where(done, 0, nxt)
        out = jax.lax.dynamic_update_slice(out, nxt[:, None], (0, i))
        return i + 1, nxt, cache, out, done | jnp.isin(nxt, stop_ids)

    _, _, _, out, _ = jax.lax.while_loop(keep_going, step, (jnp.int32(1), first, cache, out, done))
    is_stop = jnp.isin(out, stop_ids)
    lengths = jnp.where(is_stop.any(axis=1), jnp.argmax(is_stop, axis=1), max_tokens)
    return out, lengths.astype(jnp.int32)


class GeneratedMessages(NamedTuple):
    """Decoded messages and what the budgets removed."""

    messages: list[str]
    token_cuts: int  # rows that used the whole token budget without a stop token
    word_cuts: int  # messages cut to the word budget
    dropped_words: int

    def report(self) -> dict[str, int]:
        return {
            "messages": len(self.messages),
            "token_cuts": self.token_cuts,
            "word_cuts": self.word_cuts,
            "dropped_words": self.dropped_words,
        }


def _pack_left(token_lists: Sequence[Sequence[int]], rows: int, length: int, pad_id: int):
    tokens = np.full((rows, length), pad_id, np.int32)
    valid = np.zeros((rows, length), bool)
    for row in range(rows):
        ids = token_lists[row] if row < len(token_lists) else token_lists[0]
        tokens[row, length - len(ids) :] = ids
        valid[row, length - len(ids) :] = True
    return tokens, valid


def generate_messages(
    lm: DecoderLM,
    base_params,
    message_lora: LoraAdapter | None,
    tokenizer: MessageTokenizer,
    obs_texts: Sequence[str],
    max_tokens: int,
    max_words: int = MESSAGE_WORD_BUDGET,
    batch_size: int = 16,
) -> GeneratedMessages:
    """Each observation's message by greedy decoding with the message adapter, ending at
    the end token or a newline, cut to ``max_words`` words. A batch holds at most
    ``batch_size`` texts, padded to a power of two rows (a rollout step's call brings a
    few, and every row costs the whole prefill and decode) and the prompt length to a
    multiple of 16, so a run compiles a few shapes only."""
    if max_tokens < 1 or max_words < 1 or batch_size < 1:
        raise ValueError(
            f"max_tokens, max_words and batch_size must be >= 1; got {max_tokens}, "
            f"{max_words}, {batch_size}"
        )
    obs_texts = list(obs_texts)
    stop_ids = jnp.asarray(stop_token_ids(tokenizer), jnp.int32)
    prompts = [tokenizer.encode(message_prompt(o)) for o in obs_texts]
    messages: list[str] = []
    token_cuts = word_cuts = dropped = 0
    for first in range(0, len(prompts), batch_size):
        chunk = prompts[first : first + batch_size]
        rows = min(batch_size, 1 << (len(chunk) - 1).bit_length())
        tokens, valid = _pack_left(
            chunk, rows, _bucket(max(len(p) for p in chunk)), tokenizer.pad_id
        )
        out, lengths = greedy_decode(
            lm, base_params, message_lora, tokens, valid, stop_ids, max_tokens
        )
        out, lengths = np.asarray(out), np.asarray(lengths)
        for row in range(len(chunk)):
            token_cuts += int(lengths[row] == max_tokens)
            text = tokenizer.decode(out[row, : lengths[row]].tolist()).split("\n")[0]
            cut = cut_message_words(text, max_words)
            word_cuts += int(cut.was_cut)
            dropped += cut.dropped
            messages.append(cut.kept)
    return GeneratedMessages(messages, token_cuts, word_cuts, dropped)


class MessageCache:
    """Messages by observation text for a frozen adapter: ``cache(obs_texts) -> list``
    decodes only texts it has not seen (each once) and counts hits, misses and cuts."""

    def __init__(self, generate: Callable[[list[str]], GeneratedMessages]):
        self._generate = generate
        self._messages: dict[str, str] = {}
        self.hits = 0
        self.misses = 0
        self.token_cuts = 0
        self.word_cuts = 0

    @classmethod
    def for_adapter(
        cls,
        lm: DecoderLM,
        base_params,
        message_lora: LoraAdapter | None,
        tokenizer: MessageTokenizer,
        max_tokens: int,
        max_words: int = MESSAGE_WORD_BUDGET,
        batch_size: int = 16,
    ) -> MessageCache:
        return cls(
            functools.partial(
                generate_messages,
                lm,
                base_params,
                message_lora,
                tokenizer,
                max_tokens=max_tokens,
                max_words=max_words,
                batch_size=batch_size,
            )
        )

    def __len__(self) -> int:
        return len(self._messages)

    def __call__(self, obs_texts: Sequence[str]) -> list[str]:
        new = [t for t in dict.fromkeys(obs_texts) if t not in self._messages]
        self.misses += len(new)
        self.hits += len(obs_texts) - len(new)
        if new:
            generated = self._generate(new)
            self._messages.update(zip(new, generated.messages, strict=True))
            self.token_cuts += generated.token_cuts
            self.word_cuts += generated.word_cuts
        return [self._messages[t] for t in obs_texts]

    def stats(self) -> dict[str, int]:
        return {
            "entries": len(self._messages),
            "hits": self.hits,
            "misses": self.misses,
            "token_cuts": self.token_cuts,
            "word_cuts": self.word_cuts,
        }


# ----- evaluation -----------------------------------------------------------------------


def evaluate_messages(
    lm: DecoderLM,
    base_params,
    message_lora: LoraAdapter | None,
    tokenizer: MessageTokenizer,
    pairs: MessagePairs,
    max_tokens: int,
    max_words: int = MESSAGE_WORD_BUDGET,
    batch_size: int = 16,
) -> dict[str, Any]:
    """Exact-match rate of the generated messages against the teacher's (whitespace
    normalised), teacher-forced next-token accuracy on the message tokens, the decoding
    budgets' cuts and the decoding speed, on ``pairs``."""
    if len(pairs) == 0:
        raise ValueError("no message pairs to evaluate")
    tokens, valid, mask = pack_sft_examples(tokenizer, pairs.observations, pairs.messages)
    correct = counted = 0
    for first in range(0, len(pairs), batch_size):
        batch = _pad_rows(
            [a[first : first + batch_size] for a in (tokens, valid, mask)], batch_size
        )
        c, n = message_token_accuracy(lm, base_params, message_lora, *batch)
        correct, counted = correct + int(c), counted + int(n)
    start = time.perf_counter()
    generated = generate_messages(
        lm,
        base_params,
        message_lora,
        tokenizer,
        pairs.observations,
        max_tokens,
        max_words,
        batch_size,
    )
    seconds = time.perf_counter() - start
    exact = [
        " ".join(g.split()) == " ".join(t.split())
        for g, t in zip(generated.messages, pairs.messages, strict=True)
    ]
    return {
        "pairs": len(pairs),
        "exact_match": float(np.mean(exact)),
        "token_accuracy": correct / max(counted, 1),
        "message_tokens": counted,
        "generation": generated.report(),
        "generation_seconds": seconds,
        "messages_per_second": len(pairs) / seconds,
        "examples": [
            {"observation": o, "teacher": t, "student": g}
            for o, t, g in list(
                zip(pairs.observations, pairs.messages, generated.messages, strict=True)
            )[:5]
        ],
    }

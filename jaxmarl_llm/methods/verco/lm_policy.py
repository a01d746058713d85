"""``LMPolicy``: the model, tokenized candidates, caches and jitted functions a run
shares: the action scores of a step's distinct prompts in one batch, and the critic
(``ValueHead`` on the frozen base's prompt features, cached by prompt text for the whole
run). With ``algo.lora_layers=last:K`` the prompts' trunk states come from a cache by token
ids or one trunk pass, and scoring and the critic's features run the top blocks from them.
"""

from __future__ import annotations

import functools
import time

import jax
import jax.numpy as jnp
import numpy as np

from envs.capabilities import TextObservations, require
from jaxmarl_llm.errors import ConfigError
from jaxmarl_llm.methods.verco.clock import Clock
from jaxmarl_llm.methods.verco.models import PolicyModel, adapted_layers
from jaxmarl_llm.methods.verco.policy import (
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

PROMPT_LENGTH_STEP = 16


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
        # the prompts' padded lengths: an action prompt has ~30 tokens without messages and
        # ~50 with them, against the 96 that hold the longest
        self.length_step = PROMPT_LENGTH_STEP

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
        """``(tokens, valid)`` of ``prompts``, left-padded to the longest of them rounded up
        to ``self.length_step`` (at most ``algo.max_prompt_tokens``): the model's work
        follows the prompts' length, with a few compiled lengths."""
        ids = [self.tokens_of(p) for p in prompts]
        longest = -(-max(len(i) for i in ids) // self.length_step) * self.length_step
        length = min(int(self.cfg.max_prompt_tokens), longest)
        return pack_prompts(ids, length, self.tokenizer.pad_id)

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


def tile_rows(x: np.ndarray, rows: int) -> jax.Array:
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
        lm, base_params, lora, tokens, valid, tile_rows(cand_tokens, n), tile_rows(cand_valid, n),
        jnp.ones((n, cand_tokens.shape[0]), bool), normalization, tile_rows(word_counts, n),
    )  # fmt: skip
    return log_pi


@functools.partial(jax.jit, static_argnums=0)
def base_features(lm, base_params, tokens, valid):
    return prompt_features(lm, base_params, tokens, valid)


@functools.partial(jax.jit, static_argnums=0)
def trunk_all_actions(split, trunk_params, tokens, valid, cand_tokens, cand_valid):
    """The trunk's states of every prompt and all actions after it."""
    n = tokens.shape[0]
    return trunk_states(split, trunk_params, tokens, valid, tile_rows(cand_tokens, n),
                        tile_rows(cand_valid, n))  # fmt: skip


@functools.partial(jax.jit, static_argnums=(0, 1))
def score_all_actions_top(split, normalization, top_params, lora, prompt_states, cand_states,
                          valid, cand_tokens, cand_valid, word_counts):  # fmt: skip
    """``log pi`` ``[N, A]`` over all actions from the trunk's states, and the critic's
    features ``[N, D]`` (the top blocks without the adapter)."""
    n = prompt_states.shape[0]
    log_pi, _ = top_action_log_probs(
        split, top_params, lora, prompt_states, valid, cand_states, tile_rows(cand_tokens, n),
        tile_rows(cand_valid, n), jnp.ones((n, cand_tokens.shape[0]), bool), normalization,
        tile_rows(word_counts, n),
    )  # fmt: skip
    return log_pi, top_prompt_features(split, top_params, prompt_states, valid)


@functools.partial(jax.jit, static_argnums=0)
def top_features(split, top_params, prompt_states, valid):
    return top_prompt_features(split, top_params, prompt_states, valid)


@functools.partial(jax.jit, static_argnums=0)
def head_values(head, params, features):
    return head.apply(params, features)

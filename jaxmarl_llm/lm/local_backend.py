"""``LocalBackend``: a GGUF language model served by our JAX decoder, for any model family
(Gemma 3: :mod:`jaxmarl_llm.lm.gemma`; Llama / SmolLM2 / Qwen2: :mod:`jaxmarl_llm.lm.llama`).

A :class:`~jaxmarl_llm.lm.gguf.GGUFFamily` says how to load a family's weights and
tokenizer; its config's ``decoder`` configures the :class:`~jaxmarl_llm.lm.decoder.Decoder`
that runs them.

Shapes are bucketed so jit compiles a handful of programs, not one per prompt: batch
sizes and prompt lengths are rounded up to powers of two (at least ``min_seq``), and
the generation budget to a power of two (at least ``decode_chunk``). Prompts are
left-padded for generation (every row's last prompt token sits in the same slot, so the
decode loop writes all rows at one cache index) and right-padded for scoring; the model
masks by token position, so both are exact. Decoding runs ``decode_chunk`` tokens per
jitted call and checks stop strings / end of text on the host between calls.

``trace_counts`` counts how often each jitted function was traced (= compiled), which the
tests use to show that a new prompt length inside a bucket does not recompile.
"""

from __future__ import annotations

import collections
import contextlib
import functools
import math
import os
import time
from collections.abc import Callable, Sequence

import numpy as np

from .backend import Backend, BackendError, Completion, Request
from .decoder import Decoder, init_cache
from .gguf import GGUFFamily, cache_lock, load_weights, unflatten

# XLA's default CPU/GPU backend optimisation level (LLVM -O3)
FULL_OPTIMISATION = {"xla_backend_optimization_level": 3}


def _next_pow2(n: int, lo: int = 1) -> int:
    return max(lo, 1 << max(0, math.ceil(math.log2(max(n, 1)))))


class LocalBackend(Backend):
    """A local GGUF model: batched ``generate`` and ``score`` on CPU/GPU via JAX.

    Args:
      family: the model family (config, weights, tokenizer).
      gguf_path: the GGUF file (default: the family's packaged file).
      max_batch: most rows per forward pass (larger request lists are split).
      min_seq: smallest padded prompt length.
      decode_chunk: tokens generated per jitted decode call between host stop checks.
      use_cache: keep the dequantized weights / tokenizer under the cache directory.
    """

    def __init__(
        self,
        family: GGUFFamily,
        gguf_path: str | os.PathLike | None = None,
        *,
        max_batch: int = 32,
        min_seq: int = 16,
        decode_chunk: int = 16,
        use_cache: bool = True,
    ):
        try:
            import jax
            import jax.numpy as jnp
        except ImportError as e:  # pragma: no cover - jax is a core dependency
            raise family.error(f"jax is required for the {family.name} backend: {e}") from e

        self.family = family
        t0 = time.perf_counter()
        with cache_lock() if use_cache else contextlib.nullcontext():
            w = load_weights(family, gguf_path, use_cache=use_cache)
            self.tokenizer = family.tokenizer(w)
        self.config = w.config
        self.gguf_path = w.gguf_path
        self.weights_from_cache = w.from_cache
        self.weights_sha256 = w.sha256
        self.params = jax.tree.map(jnp.asarray, unflatten(w.arrays))
        del w
        self.load_seconds = time.perf_counter() - t0
        self.max_batch = _next_pow2(max_batch)
        self.min_seq = _next_pow2(min_seq)
        self.decode_chunk = decode_chunk
        self._module = Decoder(self.config.decoder)
        self._stop_ids = {self.config.eos_id}
        if self.tokenizer.end_of_turn_id is not None:
            self._stop_ids.add(self.tokenizer.end_of_turn_id)
        self.trace_counts: collections.Counter[str] = collections.Counter()
        # The model's forward passes are compute-bound: compile them at XLA's full
        # optimisation whatever a process's XLA_FLAGS ask for (a process that compiles many
        # small programs, the test suite for one, may lower the level for everything else).
        jit = functools.partial(jax.jit, compiler_options=FULL_OPTIMISATION)
        self._prefill = jit(self._prefill_impl)
        self._decode = jit(self._decode_impl, static_argnames=("steps",))
        self._next_logprobs = jit(self._next_logprobs_impl)
        self._seq_logprobs = jit(self._seq_logprobs_impl)
        self._last_logits = jit(self._last_logits_impl)

    # ----- jitted pieces ------------------------------------------------------------------

    def _sample(self, logits, temperature, top_p, seed, step):
        """One token per row. temperature 0 = argmax; otherwise temperature + top-p."""
        import jax
        import jax.numpy as jnp

        greedy = jnp.argmax(logits, axis=-1).astype(jnp.int32)

        def sample(_):
            return self._sample_temperature(logits, temperature, top_p, seed, step, greedy)

        # all-greedy batches skip the (vocabulary-sized) random draws
        return jax.lax.cond(jnp.any(temperature > 0), sample, lambda _: greedy, None)

    def _sample_temperature(self, logits, temperature, top_p, seed, step, greedy):
        import jax
        import jax.numpy as jnp

        from jaxmarl_llm.lm.nucleus import top_p_filter

        scaled = logits / jnp.maximum(temperature, 1e-6)[:, None]

        scaled = jax.lax.cond(
            jnp.any(top_p < 1.0), lambda x: top_p_filter(x, top_p), lambda x: x, scaled
        )

        def draw(s, t, row):
            key = jax.random.fold_in(jax.random.key(s), t)
            return jax.random.categorical(key, row).astype(jnp.int32)

        sampled = jax.vmap(draw)(seed, step, scaled)
        return jnp.where(temperature > 0, sampled, greedy)

    def _prefill_impl(self, params, tokens, positions, valid, cache, temperature, top_p, seed):
        self.trace_counts["prefill"] += 1
        import jax.numpy as jnp

        hidden, cache = self._module.apply(
            {"params": params}, tokens, positions, valid, cache, return_hidden=True
        )
        logits = self._module.apply({"params": params}, hidden[:, -1], method="logits")
        step = jnp.zeros_like(seed)
        return self._sample(logits, temperature, top_p, seed, step), cache

    def _decode_impl(self, params, cache, token, pos, step, temperature, top_p, seed, steps):
        self.trace_counts["decode"] += 1
        import jax
        import jax.numpy as jnp

        def body(carry, _):
            cache, token, pos, step = carry
            logits, cache = self._module.apply(
                {"params": params},
                token[:, None],
                pos[:, None],
                jnp.ones_like(token, bool)[:, None],
                cache,
            )
            nxt = self._sample(logits[:, -1], temperature, top_p, seed, step)
            return (cache, nxt, pos + 1, step + 1), nxt

        (cache, token, pos, step), toks = jax.lax.scan(
            body, (cache, token, pos, step), None, length=steps
        )
        return toks.T, cache, token, pos, step

    def _next_logprobs_impl(self, params, tokens, positions, valid, cache, ids):
        """log p(ids | prefix) at the last slot of left-padded rows: ``[B, K]``."""
        self.trace_counts["next_logprobs"] += 1
        import jax
        import jax.numpy as jnp

        hidden, _ = self._module.apply(
            {"params": params}, tokens, positions, valid, cache, return_hidden=True
        )
        logits = self._module.apply({"params": params}, hidden[:, -1], method="logits")
        logp = jax.nn.log_softmax(logits, axis=-1)
        return jnp.take_along_axis(logp, ids, axis=-1)

    def _last_logits_impl(self, params, tokens, positions, valid, cache):
        self.trace_counts["last_logits"] += 1
        hidden, _ = self._module.apply(
            {"params": params}, tokens, positions, valid, cache, return_hidden=True
        )
        return self._module.apply({"params": params}, hidden[:, -1], method="logits")

    def _seq_logprobs_impl(self, params, tokens, positions, valid, cache, target):
        """Sum of log p(tokens[t] | tokens[<t]) over slots where ``target`` is set: ``[B]``."""
        self.trace_counts["seq_logprobs"] += 1
        import jax
        import jax.numpy as jnp

        hidden, _ = self._module.apply(
            {"params": params}, tokens, positions, valid, cache, return_hidden=True
        )

        def row(args):
            h, toks, tgt = args
            logits = self._module.apply({"params": params}, h[:-1], method="logits")
            logp = jax.nn.log_softmax(logits, axis=-1)
            lp = jnp.take_along_axis(logp, toks[1:, None], axis=-1)[:, 0]
            return jnp.sum(jnp.where(tgt[1:], lp, 0.0))

        return jax.lax.map(row, (hidden, tokens, target))

    # ----- helpers ----------------------------------------------------------------------

    def _cache(self, batch: int, length: int):
        return init_cache(self._module.cfg, batch, length)

    def _seq_bucket(self, n: int) -> int:
        return min(_next_pow2(n, self.min_seq), self.config.context_length)

    def _check_len(self, n: int, what: str) -> None:
        if n == 0:
            raise BackendError(f"{self.kind}: {what} is empty (and the model adds no BOS token)")
        if n > self.config.context_length:
            raise BackendError(
                f"{self.kind}: {what} has {n} tokens, more than the context length "
                f"{self.config.context_length}"
            )

    def _left_pad(self, seqs: list[list[int]], batch: int, length: int):
        tokens = np.full((batch, length), self.config.pad_id, np.int32)
        valid = np.zeros((batch, length), bool)
        positions = np.zeros((batch, length), np.int32)
        for i, s in enumerate(seqs):
            n = len(s)
            tokens[i, length - n :] = s
            valid[i, length - n :] = True
            positions[i, length - n :] = np.arange(n)
        return tokens, positions, valid

    def prompt_text(self, request: Request) -> str:
        return f"{request.system}\n\n{request.prompt}" if request.system else request.prompt

    # ----- generate ---------------------------------------------------------------------

    def cache_identity(self, request: Request) -> dict:
        # Another GGUF under the same model name must not reuse this file's answers.
        return {**super().cache_identity(request), "weights_sha256": self.weights_sha256}

    def score_identity(self, prompt: str, candidates: Sequence[str]) -> dict:
        return {**super().score_identity(prompt, candidates), "weights_sha256": self.weights_sha256}

    def generate(
        self,
        requests: Sequence[Request],
        on_result: Callable[[int, Completion], None] | None = None,
    ) -> list[Completion]:
        requests = list(requests)
        if not requests:
            return []
        ids = self.tokenizer.encode_batch([self.prompt_text(r) for r in requests])
        for r_ids in ids:
            self._check_len(len(r_ids), "prompt")
        order = sorted(range(len(requests)), key=lambda i: len(ids[i]))
        out: list[Completion | None] = [None] * len(requests)
        for start in range(0, len(order), self.max_batch):
            group = order[start : start + self.max_batch]
            done = self._generate_group([requests[i] for i in group], [ids[i] for i in group])
            for i, c in zip(group, done, strict=True):
                out[i] = c
                if on_result is not None:
                    on_result(i, c)
        return out  # type: ignore[return-value]

    def _generate_group(self, reqs: list[Request], ids: list[list[int]]) -> list[Completion]:
        import jax.numpy as jnp

        cfg = self.config
        n = len(reqs)
        batch = _next_pow2(n)
        length = self._seq_bucket(max(len(s) for s in ids))
        budget = [
            min(r.params.max_tokens, cfg.context_length - len(s))
            for r, s in zip(reqs, ids, strict=True)
        ]
        if min(budget) < 1:
            raise BackendError(
                f"{self.kind}: a prompt fills the whole context; no room to generate"
            )
        gen = _next_pow2(max(budget), self.decode_chunk)
        gen = int(math.ceil(gen / self.decode_chunk) * self.decode_chunk)
        tokens, positions, valid = self._left_pad(ids, batch, length)

        def per_row(values, fill, dtype):
            a = np.full((batch,), fill, dtype)
            a[:n] = values
            return jnp.asarray(a)

        temperature = per_row([r.params.temperature for r in reqs], 0.0, np.float32)
        top_p = per_row([r.params.top_p for r in reqs], 1.0, np.float32)
        seed = per_row([r.params.seed & 0xFFFFFFFF for r in reqs], 0, np.uint32)
        # one spare chunk of slots: the last decode call may run past the budget
        cache = self._cache(batch, length + gen + self.decode_chunk)
        first, cache = self._prefill(
            self.params, tokens, positions, valid, cache, temperature, top_p, seed
        )
        generated = [[int(t)] for t in np.asarray(first)[:n]]
        state = [self._row_state(r, g, b) for r, g, b in zip(reqs, generated, budget, strict=True)]
        token = first
        pos = jnp.asarray([len(s) for s in ids] + [0] * (batch - n), jnp.int32)
        step = jnp.ones((batch,), jnp.int32)
        produced = 1
        while not all(s is not None for s in state) and produced < gen:
            steps = self.decode_chunk  # one compiled shape; tokens past a budget are cut
            toks, cache, token, pos, step = self._decode(
                self.params, cache, token, pos, step, temperature, top_p, seed, steps=steps
            )
            toks = np.asarray(toks)
            produced += steps
            for i in range(n):
                if state[i] is None:
                    generated[i].extend(int(t) for t in toks[i])
                    state[i] = self._row_state(reqs[i], generated[i], budget[i])
        return [
            self._finish(r, g, b, len(s))
            for r, g, b, s in zip(reqs, generated, budget, ids, strict=True)
        ]

    def _row_state(self, req: Request, toks: list[int], budget: int):
        """None while the row should keep generating; else a truthy marker."""
        if any(t in self._stop_ids for t in toks) or len(toks) >= budget:
            return True
        if req.params.stop:
            text = self.tokenizer.decode(toks)
            if any(s and s in text for s in req.params.stop):
                return True
        return None

    def _finish(self, req: Request, toks: list[int], budget: int, n_prompt: int) -> Completion:
        reason = "length"
        cut = min(len(toks), budget)
        for k, t in enumerate(toks[:cut]):
            if t in self._stop_ids:
                cut, reason = k + 1, "stop"
                break
        body = [t for t in toks[:cut] if t not in self._stop_ids]
        text = self.tokenizer.decode(body)
        stops = [s for s in req.params.stop if s]
        if stops and any(s in text for s in stops):
            first = min(text.index(s) for s in stops if s in text)
            # the fewest tokens whose text contains a stop string
            for k in range(1, len(body) + 1):
                partial = self.tokenizer.decode(body[:k])
                if any(s in partial for s in stops):
                    cut, reason = k, "stop"
                    break
            text = text[:first]
        return Completion(
            text=text, prompt_tokens=n_prompt, completion_tokens=cut, finish_reason=reason
        )

    # ----- score ------------------------------------------------------------------------

    def score(
        self, prompts: Sequence[str], candidates: Sequence[Sequence[str]]
    ) -> list[list[float]]:
        """``log p(candidate | prompt)`` summed over the candidate's tokens.

        The sequence scored is ``tokens(prompt) + tokens(candidate)`` (each text tokenized
        on its own, the prompt with the model's BOS if it uses one, candidates without).
        When every candidate is a single token, one forward pass per prompt reads them all
        from the next-token distribution; otherwise every (prompt, candidate) pair is one row.
        """
        prompts = list(prompts)
        candidates = [list(c) for c in candidates]
        if len(prompts) != len(candidates):
            raise ValueError(f"{len(prompts)} prompts but {len(candidates)} candidate lists")
        if not prompts:
            return []
        p_ids = self.tokenizer.encode_batch(prompts)
        flat = sorted({c for cs in candidates for c in cs})
        c_ids = dict(zip(flat, self.tokenizer.encode_batch(flat, add_bos=False), strict=True))
        if any(len(v) == 0 for v in c_ids.values()):
            raise ValueError(f"{self.kind}.score: empty candidate string")
        if all(len(v) == 1 for v in c_ids.values()):
            return self._score_next(p_ids, [[c_ids[c][0] for c in cs] for cs in candidates])
        rows = [
            (i, p_ids[i] + c_ids[c], len(p_ids[i])) for i, cs in enumerate(candidates) for c in cs
        ]
        values = self._score_rows(rows)
        out, k = [], 0
        for cs in candidates:
            out.append(values[k : k + len(cs)])
            k += len(cs)
        return out

    def _score_next(self, p_ids: list[list[int]], cand: list[list[int]]) -> list[list[float]]:
        width = _next_pow2(max(len(c) for c in cand))
        order = sorted(range(len(p_ids)), key=lambda i: len(p_ids[i]))
        out: list[list[float]] = [[] for _ in p_ids]
        for start in range(0, len(order), self.max_batch):
            group = order[start : start + self.max_batch]
            batch = _next_pow2(len(group))
            seqs = [p_ids[i] for i in group]
            for s in seqs:
                self._check_len(len(s), "prompt")
            length = self._seq_bucket(max(len(s) for s in seqs))
            tokens, positions, valid = self._left_pad(seqs, batch, length)
            ids = np.zeros((batch, width), np.int32)
            for r, i in enumerate(group):
                ids[r, : len(cand[i])] = cand[i]
            lp = np.asarray(
                self._next_logprobs(
                    self.params, tokens, positions, valid, self._cache(batch, length), ids
                )
            )
            for r, i in enumerate(group):
                out[i] = [float(v) for v in lp[r, : len(cand[i])]]
        return out

    def _score_rows(self, rows: list[tuple[int, list[int], int]]) -> list[float]:
        order = sorted(range(len(rows)), key=lambda k: len(rows[k][1]))
        out = [0.0] * len(rows)
        for start in range(0, len(order), self.max_batch):
            group = order[start : start + self.max_batch]
            batch = _next_pow2(len(group))
            seqs = [rows[k][1] for k in group]
            for s in seqs:
                self._check_len(len(s), "prompt + candidate")
            length = self._seq_bucket(max(len(s) for s in seqs))
            tokens = np.full((batch, length), self.config.pad_id, np.int32)
            valid = np.zeros((batch, length), bool)
            target = np.zeros((batch, length), bool)
            positions = np.tile(np.arange(length, dtype=np.int32), (batch, 1))
            for r, k in enumerate(group):  # right-padded
                s, n_prompt = rows[k][1], rows[k][2]
                tokens[r, : len(s)] = s
                valid[r, : len(s)] = True
                target[r, n_prompt : len(s)] = True
            lp = np.asarray(
                self._seq_logprobs(
                    self.params, tokens, positions, valid, self._cache(batch, length), target
                )
            )
            for r, k in enumerate(group):
                out[k] = float(lp[r])
        return out

    def next_token_logits(self, token_ids: Sequence[Sequence[int]]) -> np.ndarray:
        """Float32 logits ``[N, vocab]`` after each token sequence (include the BOS if the
        model uses one)."""
        seqs = [list(s) for s in token_ids]
        out = np.zeros((len(seqs), self.config.vocab_size), np.float32)
        for start in range(0, len(seqs), self.max_batch):
            group = seqs[start : start + self.max_batch]
            batch = _next_pow2(len(group))
            length = self._seq_bucket(max(len(s) for s in group))
            tokens, positions, valid = self._left_pad(group, batch, length)
            logits = self._last_logits(
                self.params, tokens, positions, valid, self._cache(batch, length)
            )
            out[start : start + len(group)] = np.asarray(logits)[: len(group)]
        return out

    # ----- pairwise ranking -------------------------------------------------------------

    def rank_pair(
        self,
        prompts_ab: Sequence[str],
        prompts_ba: Sequence[str],
        choices: tuple[str, str] = ("1", "2"),
    ) -> np.ndarray:
        """P(item A preferred), position bias cancelled: see ``labeling.rank_pair``."""
        from .labeling import rank_pair

        return rank_pair(self, prompts_ab, prompts_ba, choices)

    def close(self) -> None:
        self.params = None


__all__ = ["FULL_OPTIMISATION", "LocalBackend"]

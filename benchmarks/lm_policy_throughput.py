"""Verco's action scoring on the CPU: prompts/s and tokens/s of ``action_log_probs``.

    python benchmarks/lm_policy_throughput.py --json
    python benchmarks/lm_policy_throughput.py --scratch --json   # also time the baseline

The decoder is the project's decoder in Gemma 3's configuration with random float32
weights in SmolLM2-135M's shapes (``--shape smollm2``: vocab 49152, d_model 576, 30 layers,
9 query heads and 3 KV heads of 64, MLP 1536); SmolLM2's own (llama)
configuration has the same parameter count and matmul shapes (it lacks Gemma's extra
norms). ``--shape tiny`` is for tests.

Timed: one jitted ``action_log_probs`` (merge the LoRA adapter, prefill ``N`` prompts of
``T`` tokens, score ``K`` candidates of ``C`` tokens against the tiled cache), best of
``--repeats``; ``compile_s`` is lowering and compiling it. ``--scratch`` also times
the baseline that runs each prompt+candidate as its own ``T + C`` sequence (logits only
where needed), the way TWOSOME scores actions. ``tokens_per_s`` counts the token
positions the cached scorer runs (``N*T + N*K*C``). Also reported: the critic's base-model
prefill (``prompt_features``), and the size of the LoRA adapter (q, v; rank 8) and of
TWOSOME's value head, as arrays and as an adapter checkpoint on disk.
"""

from __future__ import annotations

import argparse
import json
import os
import pathlib
import tempfile
import time

import jax
import jax.numpy as jnp
import numpy as np

from jaxmarl_llm.lm.decoder import Decoder, init_cache
from jaxmarl_llm.lm.gemma import GemmaConfig
from jaxmarl_llm.lm.lora import (
    init_lora,
    merge_lora,
    parameter_bytes,
    parameter_count,
    save_adapters,
)
from jaxmarl_llm.methods.verco.models import tiny_gemma_config
from jaxmarl_llm.methods.verco.policy import (
    DecoderLM,
    ValueHead,
    action_log_probs,
    candidate_token_log_probs,
    gather_log_probs,
    positions_from_valid,
    prompt_features,
)

SHAPES = {
    "smollm2": GemmaConfig(
        vocab_size=49152,
        d_model=576,
        n_layers=30,
        ffn_dim=1536,
        n_heads=9,
        n_kv_heads=3,
        head_dim=64,
        rms_eps=1e-5,
        context_length=8192,
        rope_global_base=100_000.0,
        query_pre_attn_scalar=64.0,
    ).decoder,
    "tiny": tiny_gemma_config(vocab_size=128, context_length=256, sliding_window=512).decoder,
}


def scratch_scores(lm: DecoderLM, params, prompt_tokens, prompt_valid, cand_tokens, cand_valid):
    """Baseline: every prompt+candidate as its own sequence (left-padded prompts)."""
    n, k, c = cand_tokens.shape
    t = prompt_tokens.shape[1]
    tokens = jnp.concatenate(
        [jnp.repeat(prompt_tokens, k, axis=0), cand_tokens.reshape(n * k, c)], axis=1
    )
    valid = jnp.concatenate([jnp.repeat(prompt_valid, k, axis=0), cand_valid.reshape(n * k, c)], 1)
    cache = lm.empty_cache(n * k, t + c)
    hidden, _ = lm.hidden(params, tokens, positions_from_valid(valid), valid, cache)
    log_probs = gather_log_probs(lm.logits(params, hidden[:, t - 1 : t + c - 1]), tokens[:, t:])
    return jnp.where(valid[:, t:], log_probs, 0.0).sum(-1).reshape(n, k)


def best_time(fn, repeats: int) -> float:
    times = []
    for _ in range(repeats):
        t0 = time.perf_counter()
        jax.block_until_ready(fn())
        times.append(time.perf_counter() - t0)
    return min(times)


def directory_bytes(path: pathlib.Path) -> int:
    return sum(f.stat().st_size for f in path.rglob("*") if f.is_file())


def main(argv=None) -> dict:
    p = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    p.add_argument("--shape", choices=sorted(SHAPES), default="smollm2")
    p.add_argument("--prompts", type=int, default=16, help="N (envs x agents)")
    p.add_argument("--prompt-tokens", type=int, default=64, help="T")
    p.add_argument("--actions", type=int, default=8, help="K")
    p.add_argument("--action-tokens", type=int, default=4, help="C")
    p.add_argument("--normalization", choices=("none", "token", "word"), default="none")
    p.add_argument("--rank", type=int, default=8)
    p.add_argument("--repeats", type=int, default=3)
    p.add_argument("--scratch", action="store_true", help="also time the uncached baseline")
    p.add_argument("--json", action="store_true")
    args = p.parse_args(argv)

    cfg = SHAPES[args.shape]
    lm = DecoderLM(Decoder(cfg), init_cache)
    n, t, k, c = args.prompts, args.prompt_tokens, args.actions, args.action_tokens
    rng = np.random.default_rng(0)

    t0 = time.perf_counter()
    dummy = jnp.zeros((1, 4), jnp.int32)
    base = jax.jit(lm.module.init)(
        jax.random.key(0), dummy, dummy, jnp.ones((1, 4), bool), init_cache(cfg, 1, 4)
    )["params"]
    lora = init_lora(jax.random.key(1), base, rank=args.rank)
    # a trained adapter's b is not zero (and not compressible on disk)
    b_keys = dict(zip(lora.b, jax.random.split(jax.random.key(3), len(lora.b)), strict=True))
    lora = lora.replace(
        b={name: 0.01 * jax.random.normal(b_keys[name], b.shape) for name, b in lora.b.items()}
    )
    init_s = time.perf_counter() - t0

    prompt_tokens = jnp.asarray(rng.integers(3, cfg.vocab_size, (n, t)), jnp.int32)
    lengths = rng.integers(t // 2, t + 1, n)
    prompt_valid = jnp.asarray(np.arange(t)[None] >= (t - lengths)[:, None])  # left-padded
    cand_tokens = jnp.asarray(rng.integers(3, cfg.vocab_size, (n, k, c)), jnp.int32)
    cand_valid = jnp.asarray(np.arange(c) < rng.integers(1, c + 1, (n, k))[..., None])
    avail = jnp.asarray(rng.random((n, k)) < 0.8).at[:, 0].set(True)
    word_counts = jnp.asarray(rng.integers(1, 4, (n, k)))
    inputs = (prompt_tokens, prompt_valid, cand_tokens, cand_valid, avail)

    score = jax.jit(action_log_probs, static_argnames=("lm", "normalization"))
    kwargs = dict(normalization=args.normalization, word_counts=word_counts)
    t0 = time.perf_counter()
    score.lower(lm, base, lora, *inputs, **kwargs).compile()
    compile_s = time.perf_counter() - t0
    t0 = time.perf_counter()
    jax.block_until_ready(score(lm, base, lora, *inputs, **kwargs))
    first_call_s = time.perf_counter() - t0
    run_s = best_time(lambda: score(lm, base, lora, *inputs, **kwargs), args.repeats)

    features = jax.jit(prompt_features, static_argnames="lm")
    jax.block_until_ready(features(lm, base, prompt_tokens, prompt_valid))
    features_s = best_time(lambda: features(lm, base, prompt_tokens, prompt_valid), args.repeats)

    head = ValueHead()
    head_params = head.init(jax.random.key(2), jnp.zeros((1, cfg.d_model)))["params"]
    with tempfile.TemporaryDirectory() as tmp:
        save_adapters(pathlib.Path(tmp) / "action", lora)
        save_adapters(pathlib.Path(tmp) / "with_head", {"action": lora, "value_head": head_params})
        lora_disk = directory_bytes(pathlib.Path(tmp) / "action")
        both_disk = directory_bytes(pathlib.Path(tmp) / "with_head")

    out = {
        "shape": args.shape,
        "base_params": parameter_count(base),
        "N": n,
        "T": t,
        "K": k,
        "C": c,
        "normalization": args.normalization,
        "init_s": round(init_s, 2),
        "compile_s": round(compile_s, 2),
        "first_call_s": round(first_call_s, 2),
        "run_s": round(run_s, 4),
        "prompts_per_s": round(n / run_s, 2),
        "tokens_per_s": round((n * t + n * k * c) / run_s, 1),
        "candidate_tokens_per_s": round(n * k * c / run_s, 1),
        "critic_features_s": round(features_s, 4),
        "lora_params": parameter_count(lora),
        "lora_bytes": parameter_bytes(lora),
        "lora_checkpoint_bytes": lora_disk,
        "value_head_params": parameter_count(head_params),
        "lora_and_value_head_checkpoint_bytes": both_disk,
        "cpu_threads": os.cpu_count(),
    }
    if args.scratch:
        baseline = jax.jit(scratch_scores, static_argnames="lm")
        merged = jax.jit(merge_lora)(base, lora)
        base_args = (lm, merged, *inputs[:4])
        jax.block_until_ready(baseline(*base_args))
        scratch_s = best_time(lambda: baseline(*base_args), max(1, args.repeats - 1))
        out["scratch_run_s"] = round(scratch_s, 4)
        out["speedup_vs_scratch"] = round(scratch_s / run_s, 2)
        token_log_probs, _ = jax.jit(candidate_token_log_probs, static_argnums=0)(
            lm, merged, *inputs[:4]
        )
        cached = np.where(np.asarray(cand_valid), np.asarray(token_log_probs), 0).sum(-1)
        out["max_abs_diff_vs_scratch"] = float(np.abs(cached - baseline(*base_args)).max())
    if args.json:
        print(json.dumps(out))
    else:
        for key, value in out.items():
            print(f"{key}: {value}")
    return out


if __name__ == "__main__":
    main()

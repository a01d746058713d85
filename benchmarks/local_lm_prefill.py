"""Load time and prefill throughput of the local GGUF models (Gemma 3 270M, SmolLM2-135M).

Times, per model: the first load (dequantize the GGUF, build the tokenizer) in a fresh
cache directory, a load from that cache, and the prefill of ``--batch`` x ``--tokens``
tokens (one forward pass over full rows through the backend's jitted next-token-logits
function, compiled first, best of ``--repeats``).

    python benchmarks/local_lm_prefill.py --model smollm2 --model gemma --json
"""

from __future__ import annotations

import argparse
import json
import os
import tempfile
import time

import numpy as np

BACKENDS = {
    "gemma": ("jaxmarl_llm.lm.gemma", "GemmaBackend"),
    "smollm2": ("jaxmarl_llm.lm.llama", "LlamaBackend"),
}


def measure(name: str, batch: int, tokens: int, repeats: int) -> dict:
    import importlib

    import jax

    module, cls = BACKENDS[name]
    backend_cls = getattr(importlib.import_module(module), cls)
    with tempfile.TemporaryDirectory() as cache:
        os.environ["JAXMARL_LLM_CACHE"] = cache
        t0 = time.perf_counter()
        backend_cls(max_batch=batch).close()
        first_load = time.perf_counter() - t0
        t0 = time.perf_counter()
        be = backend_cls(max_batch=batch)
        cached_load = time.perf_counter() - t0
    rng = np.random.default_rng(0)
    ids = rng.integers(1000, 5000, size=(batch, tokens)).astype(np.int32)
    positions = np.tile(np.arange(tokens, dtype=np.int32), (batch, 1))
    valid = np.ones((batch, tokens), bool)

    def prefill():
        out = be._last_logits(be.params, ids, positions, valid, be._cache(batch, tokens))
        return jax.block_until_ready(out)

    t0 = time.perf_counter()
    prefill()
    compile_s = time.perf_counter() - t0
    times = []
    for _ in range(repeats):
        t0 = time.perf_counter()
        prefill()
        times.append(time.perf_counter() - t0)
    best = min(times)
    cfg = be.config
    be.close()
    return {
        "model": name,
        "params_M": round(
            (
                cfg.vocab_size * cfg.d_model
                + cfg.n_layers
                * (
                    cfg.d_model * (cfg.n_heads + 2 * cfg.n_kv_heads) * cfg.head_dim
                    + cfg.n_heads * cfg.head_dim * cfg.d_model
                    + 3 * cfg.d_model * cfg.ffn_dim
                )
            )
            / 1e6,
            1,
        ),
        "first_load_s": round(first_load, 1),
        "cached_load_s": round(cached_load, 1),
        "compile_s": round(compile_s, 1),
        "prefill_s": round(best, 2),
        "prefill_tokens_per_s": round(batch * tokens / best),
        "batch": batch,
        "tokens": tokens,
    }


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--model", action="append", choices=sorted(BACKENDS), required=True)
    p.add_argument("--batch", type=int, default=64)
    p.add_argument("--tokens", type=int, default=64)
    p.add_argument("--repeats", type=int, default=3)
    p.add_argument("--json", action="store_true")
    args = p.parse_args()
    for name in args.model:
        row = measure(name, args.batch, args.tokens, args.repeats)
        print(json.dumps(row) if args.json else row, flush=True)


if __name__ == "__main__":
    main()

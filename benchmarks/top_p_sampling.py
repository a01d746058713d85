"""Cost of top-p filtering one decoding step's logits: the bisection the local backends use
(``jaxmarl_llm.lm.nucleus``) against sorting the vocabulary, on random logits of a
Gemma-sized (262,144-token) or SmolLM2-sized (49,152) vocabulary; both jitted, best of
``--repeats``, and whether they keep the same tokens.

    python benchmarks/top_p_sampling.py --vocab 262144 --batch 4 --json
"""

from __future__ import annotations

import argparse
import json
import time


def sorted_top_p_filter(logits, top_p):
    """The sort-based nucleus: keep tokens whose mass strictly above is below top_p."""
    import jax
    import jax.numpy as jnp

    order = jnp.sort(logits, axis=-1)[:, ::-1]
    probs = jax.nn.softmax(order, axis=-1)
    before = jnp.cumsum(probs, axis=-1) - probs
    keep = before < top_p[:, None]
    cutoff = jnp.min(jnp.where(keep, order, jnp.inf), axis=-1, keepdims=True)
    return jnp.where(logits >= cutoff, logits, -jnp.inf)


def best_ms(fn, args, repeats: int) -> float:
    import jax

    jax.block_until_ready(fn(*args))  # compile
    times = []
    for _ in range(repeats):
        t0 = time.perf_counter()
        jax.block_until_ready(fn(*args))
        times.append(time.perf_counter() - t0)
    return 1e3 * min(times)


def main(argv: list[str] | None = None) -> dict:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--vocab", type=int, default=262144)
    p.add_argument("--batch", type=int, default=4)
    p.add_argument("--top-p", type=float, default=0.9)
    p.add_argument("--temperature-scale", type=float, default=3.0, help="logit spread")
    p.add_argument("--repeats", type=int, default=5)
    p.add_argument("--json", action="store_true")
    args = p.parse_args(argv)

    import jax
    import jax.numpy as jnp
    import numpy as np

    from jaxmarl_llm.lm.nucleus import top_p_filter

    logits = args.temperature_scale * jax.random.normal(jax.random.key(0), (args.batch, args.vocab))
    top_p = jnp.full((args.batch,), args.top_p, jnp.float32)
    ours, ref = jax.jit(top_p_filter), jax.jit(sorted_top_p_filter)
    kept = np.isfinite(np.asarray(ours(logits, top_p)))
    out = {
        "vocab": args.vocab,
        "batch": args.batch,
        "top_p": args.top_p,
        "bisection_ms": round(best_ms(ours, (logits, top_p), args.repeats), 2),
        "sort_ms": round(best_ms(ref, (logits, top_p), args.repeats), 2),
        "same_tokens_kept": bool((kept == np.isfinite(np.asarray(ref(logits, top_p)))).all()),
        "kept_per_row": kept.sum(-1).tolist(),
        "backend": jax.default_backend(),
    }
    print(json.dumps(out) if args.json else out, flush=True)
    return out


if __name__ == "__main__":
    main()

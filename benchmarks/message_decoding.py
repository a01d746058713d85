"""Seconds to decode the student's messages for calls of a few observation texts.

    python benchmarks/message_decoding.py [--adapter experiments/models/verco_messages_A_last2]

During Verco's rollout each env step asks the frozen message adapter for the messages of
the agents that decide, so a call brings one to four observation texts the cache has not
seen. This times ``generate_messages`` on such calls (salad observations of map A) with
the batch padded to its full 16 rows (the texts repeated) and with the rows it needs, and
checks that both give the same messages.
"""

from __future__ import annotations

import argparse
import json
import platform
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--adapter", default="experiments/models/verco_messages_A_last2")
    p.add_argument("--lora-layers", default="last:2")
    p.add_argument("--rank", type=int, default=8, help="the adapter's LoRA rank")
    p.add_argument("--sizes", type=int, nargs="+", default=[1, 2, 4])
    p.add_argument("--calls", type=int, default=3, help="timed calls per size and layout")
    p.add_argument("--max-tokens", type=int, default=20)
    p.add_argument("--json", action="store_true", help="print one JSON line")
    args = p.parse_args(argv)

    import jax
    import numpy as np

    from envs.salad.env import SaladKitchen
    from experiments.verco_messages import load_model
    from jaxmarl_llm.lm.lora import init_lora, load_adapters, parse_lora_layers
    from jaxmarl_llm.methods.verco.messages import collect_message_pairs, generate_messages

    lm, params, tokenizer, described = load_model("smollm2")
    layers = parse_lora_layers(args.lora_layers, lm.module.cfg.n_layers, "--lora-layers")
    like = init_lora(jax.random.key(0), params, ("q", "v"), rank=args.rank, layers=layers)
    lora = load_adapters(args.adapter, like)
    pairs = collect_message_pairs(SaladKitchen("A"), jax.random.key(0), 4)
    texts = list(dict.fromkeys(pairs.observations))
    rng = np.random.default_rng(0)

    def timed(batch: list[str], full: bool) -> tuple[float, list[str]]:
        asked = (batch * 16)[:16] if full else batch
        t0 = time.perf_counter()
        out = generate_messages(lm, params, lora, tokenizer, asked, args.max_tokens)
        return time.perf_counter() - t0, out.messages[: len(batch)]

    rows = []
    for size in args.sizes:
        for full in (True, False):
            timed(list(rng.choice(texts, size, replace=False)), full)  # compile this shape
        for full in (True, False):
            seconds, same = [], True
            for _ in range(args.calls):
                batch = list(rng.choice(texts, size, replace=False))
                s, got = timed(batch, full)
                seconds.append(s)
                if not full:
                    same &= got == timed(batch, True)[1]
            row = {
                "texts": size,
                "rows": 16 if full else "needed",
                "seconds": float(np.median(seconds)),
            }
            if not full:
                row["same_messages"] = bool(same)
            rows.append(row)
            print(row, flush=True)
    result = {"bench": "message_decoding", "model": described["name"], "adapter": args.adapter,
              "max_tokens": args.max_tokens, "machine": platform.processor() or platform.machine(),
              "jax": jax.__version__, "rows": rows}  # fmt: skip
    if args.json:
        print(json.dumps(result))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

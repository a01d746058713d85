"""How well the local Gemma 3 270M ranks pairs with a known answer (which count is larger).

    python benchmarks/gemma_ranking_accuracy.py --pairs 32 --json

Reports the fraction of pairs ranked right by ``rank_pair`` (both answer orders scored,
position bias cancelled) and by the single A-B order, plus how often the single order
just answers "1". A small base model leans hard on position; this shows what is left.
"""

from __future__ import annotations

import argparse
import json

import numpy as np

QUESTION = (
    "Q: Agent 1 collected {x} apples. Agent 2 collected {y} apples. "
    "Which agent collected more apples? Answer with 1 or 2.\nA: Agent"
)


def main(argv=None) -> dict:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--pairs", type=int, default=32)
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--json", action="store_true")
    args = p.parse_args(argv)

    from jaxmarl_llm.lm.gemma import GemmaBackend

    rng = np.random.default_rng(args.seed)
    a, b = rng.integers(0, 20, args.pairs), rng.integers(0, 20, args.pairs)
    a, b = a[a != b], b[a != b]
    ab = [QUESTION.format(x=x, y=y) for x, y in zip(a, b, strict=True)]
    ba = [QUESTION.format(x=y, y=x) for x, y in zip(a, b, strict=True)]
    backend = GemmaBackend()
    p_first = backend.rank_pair(ab, ba, choices=(" 1", " 2"))
    single = np.asarray(backend.score(ab, [[" 1", " 2"]] * len(ab)))
    truth = a > b
    out = {
        "pairs": int(len(a)),
        "rank_pair_accuracy": float(((p_first > 0.5) == truth).mean()),
        "single_order_accuracy": float(((single[:, 0] > single[:, 1]) == truth).mean()),
        "single_order_answers_1": float((single[:, 0] > single[:, 1]).mean()),
        "p_min": float(p_first.min()),
        "p_max": float(p_first.max()),
    }
    print(json.dumps(out) if args.json else out)
    return out


if __name__ == "__main__":
    main()

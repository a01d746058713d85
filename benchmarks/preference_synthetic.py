"""LCA section 5.3.1 on a synthetic state space: do more queries per pair help?

    python benchmarks/preference_synthetic.py --seeds 8 --json

States are random points in R^d with a known nonlinear potential
``v(x) = sin(1.5 x0) + 0.5 x1^2 + tanh(x2 x3)`` (further dimensions are distractors). A
scripted teacher (``jaxmarl_llm.lm.teachers``) that answers correctly with probability
70% or 80% (``TeacherNoise.with_accuracy``; 100% is the noise-free ceiling) labels
``--pairs`` random state pairs, either once or ``--queries`` times per pair
(``repeated_pair_preferences``: the label is the fraction of votes, LCA eq. 3's
confidence). A potential model is fitted on each dataset and scored by its pairwise
ranking accuracy against ``v`` on held-out states. Seeds are vmapped (one compile per
query count); mean +- std over seeds is reported, and ``majority_label_accuracy`` is how
often the majority label (ties excluded) is right.
"""

from __future__ import annotations

import argparse
import json
import time

import jax
import jax.numpy as jnp
import numpy as np


def true_value(x):
    return jnp.sin(1.5 * x[..., 0]) + 0.5 * x[..., 1] ** 2 + jnp.tanh(x[..., 2] * x[..., 3])


def main(argv=None) -> dict:
    p = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    p.add_argument("--dim", type=int, default=6, help="state dimension (>= 4)")
    p.add_argument("--pairs", type=int, default=2000, help="labelled state pairs")
    p.add_argument("--test-states", type=int, default=500)
    p.add_argument("--accuracies", type=float, nargs="+", default=[0.7, 0.8, 1.0])
    p.add_argument("--queries", type=int, nargs="+", default=[1, 4])
    p.add_argument("--seeds", type=int, default=8)
    p.add_argument("--hidden", type=int, nargs="+", default=[64, 64])
    p.add_argument("--steps", type=int, default=400)
    p.add_argument("--batch", type=int, default=256)
    p.add_argument("--lr", type=float, default=1e-3)
    p.add_argument("--weight-decay", type=float, default=1e-4)
    p.add_argument("--json", action="store_true", help="print one JSON line")
    args = p.parse_args(argv)
    if args.dim < 4:
        p.error("--dim must be >= 4")

    from jaxmarl_llm.lm.teachers import TeacherNoise, repeated_pair_preferences
    from jaxmarl_llm.preferences import (
        FitConfig,
        RewardModel,
        fit,
        pairwise_ranking_accuracy,
        state_pairs_from_confidence,
    )

    model = RewardModel(hidden=tuple(args.hidden), ensemble_size=1)
    config = FitConfig(
        num_steps=args.steps,
        batch_size=args.batch,
        learning_rate=args.lr,
        weight_decay=args.weight_decay,
    )

    def one_seed(key, noise, num_queries):
        ka, kq, ki, kf, kt = jax.random.split(key, 5)
        xa, xb = jax.random.normal(ka, (2, args.pairs, args.dim))
        va, vb = true_value(xa), true_value(xb)
        conf, count = repeated_pair_preferences(kq, va, vb, noise, num_queries)
        data = state_pairs_from_confidence(xa, xb, conf, count)
        params = model.init(ki, args.dim)
        params, losses = fit(model, params, data, kf, config)
        test = jax.random.normal(kt, (args.test_states, args.dim))
        acc = pairwise_ranking_accuracy(model.apply(params, test), true_value(test))
        decided = (conf != 0.5) & (va != vb)
        label_acc = ((conf > 0.5) == (va > vb)).astype(jnp.float32)
        label_acc = jnp.where(decided, label_acc, 0.0).sum() / jnp.maximum(decided.sum(), 1)
        return acc, label_acc, losses[-50:].mean()

    run = jax.jit(jax.vmap(one_seed, in_axes=(0, None, None)), static_argnums=2)
    keys = jax.random.split(jax.random.PRNGKey(0), args.seeds)
    results = []
    t0 = time.perf_counter()
    for accuracy in args.accuracies:
        noise = TeacherNoise.with_accuracy(accuracy)
        for q in args.queries:
            # Same seeds (states, test set, init) across conditions: paired comparison.
            acc, label_acc, loss = jax.block_until_ready(run(keys, noise, q))
            acc, label_acc = np.asarray(acc), np.asarray(label_acc)
            results.append(
                {
                    "teacher_accuracy": accuracy,
                    "queries": q,
                    "ranking_accuracy_mean": round(float(acc.mean()), 4),
                    "ranking_accuracy_std": round(float(acc.std()), 4),
                    "majority_label_accuracy": round(float(label_acc.mean()), 4),
                    "final_loss": round(float(np.mean(loss)), 4),
                    "per_seed": [round(float(a), 4) for a in acc],
                }
            )
    out = {
        "dim": args.dim,
        "pairs": args.pairs,
        "seeds": args.seeds,
        "steps": args.steps,
        "results": results,
        "wall_s": round(time.perf_counter() - t0, 2),
    }
    if args.json:
        print(json.dumps(out))
    else:
        print(f"{args.pairs} pairs, d={args.dim}, {args.seeds} seeds, {args.steps} steps")
        for r in results:
            print(
                f"teacher {r['teacher_accuracy']:.0%}  queries {r['queries']}:  ranking accuracy "
                f"{r['ranking_accuracy_mean']:.4f} +- {r['ranking_accuracy_std']:.4f}  "
                f"(majority label accuracy {r['majority_label_accuracy']:.3f})"
            )
    return out


if __name__ == "__main__":
    main()

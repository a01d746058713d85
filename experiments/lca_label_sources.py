"""How good must LCA's labels be: each label source on the same held-out state pairs, and
LCA trained from each source.

    python experiments/lca_label_sources.py measure --env ENV [--sources ...] [--lm-queries 64]
    python experiments/lca_label_sources.py train --env ENV [--sources ...] [--lm-pairs 100]

Held-out queries: ``HELD_OUT_PAIRS // num_agents`` transitions drawn by
``sample_transitions(env, PRNGKey(HELD_OUT_SEED), ..., "mixed")``, the way LCA draws its
training pairs (half steps of random-play rollouts in 64 envs, half random states followed
by one random step), under a key no training run uses, then shuffled with the same key so
that any prefix (the language models answer only the first ``--lm-queries``) is a random
subset. Every agent of every transition is one query.

Sources: the env's ranking heuristic (the oracle), the heuristic with 40/30/20/10% of its
answers flipped (the ``accuracy`` option LCA trains with), and Gemma 3 270M and
SmolLM2-135M-Instruct answering the LCA ranking prompt (generated, parsed, asked again up
to twice when malformed, every answer kept in a label store).

Accuracy: over the answered queries the oracle strictly decides, the fraction whose answer
names the oracle's state; "equally good" there counts as wrong; queries the oracle ties
are left out (``oracle_ties``). Abstention: queries left without a usable answer.
Labels/s: answered labels per wall second of labelling, model load excluded, the models'
first compilation included; answers already in the label store (a rerun, or a longer
prefix of the same queries) are not counted as labelled.

Rows are merged into ``experiments/results/labels/lca.json`` (a row of the same query set
and source, or env and source, is replaced).
"""

from __future__ import annotations

import argparse
import json
import math
import shutil
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

OUT = ROOT / "experiments" / "results" / "labels" / "lca.json"
RESULTS = ROOT / "experiments" / "results" / "labels" / "lca"
FIG3 = ROOT / "experiments" / "results" / "lca" / "fig3.json"
ENVS = ("two_switch", "victim_rubble")
HELD_OUT_SEED = 20_037
HELD_OUT_PAIRS = 200
SCRIPTED = {f"scripted {int(a * 100)}%": a for a in (0.6, 0.7, 0.8, 0.9)}
MODELS = {"Gemma 3 270M": "gemma", "SmolLM2-135M-Instruct": "smollm2"}
SOURCES = ("heuristic oracle", *SCRIPTED, *MODELS)
BASELINE = "MAPPO team"


def query_set(env_name: str) -> str:
    return f"{env_name} pairs"


def held_out_transitions(env):
    """The held-out transitions, shuffled (see the module docstring)."""
    import jax

    from jaxmarl_llm.methods.lca.pairs import sample_transitions

    key = jax.random.PRNGKey(HELD_OUT_SEED)
    num = math.ceil(HELD_OUT_PAIRS / env.num_agents)
    t = sample_transitions(env, key, num, "mixed", 64, 0.3)
    order = jax.random.permutation(jax.random.fold_in(key, 1), num)
    return jax.tree.map(lambda x: x[order], t)


def agreement(confidence, num_answers, phi, phi_next) -> dict:
    """Accuracy against the oracle, abstention and tie counts (see the module docstring)."""
    import numpy as np

    confidence, num_answers = np.asarray(confidence), np.asarray(num_answers)
    phi, phi_next = np.asarray(phi), np.asarray(phi_next)
    answered = num_answers > 0
    decided = answered & (phi_next != phi)
    right = decided & np.where(phi_next > phi, confidence > 0.5, confidence < 0.5)
    return {
        "accuracy": float(right.sum() / decided.sum()) if decided.any() else None,
        "abstention": float(1.0 - answered.mean()),
        "answered": int(answered.sum()),
        "scored": int(decided.sum()),
        "oracle_ties": int((phi_next == phi).sum()),
        "equal_answers": int((answered & (confidence == 0.5)).sum()),
    }


def label_source(env, source: str, t, store: Path, progress: bool, lm_batch: int):
    """``(confidence, num_answers, labelling seconds, extra info)`` of ``source`` on ``t``."""
    import jax
    import numpy as np

    from jaxmarl_llm.lm.factory import make_backend
    from jaxmarl_llm.lm.labeling import LabelingPolicy
    from jaxmarl_llm.lm.store import CachedBackend, LabelStore
    from jaxmarl_llm.methods.lca.labels import TextQuery, backend_labels, heuristic_labels

    raw = env.env
    if source in MODELS:
        model = make_backend(MODELS[source], max_batch=lm_batch)  # loads the weights: not timed
        backend = CachedBackend(model, LabelStore(store))
        t0 = time.perf_counter()
        try:
            conf, count, report = backend_labels(
                raw, backend, t, TextQuery(), seed=0, policy=LabelingPolicy(), progress=progress
            )
        finally:
            backend.close()
        seconds = time.perf_counter() - t0
        info = {"labeling": report.as_dict(), "cache": backend.stats()}
        return conf, count, seconds, info
    accuracy = 1.0 if source == "heuristic oracle" else SCRIPTED[source]
    key = jax.random.PRNGKey(HELD_OUT_SEED + 1)
    jax.block_until_ready(heuristic_labels(raw, key, t, accuracy))  # compile, not timed
    t0 = time.perf_counter()
    conf, count = jax.block_until_ready(heuristic_labels(raw, key, t, accuracy))
    seconds = time.perf_counter() - t0
    return np.asarray(conf), np.asarray(count), seconds, {}


def measure(
    env_name: str, sources: list[str], lm_queries: int, lm_batch: int, progress: bool
) -> list[dict]:
    import jax

    import envs
    from jaxmarl_llm.methods.lca.labels import heuristic_values

    env = envs.make_array_env(env_name)
    t = held_out_transitions(env)
    lm_transitions = math.ceil(lm_queries / env.num_agents)
    rows = []
    for source in sources:
        sub = t
        if source in MODELS:
            sub = jax.tree.map(lambda x: x[:lm_transitions], t)
        phi, phi_next = heuristic_values(env.env, sub)
        store = ROOT / "runs" / "labels" / "lca" / f"{env_name}_heldout_{MODELS.get(source)}.sqlite"
        store.parent.mkdir(parents=True, exist_ok=True)
        conf, count, seconds, info = label_source(env, source, sub, store, progress, lm_batch)
        stats = agreement(conf, count, phi, phi_next)
        labelled = stats["answered"] - info.get("cache", {}).get("hits", 0)
        cmd = f"python experiments/lca_label_sources.py measure --env {env_name} "
        cmd += f"--sources '{source}'"
        if source in MODELS:
            cmd += f" --lm-queries {lm_queries} --lm-batch {lm_batch}"
        row = {
            "query_set": query_set(env_name),
            "source": source,
            "accuracy": stats["accuracy"],
            "abstention": stats["abstention"],
            "labels_per_s": labelled / seconds if seconds > 0 and labelled else None,
            "n": int(conf.size),
            "command": cmd,
            **{k: stats[k] for k in ("scored", "oracle_ties", "equal_answers")},
            "label_seconds": seconds,
            **info,
        }
        print(
            f"[{env_name}] {source}: accuracy {row['accuracy']}, abstention "
            f"{row['abstention']:.3f}, {row['labels_per_s']} labels/s ({row['n']} queries)",
            flush=True,
        )
        rows.append(row)
        merge(sources=[row])  # a long measurement keeps what it has
    return rows


def training_overrides(source: str, lm_pairs: int, lm_batch: int) -> list[str]:
    if source in MODELS:
        return [
            f"shaping.kwargs.backend_options.max_batch={lm_batch}",
            "shaping.kwargs.labeler=backend",
            f"shaping.kwargs.backend={MODELS[source]}",
            "shaping.kwargs.query_mode=generate",
            f"shaping.kwargs.num_pairs={lm_pairs}",
        ]
    accuracy = 1.0 if source == "heuristic oracle" else SCRIPTED[source]
    return [f"shaping.kwargs.accuracy={accuracy}"]


def baseline(env_name: str) -> tuple[float, list[float]]:
    for r in json.loads(FIG3.read_text()):
        if r["env"] == env_name and r["variant"] == BASELINE:
            return r["final_return_mean"], r["per_seed"]
    raise ValueError(f"{FIG3}: no {BASELINE!r} row for {env_name}")


def train(
    env_name: str, sources: list[str], lm_pairs: int, lm_batch: int, progress: bool
) -> list[dict]:
    from jaxmarl_llm.methods.lca import lca_config
    from jaxmarl_llm.runner import run_into

    measured = {
        r["source"]: r["accuracy"]
        for r in load()["sources"]
        if r["query_set"] == query_set(env_name)
    }
    base, _ = baseline(env_name)
    config = f"lca_{env_name}"
    rows = []
    for source in sources:
        extra = training_overrides(source, lm_pairs, lm_batch)
        slug = "".join(c if c.isalnum() else "_" for c in source.lower()).strip("_")
        out = ROOT / "runs" / "labels" / "lca" / env_name / slug
        summary = run_into(config, ["compare_with=[]", f"progress={progress}", *extra], out)
        from omegaconf import OmegaConf

        kwargs = OmegaConf.load(out / "config.yaml").shaping.kwargs
        step_scale = lca_config(kwargs).step_scale
        report = json.loads((out / "lca" / "report.json").read_text())
        dest = RESULTS / env_name / slug
        dest.mkdir(parents=True, exist_ok=True)
        for name in ("summary.json", "config.yaml", "curve.png"):
            if (out / name).exists():
                shutil.copy(out / name, dest / name)
        shutil.copy(out / "lca" / "report.json", dest / "lca_report.json")
        row = {
            "env": env_name,
            "source": source,
            "label_accuracy": measured.get(source),
            "metric": "train ret",
            "final": summary["final_return_mean"],
            "final_per_seed": summary["final_return_per_seed"],
            "baseline_name": f"{BASELINE} reward",
            "baseline": base,
            "seeds": len(summary["final_return_per_seed"]),
            "env_steps": summary["env_steps"],
            # the reward scale this run used, spelled out: a later default must not change it
            "command": f"python experiments/run.py {config} {' '.join(extra)} "
            f"shaping.kwargs.step_scale={step_scale}",
            "step_scale": step_scale,
            "result_dir": str(dest.relative_to(ROOT)),
            "training_pairs": report.get("pairs"),
            "training_label_accuracy": report.get("label_accuracy_vs_heuristic"),
            "training_abstention": report.get("labeling", {}).get("abstain_rate"),
        }
        print(f"[{env_name}] {source}: train ret {row['final']:.2f} {row['final_per_seed']}")
        rows.append(row)
        merge(training=[row])
    return rows


def load() -> dict:
    if OUT.exists():
        return json.loads(OUT.read_text())
    return {"method": "lca", "queries": [], "sources": [], "training": []}


def merge(sources: list[dict] = (), training: list[dict] = ()) -> None:
    """Write ``sources`` / ``training`` rows into the lca file, replacing rows they redo."""
    record = load()
    for env_name in {r["query_set"].removesuffix(" pairs") for r in sources}:
        record["queries"] = [q for q in record["queries"] if q["env"] != env_name]
        record["queries"].append(
            {
                "name": query_set(env_name),
                "env": env_name,
                "kind": "state-pair ranking per agent",
                "held_out": HELD_OUT_PAIRS,
                "how_built": (
                    f"sample_transitions(PRNGKey({HELD_OUT_SEED}), 'mixed'): half random-play "
                    "steps, half random state + one random step, as LCA samples its training "
                    "pairs; every agent of every transition; shuffled, the LMs answer a prefix"
                ),
            }
        )
    new_s = {(r["query_set"], r["source"]) for r in sources}
    new_t = {(r["env"], r["source"]) for r in training}
    record["sources"] = [
        r for r in record["sources"] if (r["query_set"], r["source"]) not in new_s
    ] + list(sources)
    record["training"] = [
        r for r in record["training"] if (r["env"], r["source"]) not in new_t
    ] + list(training)
    order = {s: i for i, s in enumerate(SOURCES)}
    record["queries"].sort(key=lambda q: ENVS.index(q["env"]))
    record["sources"].sort(key=lambda r: (r["query_set"], order.get(r["source"], 99)))
    record["training"].sort(key=lambda r: (ENVS.index(r["env"]), order.get(r["source"], 99)))
    OUT.parent.mkdir(parents=True, exist_ok=True)
    OUT.write_text(json.dumps(record, indent=1) + "\n")


def main(argv=None) -> int:
    p = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    p.add_argument("what", choices=["measure", "train"])
    p.add_argument("--env", required=True, choices=ENVS)
    p.add_argument("--sources", nargs="+", default=list(SOURCES), choices=SOURCES)
    p.add_argument("--lm-queries", type=int, default=64, help="held-out queries a model answers")
    p.add_argument("--lm-pairs", type=int, default=100, help="training pairs a model labels")
    p.add_argument(
        "--lm-batch", type=int, default=32, help="prompts per model forward pass (memory)"
    )
    p.add_argument("--quiet", action="store_true", help="no progress bars")
    args = p.parse_args(argv)
    if args.what == "measure":
        measure(args.env, args.sources, args.lm_queries, args.lm_batch, not args.quiet)
    else:
        train(args.env, args.sources, args.lm_pairs, args.lm_batch, not args.quiet)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

"""DPM's label-source ladder on SMAX 3m: how good each source's labels are on held-out
queries, and what DPM trained from each source reaches (``experiments/results/labels/dpm.json``,
the shared format the label-ladder table and figures read).

    python experiments/dpm_label_sources.py measure [--lm-queries 16] [--sources ...]
    python experiments/dpm_label_sources.py training   # the training rows, from stored runs

``measure`` builds the held-out queries from a fixed random-play rollout of 3m (seed 37, 16
envs x 256 steps, uniformly random actions: the states DPM's first round sees): 100 pairs of
8-step windows that do not cross an episode end and that the oracle ranks strictly, and 100
single steps in which the oracle ranks at least one pair of allies strictly. The oracle is
DPM's scripted teacher without noise (``methods/dpm/teacher.py``, with ``dpm_smax_3m``'s
``enemy_damage_weight``). The scripted 60-90% teachers are the same teacher with B-Pref
flips (``shaping.kwargs.mistake``), on the arrays, as the training runs label. The language
models read the appendix E prompts (``methods/dpm/text.py``) through the project's parsers,
retries and label store (``runs/dpm_label_sources/labels.sqlite``).

Accuracy: for a segment pair, the answer agrees when it prefers the segment the oracle
prefers ("#0", equally good, disagrees: the oracle is strict on every held-out pair). For a
ranking, accuracy is over the ordered-by-the-oracle ally pairs: the fraction whose order the
answer's ranking implies is the oracle's (a tie in the answer disagrees); allies the oracle
leaves unrated are not scored. Abstention: queries without a parseable answer after the
retries.
"""

from __future__ import annotations

import argparse
import csv
import json
import shutil
import sys
import time
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
OUT = ROOT / "experiments" / "results" / "labels" / "dpm.json"
RUNS = ROOT / "experiments" / "results" / "dpm" / "labels"  # stored copies of ladder runs
STORE = ROOT / "runs" / "dpm_label_sources" / "labels.sqlite"
CONFIG = "dpm_smax_3m"
SEED, ENVS, STEPS, HELD_OUT, SEGMENT = 37, 16, 256, 100, 8
SCRIPTED = {"scripted 60%": 0.4, "scripted 70%": 0.3, "scripted 80%": 0.2, "scripted 90%": 0.1}
MODELS = {"Gemma 3 270M": "gemma", "SmolLM2-135M-Instruct": "smollm2"}
SOURCES = ("heuristic oracle", *SCRIPTED, *MODELS)
QUERY_SETS = {
    "trajectory": {
        "name": "3m segment pairs",
        "env": "smax:3m",
        "kind": "trajectory-segment comparison (8-step windows)",
    },
    "agent": {
        "name": "3m agent rankings",
        "env": "smax:3m",
        "kind": "per-step ranking of the 3 allies, scored by the pairwise orders it implies",
    },
}
HOW_BUILT = (
    f"random play of 3m, PRNGKey({SEED}), {ENVS} envs x {STEPS} steps; {HELD_OUT} queries "
    "drawn uniformly (numpy default_rng({seed})) among those the noise-free scripted teacher "
    "answers strictly"
)
# every source is compared at update 160 (163,840 env steps: the shared CPU allowed no
# more for the ladder), the 1M-step runs' epsilon schedule kept
COMPARE_UPDATE, STEPS_PER_UPDATE = 160, 8 * 128
LADDER_COMMAND = (
    "python experiments/run.py {config} algo.total_timesteps=163840 "
    "algo.schedule_timesteps=1000000 shaping.kwargs.mistake={mistake}"
)
# the sparse baseline and D1's noise-free run: the same seeds (0, 1) and epsilon schedule
BASELINE = (
    "QMIX strong sparse",
    "experiments/results/dpm/budget/3m/qmix_strong_sparse__dpm_s_epsilon_schedule",
)
NOISE_FREE_RUN = "experiments/results/dpm/runs_1m/dpm_3m_damage2"


def held_out_queries(env, enemy_weight: float) -> dict:
    """The rollout and the held-out queries on it (host arrays)."""
    import jax

    from jaxmarl_llm.learners.acting import random_play
    from jaxmarl_llm.methods.dpm.online import TIE_MARGIN
    from jaxmarl_llm.methods.dpm.teacher import agent_contributions, segment_value

    batch = jax.jit(lambda k: random_play(env, k, ENVS, STEPS))(jax.random.PRNGKey(SEED))
    state, next_state = batch.state, batch.next_state
    rng = np.random.default_rng(SEED)

    # windows [t, t + L) of env e that no episode end cuts (the last step may end one)
    done = np.asarray(batch.done)  # [T, E]
    starts = [
        (t, e)
        for t in range(0, STEPS - SEGMENT + 1, SEGMENT)
        for e in range(ENVS)
        if not done[t : t + SEGMENT - 1, e].any()
    ]
    at = lambda tree, t, e: jax.tree.map(lambda x: x[t, e], tree)
    value = jax.jit(lambda a, b: segment_value(env, a, b, enemy_weight))
    values = np.array(
        [float(value(at(state, t, e), at(next_state, t + SEGMENT - 1, e))) for t, e in starts]
    )
    order = rng.permutation(len(starts))
    pairs = []
    for i, j in zip(order[0::2], order[1::2], strict=False):
        if abs(values[i] - values[j]) > TIE_MARGIN:
            pairs.append((starts[i], starts[j], values[i], values[j]))
        if len(pairs) == HELD_OUT:
            break

    score = jax.jit(jax.vmap(jax.vmap(lambda s, a: agent_contributions(env, s, a))))
    scores, rated = (np.asarray(x) for x in score(state, batch.actions))  # [T, E, N]
    strict = (scores[..., :, None] != scores[..., None, :]) & rated[..., :, None]
    strict &= rated[..., None, :]
    candidates = np.argwhere(strict.any((-1, -2)))
    steps = [tuple(int(x) for x in c) for c in rng.permutation(candidates)[:HELD_OUT]]
    if len(pairs) < HELD_OUT or len(steps) < HELD_OUT:
        raise ValueError(
            f"the rollout gives {len(pairs)} strict segment pairs and {len(steps)} ranked "
            f"steps; {HELD_OUT} of each are needed"
        )
    host = jax.device_get((state, next_state, batch.actions))
    return {"pairs": pairs, "steps": steps, "scores": scores, "rated": rated, "host": host}


def pair_agreement(label: np.ndarray, valid: np.ndarray, oracle_a: np.ndarray) -> float | None:
    """Agreement of pair answers (P(first preferred)) with the oracle's strict choice."""
    if not valid.any():
        return None
    return float(((label == oracle_a.astype(np.float32)) & valid).sum() / valid.sum())


def ranking_agreement(
    label: np.ndarray, valid: np.ndarray, scores: np.ndarray, rated: np.ndarray
) -> float | None:
    """Agreement over the ally pairs the oracle orders strictly, of answered steps:
    ``label``/``valid`` ``[K, N, N]`` pair matrices, ``scores``/``rated`` ``[K, N]``."""
    answered = valid.any((-1, -2))
    oracle_above = scores[:, :, None] > scores[:, None, :]
    scored = oracle_above & rated[:, :, None] & rated[:, None, :] & answered[:, None, None]
    if not scored.any():
        return None
    agree = scored & valid & (label == 1.0)
    return float(agree.sum() / scored.sum())


def _scripted_answers(q: dict, mistake: float, enemy_weight: float):
    """The array teacher's answers with ``mistake`` flips: what the training runs used."""
    import jax
    import jax.numpy as jnp

    from jaxmarl_llm.lm.teachers import TeacherNoise, agent_rankings, pair_preferences
    from jaxmarl_llm.methods.dpm.online import TIE_MARGIN

    noise = TeacherNoise(mistake=mistake, equal_margin=TIE_MARGIN).validate()
    k_pair, k_rank = jax.random.split(jax.random.PRNGKey(SEED + 1))
    va = jnp.array([p[2] for p in q["pairs"]])
    vb = jnp.array([p[3] for p in q["pairs"]])
    pairs = jax.device_get(pair_preferences(k_pair, va, vb, noise))
    t, e = np.array(q["steps"]).T
    ranks = jax.device_get(agent_rankings(k_rank, jnp.asarray(q["scores"][t, e]), noise))
    return (pairs.label, pairs.valid), (ranks.label, ranks.valid)


def _model_answers(env, q: dict, kind: str, n: int, max_tokens: int, retries: int):
    """A local model's answers to the first ``n`` queries of each type, through the
    appendix E prompts, the parsers with retries and the label store; and the seconds
    spent asking (model load excluded) with the store's hit count."""
    import jax

    from envs.capabilities import SceneDescriber, require
    from jaxmarl_llm.lm.backend import SamplingParams
    from jaxmarl_llm.lm.factory import make_backend
    from jaxmarl_llm.lm.labeling import LabelingPolicy
    from jaxmarl_llm.methods.dpm import text

    describer = require(env, SceneDescriber, needed_by="DPM's text queries")
    state, next_state, actions = q["host"]
    params = SamplingParams(max_tokens=max_tokens, temperature=0.0, seed=SEED)
    policy = LabelingPolicy(max_retries=retries)
    backend = make_backend(kind, store=str(STORE))
    try:
        pairs = q["pairs"][:n]
        prompts = text.trajectory_prompts(
            describer, state, next_state, [((*a, SEGMENT), (*b, SEGMENT)) for a, b, _, _ in pairs]
        )
        values = np.array([(va, vb) for _, _, va, vb in pairs])
        t0 = time.perf_counter()
        pair_label, pair_valid, pair_report = text.ask_trajectories(
            backend, prompts, values, params, policy
        )
        pair_s = time.perf_counter() - t0
        steps = q["steps"][:n]
        one = lambda tree, t, e: jax.tree.map(lambda x: x[t, e], tree)
        prompts = [
            text.agent_prompt(
                describer, one(state, t, e), one(next_state, t, e), actions[t, e], [0, 1, 2]
            )
            for t, e in steps
        ]
        t, e = np.array(steps).T
        t0 = time.perf_counter()
        rank_label, rank_valid, rank_report = text.ask_rankings(
            backend, prompts, q["scores"][t, e], [0, 1, 2], 3, params, policy
        )
        rank_s = time.perf_counter() - t0
        stats = backend.stats()
    finally:
        backend.close()
    return (
        (pair_label, pair_valid, pair_report, pair_s),
        (rank_label, rank_valid, rank_report, rank_s),
        stats,
    )


def _row(query_set: str, source: str, accuracy, abstention, per_s, n, command) -> dict:
    return {
        "query_set": query_set,
        "source": source,
        "accuracy": accuracy,
        "abstention": abstention,
        "labels_per_s": per_s,
        "n": n,
        "command": command,
    }


def measure(sources: list[str], lm_queries: int, max_tokens: int, retries: int) -> list[dict]:
    import envs
    from jaxmarl_llm.config import load_config

    enemy_weight = float(load_config(CONFIG, []).shaping.kwargs.enemy_damage_weight)
    env = envs.make_array_env("smax:3m")
    q = held_out_queries(env, enemy_weight)
    oracle_a = np.array([va > vb for _, _, va, vb in q["pairs"]])
    t, e = np.array(q["steps"]).T
    scores, rated = q["scores"][t, e], q["rated"][t, e]
    traj, agent = QUERY_SETS["trajectory"]["name"], QUERY_SETS["agent"]["name"]
    base = "python experiments/dpm_label_sources.py measure"
    old = _old_rows()
    rows = []
    for source in sources:
        command = f"{base} --sources '{source}'"
        if source in MODELS:
            command += f" --lm-queries {lm_queries} --max-tokens {max_tokens} --retries {retries}"
            (pl, pv, pr, ps), (rl, rv, rr, rs), stats = _model_answers(
                env, q, MODELS[source], lm_queries, max_tokens, retries
            )
            n = lm_queries
            # labels per second only where this call generated them (a store replay is not
            # the model's speed): else the value the generating call recorded
            fresh = stats["hits"] == 0
            pair_rate = pr.answered / ps if fresh else old.get((traj, source))
            rank_rate = rr.answered / rs if fresh else old.get((agent, source))
            print(f"{source}: {stats}, pair {pr.as_dict()}, rank {rr.as_dict()}")
            rows.append(
                _row(traj, source, pair_agreement(pl, pv, oracle_a[:n]), pr.abstained / n,
                     pair_rate, n, command)
            )  # fmt: skip
            rows.append(
                _row(agent, source, ranking_agreement(rl, rv, scores[:n], rated[:n]),
                     rr.abstained / n, rank_rate, n, command)
            )  # fmt: skip
            continue
        mistake = SCRIPTED.get(source, 0.0)
        _scripted_answers(q, mistake, enemy_weight)  # compiles: not the teacher's speed
        t0 = time.perf_counter()
        (pl, pv), (rl, rv) = _scripted_answers(q, mistake, enemy_weight)
        per_s = 2 * HELD_OUT / (time.perf_counter() - t0)  # both sets
        n = HELD_OUT
        rows.append(_row(traj, source, pair_agreement(pl, pv, oracle_a), 1 - pv.mean(), per_s,
                         n, command))  # fmt: skip
        rv = rv & rated[:, :, None] & rated[:, None, :]  # unrated allies: no answer
        rows.append(_row(agent, source, ranking_agreement(rl, rv, scores, rated),
                         1 - rv.any((-1, -2)).mean(), per_s, n, command))  # fmt: skip
    return rows


def _old_rows() -> dict:
    if not OUT.exists():
        return {}
    rows = json.loads(OUT.read_text()).get("sources", [])
    return {(r["query_set"], r["source"]): r["labels_per_s"] for r in rows}


def _eval_at(run: Path, update: int) -> list[float]:
    """Each seed's greedy test win rate at ``update`` in ``run``'s eval.csv."""
    with (run / "eval.csv").open() as f:
        row = next((r for r in csv.DictReader(f) if int(r["update"]) == update), None)
    if row is None:
        raise ValueError(f"{run / 'eval.csv'} has no evaluation at update {update}")
    seeds = sorted(k for k in row if k.startswith("eval_win_rate/seed"))
    return [float(row[k]) for k in seeds]


def _total_timesteps(run: Path) -> int:
    from omegaconf import OmegaConf

    return int(OmegaConf.load(run / "config.yaml").algo.total_timesteps)


def training(accuracy: dict[str, float]) -> list[dict]:
    """One row per stored run, each at update ``COMPARE_UPDATE``: the noise-free teacher
    (D1's 1M-step run) and the ladder runs under ``experiments/results/dpm/labels/``;
    ``accuracy``: measured label accuracy by source (mean of the two query sets)."""
    baseline = float(np.mean(_eval_at(ROOT / BASELINE[1], COMPARE_UPDATE)))
    runs = [("heuristic oracle", ROOT / NOISE_FREE_RUN, f"python experiments/run.py {CONFIG}")]
    for source, mistake in SCRIPTED.items():
        run = RUNS / f"mistake_{mistake}"
        if not (run / "eval.csv").exists():
            continue
        command = LADDER_COMMAND.format(config=CONFIG, mistake=mistake)
        if _total_timesteps(run) != COMPARE_UPDATE * STEPS_PER_UPDATE:  # a longer run, stopped
            command = (
                f"python experiments/run.py {CONFIG} shaping.kwargs.mistake={mistake} "
                f"(stopped after its update-{COMPARE_UPDATE} evaluation)"
            )
        runs.append((source, run, command))
    rows = []
    for source, run, command in runs:
        per_seed = _eval_at(run, COMPARE_UPDATE)
        rows.append(
            {
                "env": "smax:3m",
                "source": source,
                "label_accuracy": accuracy.get(source),
                "metric": "test win",
                "final": float(np.mean(per_seed)),
                "final_per_seed": per_seed,
                "baseline_name": BASELINE[0],
                "baseline": baseline,
                "seeds": len(per_seed),
                "env_steps": COMPARE_UPDATE * STEPS_PER_UPDATE,
                "command": command,
                "result_dir": str(run.relative_to(ROOT)),
            }
        )
    return rows


def store_run(run_dir: Path) -> None:
    """Copy a finished ladder run's small files into ``RUNS`` (no checkpoints)."""
    out = RUNS / run_dir.name
    out.mkdir(parents=True, exist_ok=True)
    for name in ("summary.json", "config.yaml", "eval.csv", "feedback.json", "win_curve.png"):
        if (run_dir / name).exists():
            shutil.copy2(run_dir / name, out / name)


def write(sources: list[dict]) -> None:
    by_source: dict[str, list[float]] = {}
    for r in sources:
        if r["accuracy"] is not None:
            by_source.setdefault(r["source"], []).append(r["accuracy"])
    accuracy = {s: float(np.mean(a)) for s, a in by_source.items() if len(a) == 2}
    queries = [
        {**qs, "held_out": HELD_OUT, "how_built": HOW_BUILT.format(seed=SEED)}
        for qs in QUERY_SETS.values()
    ]
    out = {"method": "dpm", "queries": queries, "sources": sources,
           "training": training(accuracy)}  # fmt: skip
    OUT.parent.mkdir(parents=True, exist_ok=True)
    OUT.write_text(json.dumps(out, indent=1) + "\n")
    print(f"wrote {OUT}")


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    sub = p.add_subparsers(dest="command", required=True)
    m = sub.add_parser("measure", help="label quality of each source on the held-out queries")
    m.add_argument("--sources", nargs="+", default=list(SOURCES), choices=SOURCES)
    m.add_argument("--lm-queries", type=int, default=16, help="queries of each type per model")
    m.add_argument("--max-tokens", type=int, default=96)
    m.add_argument("--retries", type=int, default=2)
    t = sub.add_parser("training", help="the training rows, from stored runs")
    t.add_argument("--store", nargs="*", type=Path, default=[], help="ladder run folders to copy")
    args = p.parse_args(argv)
    old = json.loads(OUT.read_text())["sources"] if OUT.exists() else []
    if args.command == "measure":
        if not 1 <= args.lm_queries <= HELD_OUT:
            p.error(f"--lm-queries must be in [1, {HELD_OUT}]")
        new = measure(args.sources, args.lm_queries, args.max_tokens, args.retries)
        kept = [r for r in old if r["source"] not in args.sources]
        order = {s: i for i, s in enumerate(SOURCES)}
        rows = sorted([*kept, *new], key=lambda r: (r["query_set"], order[r["source"]]))
    else:
        for run in args.store:
            store_run(run)
        rows = old
    write(rows)
    return 0


if __name__ == "__main__":
    sys.exit(main())

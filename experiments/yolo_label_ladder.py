"""YOLO-MARL's rung of the label-source ladder on LBF: how good must a planning function be?

    python experiments/yolo_label_ladder.py measure [--lm gemma smollm2]   # label quality
    python experiments/yolo_label_ladder.py train [--levels 0.6 0.9 ...] [key=value ...]
    python experiments/yolo_label_ladder.py collect [key=value ...]       # training rows

The queries are a fixed set of LBF states (half from uniform-random rollouts, half from
rollouts that follow the reference plan, seeded); a label is the task one agent is assigned
there, and a source's accuracy is its agreement with the reference plan (the heuristic
oracle) per (state, agent). Sources: the reference plan; the reference plan made wrong on a
fraction 1 - p of (state, agent) pairs (``planner=scripted_noisy``, p = 60..90%); the
planning functions Gemma 3 270M and SmolLM2-135M-Instruct write through the sandbox with
retries (an LM that gets no function compiled abstains on every query). ``labels_per_s`` is
the compiled planner's rate (jitted, batched over the queries); an LM's generation wall time
is reported apart (``generation_s``).

``train`` runs MAPPO on LBF (``yolo_lbf_mappo``, Table 1's settings) from each scripted
level, and from each LM whose code compiled, into ``runs/yolo/ladder/<source>/``;
``collect`` writes the training rows against Table 1's stored MAPPO pair (the reference
plan and MAPPO alone). Everything goes to ``experiments/results/labels/yolo.json`` (the
shared ladder schema).
"""

from __future__ import annotations

import argparse
import json
import shutil
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
OUT = ROOT / "experiments" / "results" / "labels" / "yolo.json"
LM_RECORDS = ROOT / "experiments" / "results" / "yolo" / "labels"
RUNS = ROOT / "runs" / "yolo" / "ladder"
ENV = "lbf:8x8-2p-2f-coop"
QUERY_SET = "LBF states, task per agent"
HELD_OUT = 512
SEED = 0
LEVELS = (0.6, 0.7, 0.8, 0.9)
LMS = {"gemma": "Gemma 3 270M", "smollm2": "SmolLM2-135M-Instruct"}
# the env steps each held-out pool's rollouts run for (16 envs each), before sampling
ROLLOUT_STEPS = 200
ROLLOUT_ENVS = 16


def scripted_name(p: float) -> str:
    return f"scripted {round(p * 100)}%"


def held_out_states(aenv, tasks, plan, seed: int = SEED, n: int = HELD_OUT):
    """``n`` LBF states: ``n / 2`` from uniform-random rollouts and ``n / 2`` from rollouts
    that pick, uniformly, an action carrying out the reference plan's task."""
    import jax
    import jax.numpy as jnp

    agents, num_actions = aenv.num_agents, aenv.num_actions

    def rollout(key, follow: bool):
        _, st = jax.vmap(aenv.reset)(jax.random.split(key, ROLLOUT_ENVS))

        def step(st, k):
            k_act, k_env = jax.random.split(k)
            avail = jax.vmap(aenv.avail_actions)(st)

            def matching(s):
                t = plan.tasks(s)
                return jnp.stack(
                    [tasks.matches(s, t, jnp.full((agents,), b)) for b in range(num_actions)], -1
                )

            good = jax.vmap(matching)(st.env_state) & avail if follow else avail
            good = jnp.where(good.any(-1, keepdims=True), good, avail)
            a = jax.random.categorical(k_act, jnp.where(good, 0.0, -1e9))
            res = jax.vmap(aenv.step)(jax.random.split(k_env, ROLLOUT_ENVS), st, a)
            return res.state, st.env_state

        _, visited = jax.lax.scan(step, st, jax.random.split(key, ROLLOUT_STEPS))
        return jax.tree.map(lambda x: x.reshape((-1, *x.shape[2:])), visited)

    pools = []
    key = jax.random.PRNGKey(seed)
    for follow in (False, True):
        key, k_roll, k_pick = jax.random.split(key, 3)
        visited = jax.jit(rollout, static_argnums=1)(k_roll, follow)
        total = jax.tree.leaves(visited)[0].shape[0]
        pick = jax.random.choice(k_pick, total, (n // 2,), replace=False)
        pools.append(jax.tree.map(lambda x, pick=pick: x[pick], visited))
    return jax.tree.map(lambda a, b: jnp.concatenate([a, b]), *pools)


def score(planner, states, truth, num_tasks: int) -> dict:
    """Agreement with ``truth`` over the (state, agent) labels in range; labels per second
    of the jitted, batched planner (compile excluded, best of 5)."""
    import jax
    import numpy as np

    batched = jax.jit(jax.vmap(planner))
    labels = np.asarray(batched(states))
    walls = []
    for _ in range(5):
        start = time.perf_counter()
        jax.block_until_ready(batched(states))
        walls.append(time.perf_counter() - start)
    valid = (labels >= 0) & (labels < num_tasks)
    answered = int(valid.sum())
    agree = (labels == np.asarray(truth)) & valid
    return {
        "accuracy": float(agree.sum() / answered) if answered else None,
        "abstention": float(1 - valid.mean()),
        "labels_per_s": float(answered / min(walls)),
        "n": int(labels.size),
    }


def ask_lm(aenv, backend: str) -> tuple[object | None, dict, float]:
    """The LM's compiled plan (or None), its record and the generation wall time; the
    answers are kept in ``runs/yolo/ladder/<backend>/yolo/answers.sqlite`` (a rerun replays
    them) and the record under ``experiments/results/yolo/labels/<backend>/``."""
    from jaxmarl_llm.methods.yolo.sandbox import UnsafeCode
    from jaxmarl_llm.methods.yolo.shaper import YOLOConfig, obtain_plan

    artifacts = RUNS / f"{backend}_plan" / "yolo"
    cfg = YOLOConfig(planner="backend", backend=backend, attempts=3)
    start = time.perf_counter()
    try:
        _, plan, record = obtain_plan(aenv, cfg, artifacts)
    except UnsafeCode as e:
        plan, record = None, {"error": str(e)}
    wall = time.perf_counter() - start
    dest = LM_RECORDS / backend
    dest.mkdir(parents=True, exist_ok=True)
    for name in ("record.json", "planning_function.py"):
        if (artifacts / name).exists():
            shutil.copy(artifacts / name, dest / name)
    return plan, record, wall


def measure(lms: list[str]) -> None:
    import jax

    import envs
    from jaxmarl_llm.methods.yolo.noisy_plan import noisy_planning
    from jaxmarl_llm.methods.yolo.shaper import YOLOConfig, obtain_plan

    aenv = envs.make_array_env(ENV)
    tasks, plan, _ = obtain_plan(aenv, YOLOConfig(), None)
    num_tasks = max(tasks.constants.values()) + 1
    states = held_out_states(aenv, tasks, plan)
    truth = jax.jit(jax.vmap(plan.tasks))(states)
    command = "python experiments/yolo_label_ladder.py measure"
    rows = [{"query_set": QUERY_SET, "source": "heuristic oracle",
             **score(plan.tasks, states, truth, num_tasks), "command": command}]  # fmt: skip
    for p in LEVELS:
        noisy = noisy_planning(plan.tasks, num_tasks, p, seed=0)  # the training runs' seed
        rows.append({"query_set": QUERY_SET, "source": scripted_name(p),
                     **score(noisy, states, truth, num_tasks), "command": command})  # fmt: skip
    for backend in lms:
        lm_plan, record, wall = ask_lm(aenv, backend)
        row = {"query_set": QUERY_SET, "source": LMS[backend], "generation_s": round(wall, 1),
               "refusals": record.get("refusals", []), "error": record.get("error")}  # fmt: skip
        if lm_plan is None:
            row.update(accuracy=None, abstention=1.0, labels_per_s=0.0, n=HELD_OUT * 2)
        else:
            row.update(score(lm_plan.tasks, states, truth, num_tasks))
        rows.append({**row, "command": f"{command} --lm {backend}"})
    data = _load()
    data["queries"] = [{
        "name": QUERY_SET, "env": ENV, "kind": "task assigned per agent (planning function)",
        "held_out": HELD_OUT,
        "how_built": f"{HELD_OUT // 2} states from uniform-random and {HELD_OUT // 2} from "
        f"reference-plan-following rollouts ({ROLLOUT_ENVS} envs x {ROLLOUT_STEPS} steps each), "
        f"sampled without replacement, PRNGKey({SEED})",
    }]  # fmt: skip
    measured = {r["source"] for r in rows}
    data["sources"] = [r for r in data["sources"] if r["source"] not in measured] + rows
    _save(data)
    for r in rows:
        print(json.dumps({k: v for k, v in r.items() if k != "command"}))


def _load() -> dict:
    if OUT.exists():
        return json.loads(OUT.read_text())
    return {"method": "yolo", "queries": [], "sources": [], "training": []}


def _save(data: dict) -> None:
    OUT.parent.mkdir(parents=True, exist_ok=True)
    OUT.write_text(json.dumps(data, indent=2) + "\n")


def source_overrides(source: str) -> list[str]:
    """The ``run.py`` overrides of ``yolo_lbf_mappo`` that train from ``source`` (a ladder
    run folder name: ``scripted60`` or an LM backend)."""
    if source.startswith("scripted"):
        p = int(source.removeprefix("scripted")) / 100
        return ["shaping.kwargs.planner=scripted_noisy", f"shaping.kwargs.plan_accuracy={p}"]
    code = LM_RECORDS / source / "planning_function.py"
    return ["shaping.kwargs.planner=file", f"shaping.kwargs.answer_file={code}"]


def train(levels: list[float], lms: list[str], overrides: list[str]) -> None:
    from jaxmarl_llm.runner import run_into

    sources = [f"scripted{round(p * 100)}" for p in levels]
    for backend in lms:
        record = LM_RECORDS / backend / "record.json"
        if record.exists() and "error" not in json.loads(record.read_text()):
            sources.append(backend)
        else:
            print(f"{LMS[backend]}: no planning function compiled; its run is the baseline")
    for source in sources:
        common = ["compare_with=[]", "progress=false", *source_overrides(source), *overrides]
        run_into("yolo_lbf_mappo", common, RUNS / source, f"[ladder] {source}")


def _figures():
    import importlib.util

    path = ROOT / "experiments" / "yolo_figures.py"
    spec = importlib.util.spec_from_file_location("yolo_figures", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def greedy_at(eval_csv: Path, mark: int, total: int) -> float | None:
    """Table 1's greedy value: the mean over seeds of the evaluations in the last 5% of
    ``total`` steps before ``mark``."""
    import numpy as np

    from jaxmarl_llm.plotting import load_metrics, seed_columns

    if not eval_csv.exists():
        return None
    header, data = load_metrics(eval_csv)
    steps = data["env_steps"]
    rows = (steps > mark - _figures().EVAL_WINDOW * total) & (steps <= mark * 1.001)
    cols = seed_columns(header, "eval_return")
    return float(np.mean([data[c][rows] for c in cols])) if rows.any() else None


def collect() -> None:
    """Training rows: return at 2M of each finished ladder run (the mean over seeds of the
    updates in the last 2.5% of steps, and greedy, as in Table 1) against the stored MAPPO
    pair of Table 1 (``lbf.json``: the same settings, the reference plan and MAPPO alone)."""
    import numpy as np

    from jaxmarl_llm.plotting import load_metrics, seed_columns

    figures = _figures()
    results = ROOT / "experiments" / "results" / "yolo"
    table = {r["config"]: r for r in json.loads((results / "lbf.json").read_text())}
    mark, total = "2000000", 2_000_000
    pair = results / "yolo_lbf_mappo"
    base_dir = pair / "baseline_mappo_lbf"
    base = table["mappo_lbf"]["marks"][mark]
    base_greedy = greedy_at(base_dir / "eval.csv", total, total)
    accuracy = {r["source"]: r["accuracy"] for r in _load()["sources"]}
    common = {"env": ENV, "metric": "train ret", "baseline_name": "MAPPO alone (mappo_lbf)",
              "baseline": base, "baseline_greedy": base_greedy}  # fmt: skip
    oracle_summary = json.loads((pair / "summary.json").read_text())
    rows = [{
        **common, "source": "heuristic oracle", "label_accuracy": accuracy.get("heuristic oracle"),
        "final": table["yolo_lbf_mappo"]["marks"][mark],
        "final_per_seed": oracle_summary["final_return_per_seed"],  # the last update's
        "final_greedy": greedy_at(pair / "eval.csv", total, total), "seeds": 3,
        "env_steps": int(oracle_summary["env_steps"]),
        "command": "python experiments/yolo_figures.py lbf --only mappo",
        "result_dir": str(pair.relative_to(ROOT)),
    }]  # fmt: skip
    runs = {scripted_name(p): f"scripted{round(p * 100)}" for p in LEVELS}
    runs.update({name: backend for backend, name in LMS.items()})
    for source, folder in runs.items():
        run_dir = RUNS / folder
        if not (run_dir / "summary.json").exists():
            continue
        header, data = load_metrics(run_dir / "metrics.csv")
        steps = data["env_steps"]
        window = (steps > total - figures.WINDOW * steps[-1]) & (steps <= total * 1.001)
        per_seed = [float(data[c][window].mean()) for c in seed_columns(header, "episode_return")]
        summary = json.loads((run_dir / "summary.json").read_text())
        dest = results / "ladder" / folder
        dest.mkdir(parents=True, exist_ok=True)
        for name in ("summary.json", "config.yaml", "eval.csv", "curve.png"):
            if (run_dir / name).exists():
                shutil.copy(run_dir / name, dest / name)
        if folder.startswith("scripted"):
            option = f"--levels {int(folder.removeprefix('scripted')) / 100}"
        else:
            option = f"--levels --lm {folder}"
        rows.append({
            **common, "source": source, "label_accuracy": accuracy.get(source),
            "final": float(np.mean(per_seed)), "final_per_seed": per_seed,
            "final_greedy": greedy_at(run_dir / "eval.csv", total, int(steps[-1])),
            "seeds": len(per_seed), "env_steps": int(summary["env_steps"]),
            "command": f"python experiments/yolo_label_ladder.py train {option}",
            "result_dir": str(dest.relative_to(ROOT)),
        })  # fmt: skip
    base_summary = json.loads((base_dir / "summary.json").read_text())
    for backend, name in LMS.items():
        record = LM_RECORDS / backend / "record.json"
        trained = any(r["source"] == name for r in rows)
        if trained or not record.exists() or "error" not in json.loads(record.read_text()):
            continue
        rows.append({
            **common, "source": name, "label_accuracy": None, "final": base,
            "final_per_seed": base_summary["final_return_per_seed"],  # the last update's
            "final_greedy": base_greedy, "seeds": 3, "env_steps": int(base_summary["env_steps"]),
            "note": "no planning function compiled after 3 attempts: no bonus, so training "
            "from this source is MAPPO alone, the baseline run",
            "command": "python experiments/yolo_label_ladder.py measure --lm " + backend,
            "result_dir": str(base_dir.relative_to(ROOT)),
        })  # fmt: skip
    data = _load()
    collected = {r["source"] for r in rows}
    kept = [  # rows of runs made on another machine: only their stored copies are here
        r for r in data.get("training", [])
        if r["source"] not in collected and (ROOT / r["result_dir"]).exists()
    ]  # fmt: skip
    data["training"] = rows + kept
    _save(data)
    for r in rows:
        print(r["source"], r["label_accuracy"], r["final"], r["final_greedy"], "baseline", base)


def main(argv=None) -> int:
    p = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    p.add_argument("step", choices=("measure", "train", "collect"))
    p.add_argument("--lm", nargs="*", default=[], choices=sorted(LMS))
    p.add_argument("--levels", nargs="*", type=float, default=list(LEVELS))
    p.add_argument("overrides", nargs="*", help="train: key=value overrides for every run")
    args = p.parse_intermixed_args(argv)
    if args.step == "measure":
        measure(args.lm)
    elif args.step == "train":
        train(args.levels, args.lm, args.overrides)
    else:
        collect()
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

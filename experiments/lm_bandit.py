"""Does an adapter on the top K blocks learn as much per sample as one on every block?
A text bandit over salad:A action prompts (``jaxmarl_llm.methods.verco.bandit_prompts``:
the rewarded action is the scripted teacher's job for the agent), learned by the TWOSOME
trainer's policy and PPO step (``bandit_learner``) for each ``algo.lora_layers`` setting,
learning rate and seed.

    python experiments/lm_bandit.py --model tiny --layers all last:1 --lrs 1e-3 --seeds 0 \\
        --updates 5
    python experiments/lm_bandit.py --model smollm2 --layers all last:2 last:4 last:8 \\
        --lrs 1e-4 3e-4 1e-3 --seeds 0 1 2 --updates 100 --batch 8 [--tune-seed 0]

``--tune-seed S`` sweeps the learning rates on seed S alone and runs the other seeds at each
setting's best rate there (the same sweep for every setting, in a third of the grid's runs
for three rates).

Writes under ``--out``: ``runs.jsonl`` (one line per run: settings, curve, final held-out
accuracy, wall time; runs already there are kept and not run again), ``reward.png``
(reward of the sampled actions and held-out accuracy against samples, the best learning
rate of each setting, mean and min-max band over seeds) and ``summary.md`` (per setting:
best learning rate, final held-out accuracy and the area under the reward curve with their
seed spread, and the smallest K within noise of ``all``).
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
OUT = ROOT / "experiments" / "results" / "verco" / "lm_bandit"
SMOOTH = 10  # updates in the plot's moving average of the sampled reward

WITHIN_NOISE = (
    "a setting is within noise of `all` when, at each one's best learning rate, both the "
    "mean reward over the run (area under the reward-against-samples curve, divided by the "
    "samples) and the final held-out accuracy differ from `all`'s by at most the larger of "
    "the two settings' standard deviations over seeds"
)


KEY = ("model", "layers", "lr", "seed", "updates", "batch", "envs", "steps", "test_prompts")


def run_key(row: dict) -> tuple:
    return tuple(row[k] for k in KEY)


def load_runs(path: Path) -> list[dict]:
    if not path.exists():
        return []
    return [json.loads(line) for line in path.read_text().splitlines() if line.strip()]


def run_one(args, env, model, train, test, layers: str, lr: float, seed: int) -> dict:
    import numpy as np

    from jaxmarl_llm.methods.verco.bandit_learner import BanditLearner, bandit_config

    t0 = time.perf_counter()
    cfg = bandit_config(args.model, layers, lr, args.batch, seed, args.max_prompt_tokens)
    learner = BanditLearner(cfg, env, model, train, test)
    curve = learner.run(args.updates, args.eval_every)
    rewards = [r["reward"] for r in curve[1:]]
    return {
        "model": args.model,
        "layers": layers,
        "lr": lr,
        "seed": seed,
        "updates": args.updates,
        "batch": args.batch,
        "envs": args.envs,
        "steps": args.steps,
        "test_prompts": args.test_prompts,
        "train_prompts": len(train),
        "held_out_prompts": len(test),
        "curve": curve,
        "mean_reward": sum(rewards) / len(rewards),
        "final_test_accuracy": curve[-1]["test_accuracy"],
        "final_test_prob": curve[-1]["test_prob"],
        "start_test_accuracy": curve[0]["test_accuracy"],
        # the first update compiles
        "update_s": float(np.median([r["update_s"] for r in curve[2:] or curve[1:]])),
        "wall_s": time.perf_counter() - t0,
    }


def best_lr(runs: list[dict]) -> float:
    """The learning rate of the highest mean reward over its runs, among the rates run on
    the most seeds (after a ``--tune-seed`` sweep, the rate the other seeds ran at)."""
    import numpy as np

    by_lr = {}
    for r in runs:
        by_lr.setdefault(r["lr"], []).append(r["mean_reward"])
    most = max(len(v) for v in by_lr.values())
    return max((lr for lr, v in by_lr.items() if len(v) == most), key=lambda x: np.mean(by_lr[x]))


def settings_summary(runs: list[dict]) -> dict[str, dict]:
    """Per layers setting: the best learning rate (``best_lr``) and, there, the mean and
    standard deviation over seeds of the mean reward and of the final held-out accuracy."""
    import numpy as np

    out = {}
    for layers in dict.fromkeys(r["layers"] for r in runs):
        mine = [r for r in runs if r["layers"] == layers]
        lr = best_lr(mine)
        seeds = [r for r in mine if r["lr"] == lr]
        std = lambda xs: float(np.std(xs, ddof=1)) if len(xs) > 1 else 0.0  # noqa: E731
        reward = [r["mean_reward"] for r in seeds]
        acc = [r["final_test_accuracy"] for r in seeds]
        out[layers] = {
            "lr": lr,
            "seeds": len(seeds),
            "mean_reward": float(np.mean(reward)),
            "mean_reward_std": std(reward),
            "test_accuracy": float(np.mean(acc)),
            "test_accuracy_std": std(acc),
            "start_test_accuracy": float(np.mean([r["start_test_accuracy"] for r in seeds])),
            "update_s": float(np.mean([r["update_s"] for r in seeds])),
            "runs": seeds,
        }
    return out


def within_noise(a: dict, b: dict) -> bool:
    return all(
        abs(a[k] - b[k]) <= max(a[f"{k}_std"], b[f"{k}_std"])
        for k in ("mean_reward", "test_accuracy")
    )


def smallest_within_noise(summary: dict) -> str | None:
    if "all" not in summary:
        return None
    tops = sorted((int(k.split(":")[1]), k) for k in summary if k.startswith("last:"))
    for _, layers in tops:
        if within_noise(summary[layers], summary["all"]):
            return layers
    return None


def write_markdown(path: Path, summary: dict, meta: dict) -> None:
    lines = [
        f"# Text bandit: `algo.lora_layers` on {meta['model']}",
        "",
        f"{meta['train_prompts']} training and {meta['test_prompts']} held-out prompts of "
        f"salad:A ({meta['rewarded_actions']} distinct rewarded actions); {meta['updates']} "
        f"updates of {meta['batch']} samples; learning rates {meta['lrs']}.",
        "",
        "| layers | best lr | seeds | mean reward (AUC / samples) | held-out accuracy "
        "(start -> end) | s / update (median) |",
        "|---|---|---|---|---|---|",
    ]
    for layers, s in summary.items():
        lines.append(
            f"| {layers} | {s['lr']:g} | {s['seeds']} | {s['mean_reward']:.3f} ± "
            f"{s['mean_reward_std']:.3f} | {s['start_test_accuracy']:.3f} -> "
            f"{s['test_accuracy']:.3f} ± {s['test_accuracy_std']:.3f} | {s['update_s']:.2f} |"
        )
    best = smallest_within_noise(summary)
    verdict = (
        f"Smallest K within noise of `all`: **{best}**."
        if best
        else "No `last:K` setting measured is within noise of `all`."
        if "all" in summary
        else "`all` was not run: no comparison."
    )
    lines += ["", f"± is the standard deviation over seeds; {WITHIN_NOISE}.", "", verdict, ""]
    path.write_text("\n".join(lines))


def write_json(path: Path, summary: dict, meta: dict) -> None:
    """The summary's numbers, one row per setting (its runs stay in ``runs.jsonl``), and
    the smallest K within noise of ``all``."""
    rows = [{"layers": layers, **{k: v for k, v in s.items() if k != "runs"}}
            for layers, s in summary.items()]  # fmt: skip
    best = smallest_within_noise(summary)
    out = {**meta, "within_noise": WITHIN_NOISE, "smallest_within_noise": best, "rows": rows}
    path.write_text(json.dumps(out, indent=1))


def plot(path: Path, summary: dict) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    import numpy as np

    fig, (left, right) = plt.subplots(1, 2, figsize=(11, 4))
    for layers, s in summary.items():
        runs = s["runs"]
        samples = np.array([r["samples"] for r in runs[0]["curve"][1:]])
        window = min(SMOOTH, max(1, len(samples) // 4))
        kernel = np.ones(window) / window
        rewards = np.array(
            [np.convolve([r["reward"] for r in run["curve"][1:]], kernel, "valid") for run in runs]
        )
        x = samples[window - 1 :]
        label = f"{layers} (lr {s['lr']:g})"
        (line,) = left.plot(x, rewards.mean(0), label=label)
        left.fill_between(x, rewards.min(0), rewards.max(0), color=line.get_color(), alpha=0.2)
        evals = [r for r in runs[0]["curve"] if "test_accuracy" in r]
        ex = [r["samples"] for r in evals]
        acc = np.array([[r["test_accuracy"] for r in run["curve"] if "test_accuracy" in r]
                        for run in runs])  # fmt: skip
        right.plot(ex, acc.mean(0), color=line.get_color(), label=label)
        right.fill_between(ex, acc.min(0), acc.max(0), color=line.get_color(), alpha=0.2)
    left.set(xlabel="samples", ylabel=f"reward of sampled actions (up to {SMOOTH}-update mean)")
    right.set(xlabel="samples", ylabel="held-out greedy accuracy")
    left.legend()
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--model", default="tiny", help="tiny | smollm2 | gemma3_270m | a .gguf path")
    p.add_argument("--layers", nargs="+", default=["all", "last:2", "last:4", "last:8"])
    p.add_argument("--lrs", nargs="+", type=float, default=[1e-4, 3e-4, 1e-3])
    p.add_argument("--seeds", nargs="+", type=int, default=[0, 1, 2])
    p.add_argument(
        "--tune-seed",
        type=int,
        default=None,
        help="sweep --lrs on this seed only; the other seeds at the best rate",
    )
    p.add_argument("--updates", type=int, default=100)
    p.add_argument("--batch", type=int, default=8, help="prompts (samples) per update")
    p.add_argument("--eval-every", type=int, default=10, help="updates between held-out evals")
    p.add_argument("--test-prompts", type=int, default=128, help="held-out prompts")
    p.add_argument("--envs", type=int, default=32, help="kitchens played for the prompts")
    p.add_argument("--steps", type=int, default=200, help="steps of play for the prompts")
    p.add_argument("--max-prompt-tokens", type=int, default=96)
    p.add_argument("--out", type=Path, default=OUT)
    args = p.parse_args(argv)

    import envs
    from jaxmarl_llm.methods.verco.bandit_prompts import kitchen_bandit, split_prompts
    from jaxmarl_llm.methods.verco.models import load_policy_model

    env = envs.make("salad:A")
    prompts, dropped = kitchen_bandit(env, args.envs, args.steps, seed=0)
    fraction = min(0.5, args.test_prompts / len(prompts))
    train, test = split_prompts(prompts, fraction, seed=0)
    rewarded = len({p.rewarded for p in prompts})
    print(f"{len(prompts)} prompts ({dropped} dropped: more than one job), {rewarded} "
          f"rewarded actions; {len(train)} train, {len(test)} held out", flush=True)  # fmt: skip
    model = load_policy_model(args.model)

    args.out.mkdir(parents=True, exist_ok=True)
    runs_path = args.out / "runs.jsonl"
    done = {run_key(r): r for r in load_runs(runs_path)}
    if args.tune_seed is not None and args.tune_seed not in args.seeds:
        p.error(f"--tune-seed {args.tune_seed} is not one of --seeds {args.seeds}")
    runs = []

    def run(layers: str, lr: float, seed: int) -> dict:
        key = run_key({**vars(args), "layers": layers, "lr": lr, "seed": seed})
        if key not in done:
            done[key] = run_one(args, env, model, train, test, layers, lr, seed)
            with runs_path.open("a") as f:
                f.write(json.dumps(done[key]) + "\n")
        r = done[key]
        runs.append(r)
        print(f"{layers} lr {lr:g} seed {seed}: mean reward {r['mean_reward']:.3f}, "
              f"held-out accuracy {r['start_test_accuracy']:.3f} -> "
              f"{r['final_test_accuracy']:.3f}, {r['update_s']:.2f} s/update, "
              f"{r['wall_s']:.0f} s", flush=True)  # fmt: skip
        return r

    for layers in args.layers:
        sweep_seeds = args.seeds if args.tune_seed is None else [args.tune_seed]
        swept = [run(layers, lr, seed) for lr in args.lrs for seed in sweep_seeds]
        if args.tune_seed is not None:
            lr = best_lr(swept)
            for seed in args.seeds:
                if seed != args.tune_seed:
                    run(layers, lr, seed)
    summary = settings_summary(runs)
    swept_on = "" if args.tune_seed is None else f" (swept on seed {args.tune_seed})"
    meta = {"model": args.model, "train_prompts": len(train), "test_prompts": len(test),
            "rewarded_actions": rewarded, "updates": args.updates, "batch": args.batch,
            "lrs": ", ".join(f"{x:g}" for x in args.lrs) + swept_on}  # fmt: skip
    write_markdown(args.out / "summary.md", summary, meta)
    write_json(args.out / "summary.json", summary, meta)
    plot(args.out / "reward.png", summary)
    print((args.out / "summary.md").read_text())
    return 0


if __name__ == "__main__":
    sys.exit(main())

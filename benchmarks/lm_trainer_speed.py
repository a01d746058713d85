"""Verco's LM trainer with adapters on every block against adapters on the top K blocks
over a kept frozen trunk: env steps/s of the same training work.

    python benchmarks/lm_trainer_speed.py --json
    python benchmarks/lm_trainer_speed.py --model tiny --num-steps 4 --iterations 2 --json

Both arms train the same config (Verco with the teammate-observation messages on
``--env``, or TWOSOME with ``--messages none``; same seed, kitchens and steps), one with
``algo.lora_layers=all`` and one with ``--top`` (``last:K``), sharing one loaded model.
Each iteration is a rollout of ``--num-envs`` kitchens for ``--num-steps`` steps and a PPO
update. The arms take turns iteration by iteration, so a change of the machine's load falls
on both; the first
iteration of each (compiling) is not timed. Reported per arm over the timed iterations:
env steps/s, tokens/s (the prompt and candidate positions the rollout scored, the critic's
prompt positions and the update's minibatch positions, counted alike in both arms, per
second of iteration time), the time split and, for the top-K arm, the trunk cache's hit
rate; ``speedup`` is the ratio of env steps/s. The 1-minute load average is read before
and after. ``--prompt-length-step`` is the rounding of the prompts' padded length (the
policy's default; ``algo.max_prompt_tokens``, 96, pads every prompt to the full length).
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import time

from jaxmarl_llm.config import build_config
from jaxmarl_llm.methods.verco.clock import TIME_SPLIT, hit_rate
from jaxmarl_llm.methods.verco.lm_policy import PROMPT_LENGTH_STEP
from jaxmarl_llm.methods.verco.models import load_policy_model
from jaxmarl_llm.methods.verco.trainer import Trainer, make_salad_env


def arm_config(args, lora_layers: str):
    return build_config(
        {
            "name": "lm_trainer_speed",
            "seed": args.seed,
            "env": {"name": args.env},
            "algo": {
                "name": "twosome" if args.messages == "none" else "verco",
                "model": args.model,
                "messages": args.messages,
                "num_envs": args.num_envs,
                "num_steps": args.num_steps,
                "total_timesteps": args.num_envs * args.num_steps * args.iterations,
                "minibatch_size": args.minibatch_size,
                "lora_layers": lora_layers,
                "trunk_cache_mb": args.trunk_cache_mb,
            },
            "progress": False,
            "plot": False,
        }
    )


def summarize(rows: list[dict], steps_per_iteration: int) -> dict:
    wall = sum(r["iteration_s"] for r in rows)
    tokens = sum(r["lm_tokens"] + r["update_tokens"] for r in rows)
    hits, misses = sum(r["trunk_hits"] for r in rows), sum(r["trunk_misses"] for r in rows)
    return {
        "env_steps_per_s": round(steps_per_iteration * len(rows) / wall, 4),
        "tokens_per_s": round(tokens / wall, 1),
        "iteration_s": [round(r["iteration_s"], 2) for r in rows],
        "decisions": [int(r["decisions"]) for r in rows],
        "time_split_s": {k: round(sum(r[k] for r in rows), 2) for k in TIME_SPLIT},
        "trunk_hit_rate": round(hit_rate(hits, misses), 4) if hits + misses else None,
    }


def main(argv=None) -> dict:
    p = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    p.add_argument("--model", default="smollm2")
    p.add_argument("--env", default="salad:A")
    p.add_argument("--top", default="last:4", help="the arm against lora_layers=all")
    p.add_argument("--num-envs", type=int, default=2)
    p.add_argument("--num-steps", type=int, default=16)
    p.add_argument("--iterations", type=int, default=3, help="per arm; the first not timed")
    p.add_argument("--minibatch-size", type=int, default=16)
    p.add_argument("--trunk-cache-mb", type=float, default=1024.0)
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--messages", choices=("teammate_observation", "none"),
                   default="teammate_observation")  # fmt: skip
    p.add_argument("--prompt-length-step", type=int, default=PROMPT_LENGTH_STEP)
    p.add_argument("--json", action="store_true")
    args = p.parse_args(argv)
    if args.prompt_length_step <= 0:
        p.error("--prompt-length-step must be > 0")
    if args.iterations < 2:
        p.error("--iterations must be at least 2 (the first compiles and is not timed)")

    load_before = os.getloadavg()[0]
    model = load_policy_model(args.model, args.seed)
    arms = {"all": "all", "top": args.top}
    trainers, states, rows = {}, {}, {name: [] for name in arms}
    for name, layers in arms.items():
        cfg = arm_config(args, layers)
        trainers[name] = Trainer(cfg, make_salad_env(cfg), model)
        trainers[name].policy.length_step = args.prompt_length_step
        states[name] = trainers[name].init(0)
    t0 = time.perf_counter()
    for iteration in range(args.iterations):
        for name, trainer in trainers.items():
            states[name], metrics = trainer.iteration(states[name], 0, iteration)
            if iteration > 0:
                rows[name].append(metrics)
    steps = trainers["all"].steps_per_iteration
    result = {name: summarize(rows[name], steps) for name in arms}
    cache = trainers["top"].policy.trunk_cache.stats()
    out = {
        "model": model.name,
        "env": args.env,
        "num_envs": args.num_envs,
        "num_steps": args.num_steps,
        "timed_iterations": args.iterations - 1,
        "top": args.top,
        "messages": args.messages,
        "prompt_length_step": args.prompt_length_step,
        "all_env_steps_per_s": result["all"]["env_steps_per_s"],
        "top_env_steps_per_s": result["top"]["env_steps_per_s"],
        "all_tokens_per_s": result["all"]["tokens_per_s"],
        "top_tokens_per_s": result["top"]["tokens_per_s"],
        "trunk_hit_rate": result["top"]["trunk_hit_rate"],
        "speedup": round(result["top"]["env_steps_per_s"] / result["all"]["env_steps_per_s"], 3),
        "arms": result,
        "trunk_cache": {k: cache[k] for k in ("entries", "bytes", "evictions")},
        "wall_s": round(time.perf_counter() - t0, 1),
        "load_avg_1m": [round(load_before, 2), round(os.getloadavg()[0], 2)],
        "cpu": platform.processor() or platform.machine(),
        "cpu_threads": os.cpu_count(),
    }
    if args.json:
        print(json.dumps(out))
    else:
        for key, value in out.items():
            print(f"{key}: {value}")
    return out


if __name__ == "__main__":
    main()

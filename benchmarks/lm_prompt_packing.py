"""The LM policy's calls with prompts packed to their batch's length against prompts padded
to ``algo.max_prompt_tokens``: prompts/s of the rollout's model work on real kitchen prompts.

    python benchmarks/lm_prompt_packing.py --json
    python benchmarks/lm_prompt_packing.py --messages teammate_observation --json
    python benchmarks/lm_prompt_packing.py --model tiny --prompts 8 --repeats 2 --json

The prompts are the action prompts of ``--prompts`` decisions of random play on ``--env``
(without messages, as TWOSOME's, or with the teammate's observation as the message). One
LM policy (``--lora-layers``) scores them and values them (``score_prompts`` and
``values``: the rollout's calls) in batches of ``2 * --num-envs`` prompts, once with the
policy's packing and once with every prompt padded to the full length; the two take turns
``--repeats`` times, each from empty caches, the first turn of each compiling and not
timed. Reported: prompts/s of each, their ratio (``speedup``), the mean padded length of
the packed calls, and the log-probs' largest difference between the two.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import time

import jax
import numpy as np

from jaxmarl_llm.config import build_config
from jaxmarl_llm.methods.verco.clock import Clock
from jaxmarl_llm.methods.verco.lm_policy import PROMPT_LENGTH_STEP, LMPolicy
from jaxmarl_llm.methods.verco.message_sources import TeammateObservation
from jaxmarl_llm.methods.verco.models import load_policy_model
from jaxmarl_llm.methods.verco.policy import ValueHead
from jaxmarl_llm.methods.verco.rollout import action_prompt, env_functions
from jaxmarl_llm.methods.verco.trainer import make_salad_env


def kitchen_prompts(env, policy: LMPolicy, count: int, messages: bool, seed: int) -> list[str]:
    """The action prompts of the first ``count`` decisions of random play."""
    reset, avail, step = env_functions(env)
    envs_ = 8
    state = reset(jax.random.split(jax.random.PRNGKey(seed), envs_))
    rng = np.random.default_rng(seed)
    said = TeammateObservation()
    out: list[str] = []
    for t in range(10_000):
        mask = np.asarray(avail(state))
        obs = policy.text.text_observations(state)
        for i in range(envs_):
            for a in range(2):
                if mask[i, a].sum() > 1 and len(out) < count:
                    message = said.messages([obs[i][1 - a]])[0] if messages else ""
                    out.append(action_prompt(obs[i][a], message))
        if len(out) >= count:
            return out
        acts = np.array([[rng.choice(np.flatnonzero(m)) for m in row] for row in mask], np.int32)
        keys = jax.random.split(jax.random.PRNGKey(seed + t + 1), envs_)
        state = step(keys, state, acts)[0]
    raise RuntimeError(f"random play gave fewer than {count} decisions")


def one_pass(policy: LMPolicy, lora, value_params, prompts: list[str]):
    """Score and value ``prompts`` in rollout-sized batches from empty caches."""
    policy.features.clear()
    if policy.split is not None:
        policy.trunk_cache = type(policy.trunk_cache)(0)
    clock, scores, lengths = Clock(), [], []
    t0 = time.perf_counter()
    for i in range(0, len(prompts), policy.rows):
        batch = prompts[i : i + policy.rows]
        lengths.append(policy.packed(batch)[0].shape[1])
        got = policy.score_prompts(lora, batch, clock)
        scores.extend(got[p] for p in batch)
        policy.values(value_params, batch, clock)
    return time.perf_counter() - t0, np.stack(scores), float(np.mean(lengths))


def main(argv=None) -> dict:
    p = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    p.add_argument("--model", default="smollm2")
    p.add_argument("--env", default="salad:A")
    p.add_argument("--messages", choices=("none", "teammate_observation"), default="none")
    p.add_argument("--lora-layers", default="last:4")
    p.add_argument("--num-envs", type=int, default=2)
    p.add_argument("--prompts", type=int, default=48)
    p.add_argument("--repeats", type=int, default=3, help="turns of each; the first not timed")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--json", action="store_true")
    args = p.parse_args(argv)
    if args.repeats < 2:
        p.error("--repeats must be at least 2 (the first compiles and is not timed)")

    cfg = build_config({
        "name": "lm_prompt_packing",
        "env": {"name": args.env},
        "algo": {"name": "twosome", "model": args.model, "messages": "none",
                 "num_envs": args.num_envs, "lora_layers": args.lora_layers},
        "progress": False,
        "plot": False,
    })  # fmt: skip
    load_before = os.getloadavg()[0]
    model = load_policy_model(args.model, args.seed)
    env = make_salad_env(cfg)
    policy = LMPolicy(cfg.algo, env, model)
    prompts = kitchen_prompts(env, policy, args.prompts, args.messages != "none", args.seed)
    from jaxmarl_llm.lm.lora import init_lora

    k_lora, k_value = jax.random.split(jax.random.PRNGKey(args.seed))
    lora = init_lora(k_lora, model.params, tuple(cfg.algo.lora_targets), int(cfg.algo.lora_rank),
                     float(cfg.algo.lora_alpha), layers=policy.adapted_layers)  # fmt: skip
    value_params = ValueHead(tuple(cfg.algo.value_hidden)).init(
        k_value, np.zeros((1, model.hidden_size), np.float32)
    )
    steps = {"packed": PROMPT_LENGTH_STEP, "full_length": int(cfg.algo.max_prompt_tokens)}
    seconds = {name: [] for name in steps}
    scores, lengths = {}, {}
    for turn in range(args.repeats):
        for name, step in steps.items():
            policy.length_step = step
            s, scores[name], lengths[name] = one_pass(policy, lora, value_params, prompts)
            if turn > 0:
                seconds[name].append(s)
    rate = {name: len(prompts) * len(v) / sum(v) for name, v in seconds.items()}
    out = {
        "model": model.name,
        "env": args.env,
        "messages": args.messages,
        "lora_layers": args.lora_layers,
        "prompts": len(prompts),
        "prompt_tokens_mean": round(float(np.mean([len(policy.tokens_of(q)) for q in prompts])), 1),
        "packed_length_mean": round(lengths["packed"], 1),
        "full_length": lengths["full_length"],
        "packed_prompts_per_s": round(rate["packed"], 3),
        "full_length_prompts_per_s": round(rate["full_length"], 3),
        "speedup": round(rate["packed"] / rate["full_length"], 3),
        "seconds": {k: [round(x, 2) for x in v] for k, v in seconds.items()},
        "max_abs_log_prob_diff": float(np.abs(scores["packed"] - scores["full_length"]).max()),
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

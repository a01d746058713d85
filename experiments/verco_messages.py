"""Verco's message module on a real model: SFT of the message adapter on the scripted
teacher's salad messages, then held-out accuracy and decoding speed.

    python experiments/verco_messages.py --map A --pairs 300 --epochs 2 [--model smollm2]

Collects (observation text of agent i -> teacher message of agent i) pairs from
epsilon-random rollouts of the scripted team, holds out whole episodes, trains a rank-8
LoRA on the attention q/v projections of the frozen model by SFT on the message tokens,
and writes ``report.json`` (model, data, losses, held-out exact match and teacher-forced
token accuracy before and after SFT, messages per second of greedy decoding without the
message cache) to ``--out`` (default ``experiments/results/verco/messages_<map>/``), and
the adapter to ``--adapter-out`` (default ``experiments/models/verco_messages_<map>/``).
With ``--lora-layers last:K`` both defaults end in ``_lastK``:
``python experiments/verco_messages.py --map A --lora-layers last:2`` makes the adapter
``verco_salad_a`` loads (its runs train ``algo.lora_layers=last:2``).

``--lm-teacher-states N`` also asks the model itself the paper's teacher prompt on N
rollout states (answers kept in ``teacher_labels.sqlite`` there, so a rerun replays them)
and reports parse retries, abstentions, budget cuts and agreement with the scripted
teacher; ``--lm-teacher-only`` runs just that check into an existing report.
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


def load_model(name: str):
    """(DecoderLM, base params, tokenizer, model description) of a local GGUF model."""
    from jaxmarl_llm.lm.decoder import init_cache
    from jaxmarl_llm.methods.verco.policy import DecoderLM

    if name == "smollm2":
        from jaxmarl_llm.lm.llama.backend import LlamaBackend

        backend = LlamaBackend(None, chat=False)
    elif name == "gemma":
        from jaxmarl_llm.lm.gemma import GemmaBackend

        backend = GemmaBackend()
    else:
        raise ValueError(f"unknown model {name!r}; valid: smollm2, gemma")
    described = {"name": backend.model, "gguf": str(backend.gguf_path), "family": name}
    return DecoderLM(backend._module, init_cache), backend.params, backend.tokenizer, described


def lm_teacher_check(env, model_name: str, num_states: int, seed: int, store_path: Path) -> dict:
    """Ask the model the paper's teacher prompt on rollout states (answers kept in the
    label store at ``store_path``) and compare its messages with the scripted teacher's."""
    import jax
    import numpy as np

    from jaxmarl_llm.lm.factory import make_backend
    from jaxmarl_llm.methods.verco.messages import _rollout_fn
    from jaxmarl_llm.methods.verco.teacher import lm_teacher_messages, scripted_messages

    states, decisions = _rollout_fn(env, env.max_steps)(
        jax.random.split(jax.random.key(seed + 1), num_states), np.float32(0.3)
    )
    episode, step = np.nonzero(np.asarray(decisions))
    rows = np.random.default_rng(seed).permutation(len(episode))[:num_states]
    chosen = jax.tree.map(lambda x: np.asarray(x)[episode[rows], step[rows]], states)
    backend = make_backend(model_name, store=store_path)
    start = time.perf_counter()
    messages, report = lm_teacher_messages(backend, env, chosen)
    seconds = time.perf_counter() - start
    scripted = scripted_messages(env, chosen)
    answered = [(m, s) for m, s in zip(messages, scripted, strict=True) if m is not None]
    agree = [a == b for m, s in answered for a, b in zip(m, s, strict=True)]
    return {
        "backend": {"kind": backend.kind, "model": backend.model},
        "states": len(rows),
        "seconds": seconds,
        "report": report.as_dict(),
        "agreement_with_scripted_teacher": float(np.mean(agree)) if agree else None,
        "examples": [
            {"lm_teacher": m, "scripted_teacher": s}
            for m, s in zip(messages[:5], scripted[:5], strict=True)
        ],
        "store": backend.stats(),
    }


def default_folders(map_name: str, lora_layers: str) -> tuple[Path, Path]:
    """The report's and the adapter's folders. An adapter on the top K blocks gets its own
    (``..._lastK``): a run with ``lora_layers=all`` needs the one on every block."""
    tag = map_name + ("" if lora_layers == "all" else "_" + lora_layers.replace(":", ""))
    return (
        ROOT / "experiments" / "results" / "verco" / f"messages_{tag}",
        ROOT / "experiments" / "models" / f"verco_messages_{tag}",
    )


def main(argv=None) -> int:
    p = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    p.add_argument("--map", choices=["A", "B"], default="A")
    p.add_argument("--pairs", type=int, default=300, help="training pairs (at most)")
    p.add_argument("--held-out", type=int, default=64, help="held-out pairs (at most)")
    p.add_argument("--epochs", type=int, default=2)
    p.add_argument("--episodes", type=int, default=24, help="rollout episodes to draw from")
    p.add_argument("--epsilon", type=float, default=0.3)
    p.add_argument("--batch-size", type=int, default=8)
    p.add_argument("--learning-rate", type=float, default=1e-3)
    p.add_argument("--rank", type=int, default=8)
    p.add_argument(
        "--lora-layers",
        default="all",
        help="the blocks the adapter covers: all, or last:K (the top K; a run loads it with "
        "algo.lora_layers=last:K)",
    )
    p.add_argument("--max-tokens", type=int, default=24, help="decoding budget per message")
    p.add_argument("--model", choices=["smollm2", "gemma"], default="smollm2")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument(
        "--lm-teacher-states",
        type=int,
        default=0,
        help="also ask the model itself as the LM teacher on this many rollout states",
    )
    p.add_argument(
        "--lm-teacher-only",
        action="store_true",
        help="run only the LM-teacher check and add it to an existing report.json",
    )
    p.add_argument("--out", type=Path, default=None)
    p.add_argument("--adapter-out", type=Path, default=None)
    args = p.parse_args(argv)
    default_out, default_adapter_out = default_folders(args.map, args.lora_layers)
    out = args.out or default_out
    adapter_out = args.adapter_out or default_adapter_out

    import jax
    import numpy as np

    from envs.salad.env import SaladKitchen
    from jaxmarl_llm.lm.lora import init_lora, parse_lora_layers, save_adapters
    from jaxmarl_llm.methods.verco.messages import (
        PROMPT_FORMAT,
        SFTConfig,
        collect_message_pairs,
        evaluate_messages,
        generate_messages,
        split_by_episode,
        train_message_adapter,
    )
    from jaxmarl_llm.methods.verco.teacher import SCRIPTED_TEACHER

    env = SaladKitchen(args.map)
    if args.lm_teacher_only:
        report = json.loads((out / "report.json").read_text())
        states = max(args.lm_teacher_states, 1)
        store = out / "teacher_labels.sqlite"
        report["lm_teacher"] = lm_teacher_check(env, args.model, states, args.seed, store)
        (out / "report.json").write_text(json.dumps(report, indent=1))
        print(f"LM teacher: {report['lm_teacher']['report']}")
        return 0
    start = time.perf_counter()
    pairs = collect_message_pairs(env, jax.random.key(args.seed), args.episodes, args.epsilon)
    train, held = split_by_episode(pairs, 0.25, seed=args.seed)
    rng = np.random.default_rng(args.seed)
    train = train.select(rng.permutation(len(train))[: args.pairs])
    held = held.select(rng.permutation(len(held))[: args.held_out])
    collect_seconds = time.perf_counter() - start
    print(f"pairs: {len(pairs)} collected, {len(train)} train, {len(held)} held out")

    lm, base_params, tokenizer, model = load_model(args.model)
    try:
        layers = parse_lora_layers(args.lora_layers, lm.module.cfg.n_layers, "--lora-layers")
    except ValueError as e:
        p.error(str(e))
    lora = init_lora(
        jax.random.key(args.seed), base_params, ("q", "v"), rank=args.rank, layers=layers
    )
    before = evaluate_messages(lm, base_params, lora, tokenizer, held, args.max_tokens)
    print(f"before SFT: exact {before['exact_match']:.3f} token {before['token_accuracy']:.3f}")
    config = SFTConfig(args.epochs, args.batch_size, args.learning_rate, args.seed)
    lora, history = train_message_adapter(lm, base_params, lora, tokenizer, train, config)
    print(
        f"SFT: {history['steps']} steps in {history['seconds']:.0f} s, "
        f"epoch losses {history['epoch_losses']}"
    )
    after = evaluate_messages(lm, base_params, lora, tokenizer, held, args.max_tokens)
    # compiled now: time decoding alone
    t0 = time.perf_counter()
    again = generate_messages(lm, base_params, lora, tokenizer, held.observations, args.max_tokens)
    decode_seconds = time.perf_counter() - t0
    print(
        f"after SFT: exact {after['exact_match']:.3f} token {after['token_accuracy']:.3f}; "
        f"{len(held) / decode_seconds:.1f} messages/s"
    )

    out.mkdir(parents=True, exist_ok=True)
    if adapter_out.exists():
        shutil.rmtree(adapter_out)
    save_adapters(adapter_out, lora)
    report = {
        "model": model,
        "map": args.map,
        "label_source": SCRIPTED_TEACHER,
        "prompt_format": PROMPT_FORMAT,
        "args": {k: str(v) if isinstance(v, Path) else v for k, v in vars(args).items()},
        "data": {
            "collected_pairs": len(pairs),
            "train_pairs": len(train),
            "held_out_pairs": len(held),
            "distinct_train_messages": len(set(train.messages)),
            "collect_seconds": collect_seconds,
        },
        "sft": {k: v for k, v in history.items()},
        "held_out_before": before,
        "held_out_after": after,
        "decoding": {
            "messages": len(held),
            "seconds": decode_seconds,
            "messages_per_second": len(held) / decode_seconds,
            "batch_size": 16,
            "max_tokens": args.max_tokens,
            "cuts": again.report(),
            "device": str(jax.devices()[0]),
        },
    }
    if args.lm_teacher_states > 0:
        report["lm_teacher"] = lm_teacher_check(
            env, args.model, args.lm_teacher_states, args.seed, out / "teacher_labels.sqlite"
        )
        print(f"LM teacher: {report['lm_teacher']['report']}")
    (out / "report.json").write_text(json.dumps(report, indent=1))
    print(f"wrote {out / 'report.json'}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

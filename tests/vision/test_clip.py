"""Flax CLIP: agreement with transformers' PyTorch ``CLIPModel`` (ViT) and with OpenAI's
PyTorch ``ModifiedResNet`` CLIP code, weight-loading errors, jit/scan use and the tokenizer.

``tests/vision/data/tiny_clip/`` (a tiny random HF checkpoint) and ``tiny_clip_rn/`` (a
tiny random OpenAI-layout ResNet CLIP), each with reference outputs, come from
``benchmarks/clip_reference.py``; these tests need no torch.
"""

from __future__ import annotations

import functools
import gzip
import json
import pathlib
import shutil

import jax
import jax.numpy as jnp
import numpy as np
import pytest

pytest.importorskip("safetensors")

from jaxmarl_llm.errors import RunError  # noqa: E402
from jaxmarl_llm.vision.clip import (  # noqa: E402
    CLIPConfig,
    CLIPTokenizer,
    CLIPWeightsError,
    config_from_openai,
    config_to_hf,
    cosine,
    encode_image,
    encode_text,
    fit_images,
    init_params,
    load_clip,
    logits,
    param_shapes,
    params_from_hf,
    params_to_hf,
    quick_gelu,
    read_file,
    read_tensors,
    save_clip,
)

DATA = pathlib.Path(__file__).parent / "data" / "tiny_clip"
DATA_RN = pathlib.Path(__file__).parent / "data" / "tiny_clip_rn"
TOL = dict(atol=1e-5, rtol=1e-5)


@pytest.fixture(scope="module")
def ref():
    with np.load(DATA / "reference.npz") as f:
        return {k: f[k] for k in f.files}


@pytest.fixture(scope="module")
def clip():
    return load_clip(DATA)


def test_config_read_from_checkpoint(clip):
    assert clip.config == CLIPConfig.tiny()
    assert clip.tokenizer is None  # the tiny checkpoint ships no tokenizer files


def test_matches_transformers_reference(clip, ref):
    cfg, p = clip.config, clip.params
    np.testing.assert_allclose(encode_image(cfg, p, ref["images"]), ref["image_embeds"], **TOL)
    np.testing.assert_allclose(encode_text(cfg, p, ref["tokens"]), ref["text_embeds"], **TOL)
    short = encode_text(cfg, p, ref["tokens_short"])  # [2, 9]: fewer positions than context
    np.testing.assert_allclose(short, ref["text_embeds_short"], **TOL)
    out = logits(cfg, p, ref["images"], ref["tokens"])
    np.testing.assert_allclose(out, ref["logits_per_image"], **TOL)
    # the reference is not degenerate: embeddings differ between rows
    assert np.ptp(ref["logits_per_image"]) > 0.1


def test_padding_after_eot_is_ignored(clip, ref):
    tokens = ref["tokens"].copy()
    tokens[tokens == 0] = 7  # any token after <|endoftext|>: causal mask, EOT pooling
    np.testing.assert_allclose(
        encode_text(clip.config, clip.params, tokens), ref["text_embeds"], **TOL
    )


def test_argmax_pooling_matches_first_eot(clip, ref):
    # OpenAI's rule (largest id) agrees with pooling at <|endoftext|> when it is the max id
    cfg = CLIPConfig(**{**clip.config.__dict__, "eot_token_id": None})
    np.testing.assert_allclose(
        encode_text(cfg, clip.params, ref["tokens"]), ref["text_embeds"], **TOL
    )


def test_encode_image_jits_once_and_runs_in_scan(clip, ref):
    traces = []

    def fn(params, images):
        traces.append(images.shape)
        return encode_image(clip.config, params, images)

    enc = jax.jit(fn)
    images = jnp.asarray(ref["images"])
    for k in range(3):
        out = enc(clip.params, images * (1.0 - 0.1 * k))
    assert len(traces) == 1
    np.testing.assert_allclose(out, encode_image(clip.config, clip.params, images * 0.8), **TOL)

    def step(carry, frames):  # frames: [B, H, W, 3], as rendered inside a training scan
        return carry, encode_image(clip.config, clip.params, frames)

    frames = jnp.stack([images, images[::-1]])  # [T=2, B, H, W, 3]
    _, embs = jax.jit(lambda f: jax.lax.scan(step, 0, f))(frames)  # [T, B, D]
    np.testing.assert_allclose(embs[0], ref["image_embeds"], **TOL)
    np.testing.assert_allclose(embs[1], ref["image_embeds"][::-1], **TOL)


def test_cosine_and_quick_gelu():
    a = jnp.array([[1.0, 0.0], [3.0, 4.0]])
    b = jnp.array([[2.0, 0.0], [0.0, -1.0], [4.0, 3.0]])
    want = [[1.0, 0.0, 0.8], [0.6, -0.8, 0.96]]
    np.testing.assert_allclose(cosine(a, b), want, atol=1e-6)
    x = jnp.array([-2.0, 0.0, 1.5])
    np.testing.assert_allclose(quick_gelu(x), np.array(x) / (1 + np.exp(-1.702 * np.array(x))))


def test_vit_b32_preset_parameter_count():
    cfg = CLIPConfig.vit_b32()
    n = sum(int(np.prod(s.shape)) for s in jax.tree.leaves(param_shapes(cfg)))
    assert n == 151_277_313  # OpenAI's ViT-B/32
    assert (cfg.vision_width, cfg.text_width, cfg.embed_dim, cfg.num_patches) == (768, 512, 512, 49)


def test_fit_images_resizes_short_side_and_centre_crops():
    frames = np.zeros((2, 40, 80, 3), np.float32)  # [B, H, W, 3], wide frames
    frames[:, :, 20:60] = 1.0  # a white centre square: exactly the crop after resizing
    out = fit_images(jnp.asarray(frames), 32)
    assert out.shape == (2, 32, 32, 3)
    np.testing.assert_allclose(out[:, 4:-4, 4:-4], 1.0, atol=1e-5)  # away from the edges
    np.testing.assert_allclose(
        fit_images(jnp.asarray(frames[:, :32, :32]), 32), frames[:, :32, :32]
    )
    grey = fit_images(jnp.full((1, 50, 30, 3), 0.25), 32)  # tall frame, constant colour
    assert grey.shape == (1, 32, 32, 3)
    np.testing.assert_allclose(grey, 0.25, atol=1e-6)


def test_resnet_matches_openai_reference():
    with np.load(DATA_RN / "reference.npz") as f:
        ref = {k: f[k] for k in f.files}
    clip = load_clip(DATA_RN / "model.safetensors", config=CLIPConfig.tiny_resnet())
    images = ref["images_u8"].astype(np.float32) / 255.0  # [B, 64, 64, 3]
    got = jax.jit(lambda p, x: encode_image(clip.config, p, x))(clip.params, images)
    np.testing.assert_allclose(got, ref["image_embeds"], **TOL)
    np.testing.assert_allclose(
        encode_text(clip.config, clip.params, ref["tokens"]), ref["text_embeds"], **TOL
    )


def test_openai_config_inferred_from_shapes():
    cfg = config_from_openai(read_file(DATA_RN / "model.safetensors"))
    tiny = CLIPConfig.tiny_resnet()
    fields = ("vision_kind", "image_size", "resnet_layers", "resnet_width")
    fields += ("embed_dim", "context_length", "vocab_size", "text_width", "text_layers")
    fields += ("text_mlp_dim", "eot_token_id")
    assert {f: getattr(cfg, f) for f in fields} == {f: getattr(tiny, f) for f in fields}
    # OpenAI's head rules (32 * resnet_width // 64, text_width // 64); the tiny model uses 2
    assert (cfg.vision_heads, cfg.text_heads) == (1, 1)
    with pytest.raises(CLIPWeightsError, match=r"mlp\.c_fc\.weight.*\(32, 128\).*\(32, 64\)"):
        load_clip(DATA_RN / "model.safetensors", config=CLIPConfig.tiny())


def test_rn50_preset_matches_openai_shapes():
    shapes = param_shapes(CLIPConfig.rn50())
    leaves = jax.tree_util.tree_leaves_with_path(shapes)
    # OpenAI's count excludes batch-norm running statistics (buffers in torch)
    n = sum(int(np.prod(v.shape)) for p, v in leaves if p[-1].key not in ("mean", "var"))
    assert n == 102_007_137
    pool = shapes["vision"]["attnpool"]
    assert pool["position_embedding"].shape == (50, 2048)  # 7 x 7 + 1 cells at 224 px
    assert pool["c"]["kernel"].shape == (2048, 1024)


def test_image_shape_checked(clip):
    with pytest.raises(ValueError, match=r"\[B, 32, 32, 3\]"):
        encode_image(clip.config, clip.params, jnp.zeros((1, 16, 16, 3)))


def test_random_init_matches_checkpoint_tree(clip):
    # the tree and shapes only: run op by op, init compiles hundreds of one-op programs
    params = jax.eval_shape(functools.partial(init_params, CLIPConfig.tiny()), jax.random.key(0))
    shapes = jax.tree.map(np.shape, params)
    assert shapes == jax.tree.map(np.shape, clip.params)


def test_missing_path_names_it_and_says_no_download(tmp_path):
    path = tmp_path / "no_such_clip"
    with pytest.raises(CLIPWeightsError) as e:
        load_clip(path)
    assert isinstance(e.value, RunError)
    msg = str(e.value)
    assert str(path) in msg and "no CLIP weights can be downloaded" in msg
    assert "shaping.kwargs.clip_weights=PATH" in msg


def test_shape_mismatch_names_tensor_and_shapes(tmp_path):
    d = tmp_path / "ckpt"
    shutil.copytree(DATA, d)
    hf = json.loads((d / "config.json").read_text())
    hf["vision_config"]["intermediate_size"] = 48
    (d / "config.json").write_text(json.dumps(hf))
    with pytest.raises(CLIPWeightsError) as e:
        load_clip(d)
    msg = str(e.value)
    assert "vision_model.encoder.layers.0.mlp.fc1.weight" in msg
    assert "(32, 64)" in msg and "(32, 48)" in msg


def test_missing_and_extra_tensors_are_errors():
    cfg = CLIPConfig.tiny()
    tensors = read_tensors(DATA)
    del tensors["text_projection.weight"]
    with pytest.raises(CLIPWeightsError, match="text_projection.weight"):
        params_from_hf(cfg, tensors)
    fewer = CLIPConfig(**{**cfg.__dict__, "text_layers": 1})
    with pytest.raises(CLIPWeightsError, match=r"does not use.*text_model\.encoder\.layers\.1\."):
        params_from_hf(fewer, read_tensors(DATA))


# --- tokenizer: a tiny byte-level BPE vocabulary ------------------------------------

PIECES = ["a", "b", "d", "e", "h", "l", "o", "r", "w"]
MERGES = [("h", "e"), ("l", "l"), ("he", "ll"), ("hell", "o</w>"), ("w", "o"), ("wo", "r")]
MERGES += [("wor", "l"), ("worl", "d</w>")]


def tiny_vocab() -> dict[str, int]:
    words = PIECES + [p + "</w>" for p in PIECES] + [",</w>", "!</w>", "1</w>", "2</w>"]
    words += [a + b for a, b in MERGES]
    words += ["<|startoftext|>", "<|endoftext|>"]
    return {w: i for i, w in enumerate(dict.fromkeys(words))}


@pytest.fixture
def tok_dir(tmp_path):
    (tmp_path / "vocab.json").write_text(json.dumps(tiny_vocab()))
    lines = ["#version: 0.2"] + [f"{a} {b}" for a, b in MERGES]
    (tmp_path / "merges.txt").write_text("\n".join(lines) + "\n")
    return tmp_path


def test_tokenizer_on_tiny_vocab(tok_dir):
    v = tiny_vocab()
    tok = CLIPTokenizer.from_directory(tok_dir, context_length=8)
    bos, eos = v["<|startoftext|>"], v["<|endoftext|>"]
    ids = tok(["  Hello,\n\tWORLD! ", "AB12"])
    assert ids.dtype == np.int32 and ids.shape == (2, 8)
    hello = [v["hello</w>"], v[",</w>"], v["world</w>"], v["!</w>"]]
    assert ids[0].tolist() == [bos, *hello, eos, 0, 0]
    assert ids[1].tolist() == [bos, v["a"], v["b</w>"], v["1</w>"], v["2</w>"], eos, 0, 0]
    assert tok.decode(ids[0]) == "hello , world !"
    long = tok("hello " * 10)[0]  # truncated: the last token stays <|endoftext|>
    assert long.tolist() == [bos] + [v["hello</w>"]] * 6 + [eos]


def test_tokenizer_matches_transformers(tok_dir):
    transformers = pytest.importorskip("transformers")
    theirs = transformers.CLIPTokenizer(str(tok_dir / "vocab.json"), str(tok_dir / "merges.txt"))
    ours = CLIPTokenizer.from_directory(tok_dir, context_length=32)
    for text in ["Hello, world!", "hello   WORLD\n12", "who'll ab, drew", "héllo wörld"]:
        want = theirs(text).input_ids
        assert ours.encode_one(text) == want, text


def test_tokenizer_from_openai_bpe_file(tmp_path):
    lines = ["#version: 0.2"] + [f"{a} {b}" for a, b in MERGES]
    with gzip.open(tmp_path / "bpe_simple_vocab_16e6.txt.gz", "wt", encoding="utf-8") as f:
        f.write("\n".join(lines) + "\n")
    tok = CLIPTokenizer.from_directory(tmp_path, context_length=8)
    # OpenAI's ids: 512 byte symbols (plain, then with </w>), the merges, then the specials
    merge_id = {a + b: 512 + i for i, (a, b) in enumerate(MERGES)}
    bos, eos = 512 + len(MERGES), 513 + len(MERGES)
    assert tok.encode_one("Hello World") == [bos, merge_id["hello</w>"], merge_id["world</w>"], eos]
    assert tok.encode_one("!")[1] == 256  # "!" is byte symbol 0; with </w> it is 256 + 0


# --- writing checkpoints: params_to_hf / config_to_hf / save_clip ----------------------


def test_params_to_hf_inverts_params_from_hf(clip):
    tensors = read_tensors(DATA)
    back = params_to_hf(clip.config, clip.params)
    assert set(back) == set(tensors) - {k for k in tensors if k.endswith("position_ids")}
    for name, want in back.items():
        assert want.dtype == np.float32 and want.shape == tensors[name].shape, name
        np.testing.assert_array_equal(want, tensors[name], err_msg=name)
    again = params_from_hf(clip.config, back)
    jax.tree.map(np.testing.assert_array_equal, again, clip.params)


@pytest.mark.parametrize("eot", [99, None], ids=["eot_id", "argmax"])
def test_config_to_hf_round_trip(eot):
    cfg = CLIPConfig(**{**CLIPConfig.tiny().__dict__, "eot_token_id": eot})
    assert CLIPConfig.from_hf(config_to_hf(cfg)) == cfg
    with pytest.raises(ValueError, match="eot_token_id 2"):
        config_to_hf(CLIPConfig(**{**cfg.__dict__, "eot_token_id": 2}))
    with pytest.raises(ValueError, match="ViT"):
        config_to_hf(CLIPConfig.tiny_resnet())


def test_save_clip_round_trip_float32_and_float16(tmp_path, clip):
    params = jax.tree.map(lambda x: np.asarray(x) * 1.5 + 0.01, clip.params)  # not the file's
    save_clip(tmp_path / "f32", clip.config, params)
    got = load_clip(tmp_path / "f32")
    assert got.config == clip.config and got.tokenizer is None
    jax.tree.map(np.testing.assert_array_equal, got.params, params)
    save_clip(tmp_path / "f16", clip.config, params, dtype=np.float16)
    assert read_tensors(tmp_path / "f16")["logit_scale"].dtype == np.float16
    half = load_clip(tmp_path / "f16")
    assert all(x.dtype == np.float32 for x in jax.tree.leaves(half.params))
    close = lambda a, b: np.testing.assert_allclose(a, b, rtol=1e-3, atol=1e-4)  # noqa: E731
    jax.tree.map(close, half.params, params)
    with pytest.raises(ValueError, match="parameter tree"):
        params_to_hf(CLIPConfig(**{**clip.config.__dict__, "text_layers": 1}), params)

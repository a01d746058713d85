"""V-GEPF's football CLIP: experiments/train_clip.py (quick mode and its parts) and the
loader of ``jaxmarl_llm.methods.vgepf.clip_model``."""

import json
import shutil

import jax.numpy as jnp
import numpy as np
import pytest
from scripts import load_script

pytest.importorskip("safetensors")
pytest.importorskip("tokenizers")

from jaxmarl_llm.methods.vgepf import clip_model  # noqa: E402
from jaxmarl_llm.methods.vgepf.skills import SKILL_NAMES, SKILLS  # noqa: E402
from jaxmarl_llm.vision.clip import CLIPTokenizer, CLIPWeightsError, load_clip  # noqa: E402

PER_SKILL_KEYS = {"n_true", "top1", "chance", "top1_of_7", "mean_cos_true", "mean_cos_false"}
PER_SKILL_KEYS |= {"cos_gap", "auc"}


@pytest.fixture(scope="module")
def tc():
    return load_script("experiments/train_clip.py")


# the committed checkpoint (tests that need a trained directory use it: a quick run is
# made once, in the one test below, so test workers do not each repeat it)
COMMITTED = clip_model.default_clip_path()


@pytest.mark.slow
def test_quick_run_writes_a_loadable_clip_and_a_report(tc, tmp_path):
    out = tmp_path / "clip_quick"
    shape = ["--grid", "4", "--vision-width", "48", "--vision-layers", "2"]
    report = tc.main(["--quick", "--out", str(out), *shape, "--vision-heads", "3"])
    assert {p.name for p in out.iterdir()} >= {
        "config.json",
        "model.safetensors",
        "vocab.json",
        "merges.txt",
        "report.json",
        "README.md",
    }
    clip = load_clip(out)
    assert clip.tokenizer is not None
    assert clip.tokenizer.eos_id == clip.config.eot_token_id == clip.config.vocab_size - 1
    on_disk = json.loads((out / "report.json").read_text())
    assert on_disk["heldout"]["per_skill"].keys() == set(SKILL_NAMES)
    for v in on_disk["heldout"]["per_skill"].values():
        assert v.keys() >= PER_SKILL_KEYS
    assert on_disk["dataset"]["train"]["per_skill"].keys() == set(SKILL_NAMES)
    assert len(on_disk["losses"]) == 3 and np.isfinite(on_disk["losses"][-1]["loss"])
    assert on_disk["command"].startswith("python experiments/train_clip.py --quick")
    assert report["config"]["model"]["image_size"] == clip.config.image_size == 32
    c = clip.config
    assert (c.patch_size, c.vision_width, c.vision_layers, c.vision_heads) == (8, 48, 2, 3)
    assert c.vision_mlp_dim == 4 * 48 and c.text_width == 32  # the text tower keeps quick's
    readme = (out / "README.md").read_text()
    assert "| skill |" in readme and "4 x 4 patches of 8 px" in readme
    # --evaluate scores a stored model on the same held-out frames the run held out (the
    # frames are embedded in other batches, so cosines agree to float32 rounding)
    scored = tc.main(["--quick", "--evaluate", str(out)])
    assert scored["heldout"]["summary"] == on_disk["heldout"]["summary"]
    for name, v in scored["heldout"]["per_skill"].items():
        want = on_disk["heldout"]["per_skill"][name]
        assert v == pytest.approx(want, abs=1e-6, nan_ok=True), name


@pytest.mark.parametrize(
    "argv, message",
    [
        (["--image-size", "48", "--grid", "5"], "--image-size 48 must be a multiple of --grid 5"),
        (["--vision-width", "60", "--vision-heads", "8"], "multiple of --vision-heads 8"),
        (["--vision-layers", "0"], "--vision-layers must be positive"),
    ],
)
def test_bad_tower_shape_is_a_clear_error(tc, argv, message):
    with pytest.raises(SystemExit, match=message):
        tc.parse_args(argv)


def test_tower_options_set_the_image_tower_only(tc):
    args = tc.parse_args(["--image-size", "48", "--grid", "6", "--vision-width", "64"])
    assert (args.vision_layers, args.vision_heads, args.vision_mlp) == (3, 4, 256)
    assert (args.image_size, args.grid) == (48, 6)
    # the default options rebuild the committed default model's image tower
    d, c = tc.parse_args([]), load_clip(COMMITTED).config
    assert (d.image_size, d.image_size // d.grid) == (c.image_size, c.patch_size)
    assert (d.vision_width, d.vision_layers, d.vision_heads) == (
        c.vision_width,
        c.vision_layers,
        c.vision_heads,
    )
    assert d.vision_mlp == c.vision_mlp_dim
    cfg = tc.model_config(
        48, 879, grid=6, vision_width=64, vision_layers=2, vision_heads=2, vision_mlp=128
    )
    assert (cfg.image_size, cfg.patch_size, cfg.num_patches) == (48, 8, 36)
    assert (cfg.vision_width, cfg.vision_layers, cfg.vision_heads) == (64, 2, 2)
    assert cfg.vision_mlp_dim == 128
    assert (cfg.text_width, cfg.text_layers, cfg.embed_dim) == (128, 3, 128)


def test_tokenizer_is_clip_layout_and_encodes_every_caption(tc):
    out = COMMITTED
    vocab = json.loads((out / "vocab.json").read_text())
    ids = sorted(vocab.values())
    assert ids == list(range(len(vocab)))  # dense ids
    assert vocab["<|endoftext|>"] == len(vocab) - 1 and vocab["<|startoftext|>"] == len(vocab) - 2
    assert vocab["!"] == 0 and vocab["!</w>"] == 256  # OpenAI's byte-symbol layout
    tok = CLIPTokenizer.from_directory(out, context_length=32)
    for text in tc.CAPTIONS:
        row = tok.encode_one(text)
        assert len(row) <= 32
        assert tok.decode(row + [tok.eos_id]).replace(" ", "") == text.lower().replace(" ", "")
    # words seen in training are single tokens; unseen text still encodes, byte by byte
    assert len(tok.encode_one("blue")) == 3
    assert tok.decode(tok.encode_one("zebra qx")) == "zebra qx"


def test_tokenizer_matches_transformers(tc):
    transformers = pytest.importorskip("transformers")
    out = COMMITTED
    theirs = transformers.CLIPTokenizer(str(out / "vocab.json"), str(out / "merges.txt"))
    ours = CLIPTokenizer.from_directory(out, context_length=32)
    for text in [*tc.CAPTIONS, "The keeper's long pass, 2 players!"]:
        assert ours.encode_one(text) == theirs(text).input_ids, text


def test_contrastive_loss_matches_clip_infonce_on_single_positives(tc):
    rng = np.random.default_rng(0)
    logits = jnp.asarray(rng.normal(size=(4, 4)), jnp.float32)
    eye = jnp.eye(4)
    loss, _ = tc.contrastive_loss(logits, eye)
    ls = lambda x, a: x - np.log(np.exp(x).sum(a, keepdims=True))  # noqa: E731
    x = np.asarray(logits, np.float64)
    want = -0.5 * (np.trace(ls(x, 1)) + np.trace(ls(x, 0))) / 4
    np.testing.assert_allclose(float(loss), want, rtol=1e-5)
    # multi-positive: a row with two true captions targets both equally
    two = jnp.array([[1.0, 1.0, 0.0]])
    i2t = float(tc.contrastive_loss(jnp.array([[5.0, 5.0, -5.0]]), two)[1]["i2t"])
    assert i2t < float(tc.contrastive_loss(jnp.array([[9.0, 1.0, -5.0]]), two)[1]["i2t"])


def test_balance_evens_out_skills(tc):
    rng = np.random.default_rng(0)
    k = len(SKILLS)
    holds = rng.random((3000, k)) < np.linspace(0.03, 0.6, k)  # skill 0 rare (90 frames)
    idx = tc.balance(holds, 1400, 0.125, rng)
    assert abs(len(idx) - 1400) <= 0.05 * 1400
    counts = holds[idx].sum(0)
    assert counts.min() >= 1400 * 0.875 / k  # the rare skill repeats frames to get there
    assert (~holds[idx].any(1)).sum() == round(1400 * 0.125)
    distinct = tc.balance(holds, 1400, 0.125, rng, replace=False)
    assert len(np.unique(distinct)) == len(distinct)
    assert holds[distinct, 0].sum() == holds[:, 0].sum()  # every rare frame, no more


def test_evaluate_scores_a_perfect_and_a_reversed_model(tc):
    k = len(SKILLS)
    holds = np.zeros((2 * k, k), bool)
    holds[np.arange(k), np.arange(k)] = True  # frames 0..6: one skill each; 7..13 none
    cos = np.concatenate([np.eye(k), np.zeros((k, k))]) * 0.5  # [2K, K]
    cos = np.concatenate([cos, np.r_[np.zeros(k), np.ones(k)][:, None]], 1)  # neutral
    good = tc.evaluate(cos, holds)
    for v in good["per_skill"].values():
        assert v["top1"] == v["top1_of_7"] == 1.0 and v["auc"] == 1.0 and v["cos_gap"] > 0
        assert v["chance"] == pytest.approx(1 / k)
    assert good["summary"]["neutral_frames_top1_is_neutral"] == 1.0
    bad = tc.evaluate(-cos, holds)
    assert all(v["top1"] == 0.0 and v["auc"] == 0.0 for v in bad["per_skill"].values())


# --- the loader ---------------------------------------------------------------------------


def test_default_path_is_the_committed_directory():
    path = clip_model.default_clip_path()
    assert path.parts[-3:] == ("experiments", "models", "football_clip")
    assert clip_model.clip_path({}) == path
    assert clip_model.clip_path({"clip_weights": "/x/y"}).as_posix() == "/x/y"


def test_the_96px_clip_stays_loadable():
    clip = clip_model.load_vgepf_clip(
        {
            "clip_weights": str(
                clip_model.REPO_ROOT / "experiments/models/football_clip_vit4x128_96px"
            )
        }
    )
    c = clip.config
    assert (c.image_size, c.patch_size, c.vision_width, c.vision_layers) == (96, 12, 128, 4)
    assert clip_model.instruction_embeddings(clip).shape == (len(SKILLS), c.embed_dim)


def test_committed_clip_loads_and_embeds_the_instructions():
    clip = clip_model.load_vgepf_clip()
    emb = clip_model.instruction_embeddings(clip)
    assert emb.shape == (len(SKILLS), clip.config.embed_dim)
    np.testing.assert_allclose(jnp.linalg.norm(emb, axis=-1), 1.0, rtol=1e-5)


def test_loader_with_kwargs_path(tmp_path):
    shutil.copytree(COMMITTED, tmp_path / "mine")
    clip = clip_model.load_vgepf_clip({"clip_weights": str(tmp_path / "mine")})
    assert clip.path == tmp_path / "mine" and clip.config.image_size == 48


def test_missing_default_says_how_to_train_it(monkeypatch, tmp_path):
    monkeypatch.setattr(clip_model, "default_clip_path", lambda: tmp_path / "absent")
    with pytest.raises(CLIPWeightsError, match=r"python experiments/train_clip\.py"):
        clip_model.load_vgepf_clip()
    with pytest.raises(CLIPWeightsError, match="shaping.kwargs.clip_weights"):
        clip_model.load_vgepf_clip({"clip_weights": str(tmp_path / "elsewhere")})


def test_shape_mismatch_with_config_json_is_a_clear_error(tmp_path):
    d = tmp_path / "ckpt"
    shutil.copytree(COMMITTED, d)
    hf = json.loads((d / "config.json").read_text())
    hf["vision_config"]["intermediate_size"] = 48  # the file's MLPs are 384 wide
    (d / "config.json").write_text(json.dumps(hf))
    with pytest.raises(CLIPWeightsError) as e:
        clip_model.load_vgepf_clip({"clip_weights": str(d)})
    msg = str(e.value)
    assert "vision_model.encoder.layers.0.mlp.fc1.weight" in msg
    assert "(96, 384)" in msg and "(96, 48)" in msg


def test_missing_tokenizer_is_an_error(tmp_path):
    d = tmp_path / "ckpt"
    shutil.copytree(COMMITTED, d)
    (d / "vocab.json").unlink()
    with pytest.raises(CLIPWeightsError, match="no tokenizer files"):
        clip_model.load_vgepf_clip({"clip_weights": str(d)})

"""V-GEPF: the CLIP potential and its shaping, skill selection (scripted rule, language
model with retries, vision endpoint with images), the label store's replay, no
recompilation on a skill switch, and a tiny run through the runner."""

from __future__ import annotations

import base64
import io
import json
import math
import re
import shutil
from pathlib import Path

import chex
import jax
import jax.numpy as jnp
import numpy as np
import pytest

pytest.importorskip("safetensors")
pytest.importorskip("tokenizers")

from scripts import load_script  # noqa: E402

import envs  # noqa: E402
from envs.football.render import render  # noqa: E402
from jaxmarl_llm.learners.acting import random_play  # noqa: E402
from jaxmarl_llm.lm.backend import Backend, Completion  # noqa: E402
from jaxmarl_llm.lm.parsers import ParseError  # noqa: E402
from jaxmarl_llm.methods.vgepf import (  # noqa: E402
    BackendSelector,
    Records,
    ScriptedSelector,
    SkillChoiceError,
    VGEPFFeedback,
    parse_skill_choice,
    vgepf_config,
    vgepf_shaper,
)
from jaxmarl_llm.methods.vgepf import potential as _potential  # noqa: E402
from jaxmarl_llm.methods.vgepf import shaping_reward as _shaping_reward  # noqa: E402
from jaxmarl_llm.methods.vgepf.online import normalisation, png  # noqa: E402
from jaxmarl_llm.methods.vgepf.potential import (  # noqa: E402
    image_embeddings,
    initial_params,
    text_embedding,
)
from jaxmarl_llm.methods.vgepf.select import skill_prompt  # noqa: E402
from jaxmarl_llm.methods.vgepf.skills import SKILL_NAMES, SKILLS, skill_index  # noqa: E402
from jaxmarl_llm.vision.clip import encode_image, load_clip  # noqa: E402

TINY_CLIP = Path(__file__).resolve().parents[1] / "vision" / "data" / "tiny_clip"
ENV = "football:academy_counterattack_easy"
SIZE = 32  # frames drawn at the tiny CLIP's input size

potential = jax.jit(_potential, static_argnums=(0, 3, 4))
shaping_reward = jax.jit(_shaping_reward, static_argnums=(0, 3, 4, 5))
embeddings = jax.jit(image_embeddings, static_argnums=(0, 3))


def tiny_clip_dir(root: Path) -> Path:
    """The tests' tiny random CLIP (a Hugging Face directory) with a word-level tokenizer
    covering the skills' instructions (ids below its 100-token vocabulary, end of text at
    its pooling id 99)."""
    from tokenizers import Tokenizer, models, normalizers, pre_tokenizers

    out = root / "clip"
    shutil.copytree(TINY_CLIP, out)
    text = " ".join(s.instruction.lower() for s in SKILLS)
    words = sorted(set(re.findall(r"\w+|[^\w\s]", text)))
    vocab = {w: i + 1 for i, w in enumerate(words)}
    vocab.update({"<|startoftext|>": 98, "<|endoftext|>": 99})
    tok = Tokenizer(models.WordLevel(vocab, unk_token="<|endoftext|>"))
    tok.normalizer = normalizers.Lowercase()
    tok.pre_tokenizer = pre_tokenizers.Whitespace()
    tok.add_special_tokens(["<|startoftext|>", "<|endoftext|>"])
    tok.save(str(out / "tokenizer.json"))
    return out


@pytest.fixture(scope="module")
def clip_dir(tmp_path_factory):
    return tiny_clip_dir(tmp_path_factory.mktemp("vgepf"))


@pytest.fixture(scope="module")
def clip(clip_dir):
    return load_clip(clip_dir)


@pytest.fixture(scope="module")
def env():
    return envs.make_array_env(ENV)


@pytest.fixture(scope="module")
def play(env):
    """Random play: 12 steps of 2 envs (leaves [12, 2, ...])."""
    return jax.jit(random_play, static_argnums=(0, 2, 3))(env, jax.random.PRNGKey(3), 2, 12)


def _cfg(**kwargs):
    return vgepf_config({"normalise_steps": 0, **kwargs})


def _flat(states):
    lead = states.step.shape
    return jax.tree.map(lambda x: x.reshape(-1, *x.shape[len(lead) :]), states)


def test_potential_is_the_normalised_cosine_and_zero_at_the_end(clip, play):
    params = initial_params(clip, "ball location").replace(
        mean=jnp.float32(0.1), std=jnp.float32(0.5)
    )
    phi = potential(clip.config, params, play.state, SIZE)
    chex.assert_shape(phi, play.done.shape)
    # independently: the frames through the whole CLIP, cosine with the text embedding
    frames = jax.jit(jax.vmap(lambda s: render(s, SIZE)))(_flat(play.state)) / 255.0
    emb = jax.jit(encode_image, static_argnums=0)(clip.config, clip.params, frames)
    cos = (emb / jnp.linalg.norm(emb, axis=-1, keepdims=True)) @ text_embedding(
        clip, "ball location"
    )
    np.testing.assert_allclose(phi.reshape(-1), (cos - 0.1) / 0.5, atol=1e-4)

    done = play.done.at[3, 1].set(True)
    f = shaping_reward(clip.config, params, play.replace(done=done), 0.9, SIZE)
    chex.assert_shape(f, play.reward.shape)
    np.testing.assert_allclose(f[..., 0], f[..., -1])  # the same for every agent
    # at the end phi(s') is 0: F = -phi(s)
    np.testing.assert_allclose(f[3, 1, 0], -phi[3, 1], atol=1e-5)
    phi_next = potential(clip.config, params, play.next_state, SIZE)
    np.testing.assert_allclose(f[2, 0, 0], 0.9 * phi_next[2, 0] - phi[2, 0], atol=1e-5)


def test_shaping_telescopes_along_an_episode(clip, play):
    params = initial_params(clip, "encourage passing")
    gamma = 0.9
    f = shaping_reward(clip.config, params, play, gamma, SIZE)[..., 0]
    phi = potential(clip.config, params, play.state, SIZE)
    phi_next = potential(clip.config, params, play.next_state, SIZE)
    for e in range(play.done.shape[1]):
        assert not np.asarray(play.done[:, e]).any()  # counterattack lasts longer than 12 steps
        t = np.arange(play.done.shape[0])
        total = float((gamma**t * f[:, e]).sum())
        expect = gamma ** len(t) * float(phi_next[-1, e]) - float(phi[0, e])
        assert math.isclose(total, expect, rel_tol=1e-4, abs_tol=1e-4)


def test_normalisation_gives_zero_mean_unit_std_on_its_batch(clip, play):
    params = initial_params(clip, "has advantage")
    emb = embeddings(clip.config, params.image, _flat(play.state), SIZE)
    mean, std = normalisation(np.asarray(emb @ params.text), True)
    phi = potential(clip.config, params.replace(mean=mean, std=std), play.state, SIZE)
    assert abs(float(phi.mean())) < 1e-4 and abs(float(phi.std()) - 1.0) < 1e-3
    assert normalisation(np.zeros(0), True) == (0.0, 1.0)
    assert normalisation(np.ones(5), False) == (0.0, 1.0)
    assert normalisation(np.ones(5), True)[1] > 0  # a constant potential does not divide by 0


def test_the_default_potential_is_eq_2s_raw_cosine(clip, env):
    shaper = vgepf_shaper(env, vgepf_config({}), clip)  # random play would normalise it
    assert (float(shaper.params.mean), float(shaper.params.std)) == (0.0, 1.0)


def test_every_k_evaluates_phi_on_every_kth_episode_step_only(clip, play):
    params = initial_params(clip, "encourage dribbling")
    full = potential(clip.config, params, play.state, SIZE)
    thin = potential(clip.config, params, play.state, SIZE, every_k=3)
    on = np.asarray(play.state.step) % 3 == 0
    assert on.any() and (~on).any()
    np.testing.assert_allclose(np.asarray(thin)[on], np.asarray(full)[on], atol=1e-6)
    assert (np.asarray(thin)[~on] == 0).all()


def test_a_skill_switch_does_not_recompile(clip, play):
    cfg = _cfg()
    shaper = vgepf_shaper_from(clip, cfg)
    traces = []

    def reward(params, batch):
        traces.append(1)
        return shaper.apply(params, batch)

    fn = jax.jit(reward)
    a = initial_params(clip, "has advantage")
    b = initial_params(clip, "encourage defense").replace(mean=jnp.float32(0.2))
    ra, rb = fn(a, play), fn(b, play)
    assert len(traces) == 1 and fn._cache_size() == 1
    assert not np.allclose(ra, rb)


def vgepf_shaper_from(clip, cfg, **kw):
    return vgepf_shaper(envs.make_array_env(ENV), cfg, clip, **kw)


# ----- parsing and selectors --------------------------------------------------------------


@pytest.mark.parametrize(
    "answer, name",
    [
        ("Analysis: shots are rising. Next Skill: Correct formation", "correct formation"),
        (
            "Analysis: the record of encourage attack rose.\nNext Skill: encourage passing.",
            "encourage passing",
        ),
        ("**Next Skill:** *Ball Location*", "ball location"),
        ("next skill: HAS-ADVANTAGE", "has advantage"),
        ("Next skill : encourage_dribbling", "encourage dribbling"),
        ("Encourage defense", "encourage defense"),
        (
            "Analysis: To encourage the blue team ... the last skill, which was likely "
            '"encourage attack," has been rewarded ... Next Skill: Correct formation',
            "correct formation",
        ),
    ],
)
def test_parse_skill_choice_accepts_the_papers_answers(answer, name):
    assert parse_skill_choice(answer) == name


@pytest.mark.parametrize(
    "answer",
    [
        "Analysis: play better. Next Skill: score more goals",
        "I cannot tell.",
        "Next Skill: encourage attack or encourage defense",
    ],
)
def test_parse_skill_choice_fails_typed(answer):
    with pytest.raises(ParseError) as e:
        parse_skill_choice(answer)
    assert e.value.parser == "skill_choice" and e.value.raw == answer


def _records(shots, wins, potential=()):
    return Records(tuple(shots), tuple(wins), tuple(potential))


def test_scripted_selector_never_repeats_and_is_deterministic():
    sel = ScriptedSelector()
    cases = [
        _records([], []),  # nothing recorded yet
        _records([0.0, math.nan], [0.0, 0.0]),
        _records([2.0, 2.0], [0.1, 0.2]),
        _records([3.0], [0.9]),
    ]
    picks = set()
    for records in cases:
        for last in SKILL_NAMES:
            a = sel.select(records, [], last)
            assert a == sel.select(records, [], last)
            assert a.skill != last and a.skill in SKILL_NAMES and not a.repeated
            picks.add(a.skill)
    assert len(picks) >= 5
    assert sel.select(cases[0], [], "ball location").skill == "encourage dribbling"
    assert sel.select(cases[3], [], "ball location").skill == "correct formation"


class Answers(Backend):
    """Answers from a list, in order; keeps the requests."""

    kind = "answers"
    model = "list"

    def __init__(self, answers):
        self.answers, self.seen = list(answers), []

    def generate(self, requests, on_result=None):
        self.seen.extend(requests)
        return [Completion(self.answers.pop(0)) for _ in requests]


def test_backend_selector_follows_up_a_bad_answer_then_accepts():
    backend = Answers(
        ["Analysis: pass more. Next Skill: tiki-taka", "Next Skill: Encourage passing"]
    )
    sel = BackendSelector(backend, retries=2)
    choice = sel.select(_records([0.5], [0.0], [0.0, 0.2]), [], "encourage attack")
    assert choice.skill == "encourage passing" and choice.retries == 1 and not choice.repeated
    assert choice.answers[0].endswith("tiki-taka")
    first, second = backend.seen
    assert "total shot: [0.50] win rate: [0.00]" in first.prompt
    assert "The last skill is encourage attack. Its reward record is [0.00, 0.20]" in first.prompt
    assert "Try not repeating the last skill. Output Format: Analysis:" in first.prompt
    assert "tiki-taka" in second.prompt and "names none of the options" in second.prompt
    assert second.params.seed != first.params.seed and not first.images


def test_backend_selector_accepts_a_repeat_and_errors_after_the_retries():
    sel = BackendSelector(Answers(["Next Skill: encourage attack"]), retries=0)
    choice = sel.select(_records([], []), [], "encourage attack")
    assert choice.skill == "encourage attack" and choice.repeated
    sel = BackendSelector(Answers(["no idea", "still none", "Next Skill: shoot"]), retries=2)
    with pytest.raises(SkillChoiceError, match=r"3 answers named no skill.*'no idea'.*shoot"):
        sel.select(_records([], []), [], "encourage attack")


def test_prompt_follows_appendix_b3():
    text = skill_prompt(_records([0.0, 0.03], [0.0, math.nan], [0.01]), "encourage attack", True)
    assert text.startswith("Analyse this video. We want to guide the blue team")
    assert "total shot: [0.00, 0.03] win rate: [0.00, n/a]" in text
    assert "You should choose one from [has advantage, ball location, correct formation" in text
    assert "encourage passing: the blue team is passing." in text
    assert text.rstrip().endswith("Output Format: Analysis: … Next Skill: …")


def test_vision_selector_sends_frames_as_images_and_replays_from_the_store(tmp_path):
    from PIL import Image

    from jaxmarl_llm.lm.factory import make_backend
    from jaxmarl_llm.lm.server import LLMServer

    bodies = []

    def record(handler, path, body):
        bodies.append(body)
        return False

    frames = [png(np.full((SIZE, SIZE, 3), v, np.uint8)) for v in (0, 128)]
    store = tmp_path / "labels.sqlite"
    with LLMServer(
        Answers(["Analysis: ok. Next Skill: encourage passing"]), before_request=record
    ) as server:
        backend = make_backend("http", store=store, base_url=server.url, model="vlm")
        choice = BackendSelector(backend, vision=True).select(
            _records([1.0], [0.0]), frames, "ball location"
        )
        backend.close()
    assert choice.skill == "encourage passing" and choice.selector == "vision"
    (body,) = bodies
    parts = body["messages"][-1]["content"]
    assert parts[0]["type"] == "text" and parts[0]["text"].startswith("Analyse this video.")
    urls = [p["image_url"]["url"] for p in parts[1:]]
    assert len(urls) == 2 and all(u.startswith("data:image/png;base64,") for u in urls)
    img = Image.open(io.BytesIO(base64.b64decode(urls[1].split(",", 1)[1])))
    assert img.size == (SIZE, SIZE) and np.asarray(img)[0, 0, 0] == 128
    # the server is gone: the same query is answered from the label store
    offline = make_backend(
        "http", store=store, base_url="http://127.0.0.1:9/v1", model="vlm", max_retries=0
    )
    again = BackendSelector(offline, vision=True).select(
        _records([1.0], [0.0]), frames, "ball location"
    )
    assert again == choice and offline.stats()["hits"] == 1


# ----- selection rounds and the runner -----------------------------------------------------


def _metrics(seeds, n, shots, win):
    return {"stat_shots": np.full((seeds, n), shots), "win_rate": np.full((seeds, n), win)}


def test_rounds_switch_skill_renormalise_and_replay_on_resume(clip, env, play, tmp_path):
    cfg = _cfg(
        skill="ball location",
        normalise=True,
        selection={"every": 2, "rounds": 3, "collect_steps": 6},
    )
    shaper = vgepf_shaper(env, cfg, clip, artifact_dir=tmp_path)
    fb = shaper.feedback
    assert isinstance(fb, VGEPFFeedback) and (fb.every, fb.rounds) == (2, 3)
    seeds = 2
    params = jax.tree.map(lambda x: jnp.broadcast_to(x, (seeds, *jnp.shape(x))), shaper.params)
    batch = jax.tree.map(lambda x: jnp.stack([x, x]), play)  # [seeds, T, E, ...]
    fb.after_chunk(1, params, _metrics(seeds, 1, 0.0, 0.0))
    fb.after_chunk(2, params, {"win_rate": np.zeros((seeds, 1))})  # no stat_shots: NaN
    new, report = fb.refit(0, batch, params)
    assert (
        report["skill"] == ["encourage dribbling"] * 2
        and report["last_skill"][0] == "ball location"
    )
    assert report["selector"] == "scripted" and report["parse_retries"] == [0, 0]
    chex.assert_shape([new.mean, new.std, new.skill], (seeds,))
    assert int(new.skill[0]) == skill_index("encourage dribbling")
    # the new potential is normalised on the round's batch: mean 0 there
    phi = potential(clip.config, jax.tree.map(lambda x: x[0], new), play.state, SIZE)
    assert abs(float(phi.mean())) < 1e-4
    saved = json.loads((tmp_path / "round_0.json").read_text())
    assert saved["records"][0]["shots"] == [0.0, None] and saved["records_end"] == 2
    records = json.loads((tmp_path / "records.json").read_text())
    assert records["2"]["shots"] == [None, None]

    # a resumed run (a fresh feedback on the same folder) repeats round 0 identically
    again = vgepf_shaper(env, cfg, clip, artifact_dir=tmp_path).feedback
    new2, report2 = again.refit(0, batch, params)
    chex.assert_trees_all_close(new, new2)
    assert report2["replayed"] and report2["skill"] == report["skill"]
    # the next round's records start after round 0's and its potential record follows
    # the skill round 0 chose
    again.after_chunk(3, new2, _metrics(seeds, 1, 2.0, 0.0))
    _, report3 = again.refit(1, batch, new2)
    round1 = json.loads((tmp_path / "round_1.json").read_text())
    assert round1["records"][0]["shots"] == [2.0]
    assert len(round1["records"][0]["potential"]) == 2
    assert report3["skill"][0] != "encourage dribbling"


def test_kwargs_are_checked_when_the_config_loads(tmp_path):
    from jaxmarl_llm.config import ConfigError, build_config

    def cfg(kwargs):
        raw = {
            "name": "v",
            "env": {"name": ENV},
            "algo": {"name": "mappo"},
            "shaping": {"name": "vgepf", "kwargs": kwargs},
        }
        return build_config(raw, [f"out_dir={tmp_path}"])

    with pytest.raises(ConfigError, match="shaping.kwargs.every_kk"):
        cfg({"every_kk": 2})
    with pytest.raises(ConfigError, match="selector='oracle'; valid choices: none, scripted"):
        cfg({"selection": {"selector": "oracle"}})
    with pytest.raises(ConfigError, match="unknown skill 'shoot'"):
        cfg({"skill": "shoot"})
    with pytest.raises(ConfigError, match="every_k=4 needs normalise: true"):
        cfg({"every_k": 4})
    assert cfg({"every_k": 4, "normalise": True}).shaping.kwargs.every_k == 4
    assert cfg({}).shaping.kwargs.clip_weights is None


@pytest.mark.slow
def test_tiny_mappo_run_switches_skill(clip_dir, tmp_path):
    from jaxmarl_llm.config import build_config
    from jaxmarl_llm.runner import run_experiment

    raw = {
        "name": "vgepf_tiny",
        "env": {"name": ENV},
        "algo": {
            "name": "mappo",
            "num_envs": 2,
            "num_steps": 8,
            "total_timesteps": 48,
            "num_minibatches": 1,
            "update_epochs": 1,
            "hidden_sizes": [16],
        },
        "shaping": {
            "name": "vgepf",
            "coef": 0.5,
            "kwargs": {
                "clip_weights": str(clip_dir),
                "skill": "encourage attack",
                "normalise": True,  # the normalised variant end to end (random play first)
                "normalise_steps": 2,
                "normalise_envs": 2,
                "selection": {"selector": "scripted", "every": 1, "rounds": 2, "collect_steps": 4},
            },
        },
    }
    cfg = build_config(
        raw, [f"out_dir={tmp_path / 'run'}", "log_every=1", "progress=false", "plot=false"]
    )
    result = run_experiment(cfg)
    rounds = json.loads((result.run_dir / "feedback.json").read_text())
    assert sorted(rounds) == ["0", "1"]
    first, second = rounds["0"], rounds["1"]
    assert first["last_skill"] == ["encourage attack"] and first["skill"] != ["encourage attack"]
    assert second["last_skill"] == first["skill"] and second["skill"] != first["skill"]
    assert (result.run_dir / "vgepf" / "round_1.json").exists()
    assert json.loads((result.run_dir / "vgepf" / "records.json").read_text()).keys() >= {"1", "2"}
    assert int(result.state.shaper_params.skill[0]) == skill_index(second["skill"][0])

    # the potential check plays the trained policy and scores it under every skill
    report = load_script("experiments/vgepf_potential_check.py").check(
        result.run_dir, [result.run_dir], steps=6, seed=0
    )
    assert report["chosen_skills"] == {"0": first["skill"], "1": second["skill"]}
    policy = report["policies"]["run"]
    assert policy["env_steps"] == 48 and set(policy["skills"]) == set(SKILL_NAMES)
    for stats in policy["skills"].values():
        assert stats["cos_std"] > 0 and -1 <= stats["cos_mean"] <= 1

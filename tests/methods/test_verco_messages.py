"""Verco's message module: the scripted and LM teachers, the pair dataset, SFT of the
message adapter, greedy generation and its cache, on a tiny random Gemma 3 decoder with a word-level
tokenizer built here."""

from __future__ import annotations

import functools
import re

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from envs.salad.env import SaladKitchen
from envs.salad.text import global_description
from jaxmarl_llm.lm.backend import Backend, Completion
from jaxmarl_llm.lm.decoder import Decoder, init_cache
from jaxmarl_llm.lm.labeling import LabelingPolicy
from jaxmarl_llm.lm.lora import init_lora, load_adapters, merge_lora, save_adapters
from jaxmarl_llm.lm.scripted import ScriptedBackend
from jaxmarl_llm.lm.store import CachedBackend, CacheMiss, LabelStore
from jaxmarl_llm.methods.verco.messages import (
    MessageCache,
    MessagePairs,
    SFTConfig,
    collect_message_pairs,
    evaluate_messages,
    generate_messages,
    greedy_decode,
    message_token_accuracy,
    pack_sft_examples,
    split_by_episode,
    train_message_adapter,
)
from jaxmarl_llm.methods.verco.models import tiny_gemma_config
from jaxmarl_llm.methods.verco.policy import DecoderLM, pack_prompts
from jaxmarl_llm.methods.verco.teacher import (
    MESSAGE_WORD_BUDGET,
    format_agent_messages,
    lm_teacher_messages,
    scripted_message_answer,
    scripted_messages,
    teacher_requests,
)


class WordTokenizer:
    """One token per word of a fixed vocabulary, and one for a newline; 0 pad, 1 BOS,
    2 EOS. Decoding joins words with single spaces."""

    pad_id, bos_id, eos_id = 0, 1, 2
    words = (
        "\n Observation: Message to your teammate: see here there near far "
        "I fetch the tomato lettuce onion"
    ).split(" ")

    def __init__(self):
        self.ids = {w: i + 3 for i, w in enumerate(self.words)}
        self.vocab_size = 32

    def encode(self, text, add_bos=True):
        pieces = re.findall(r"\n|[^\s]+", text)
        return ([self.bos_id] if add_bos else []) + [self.ids[w] for w in pieces]

    def decode(self, ids, skip_special=True):
        words = [self.words[i - 3] for i in ids if i >= 3]
        return " ".join(words).replace(" \n ", "\n")


TOK = WordTokenizer()
TINY = tiny_gemma_config(vocab_size=TOK.vocab_size, context_length=256, sliding_window=16).decoder
LM = DecoderLM(Decoder(TINY), init_cache)


@functools.lru_cache(maxsize=1)
def base_params():
    x = jnp.zeros((1, 4), jnp.int32)
    cache = init_cache(TINY, 1, 4)
    return Decoder(TINY).init(jax.random.key(0), x, x, jnp.ones((1, 4), bool), cache)["params"]


def fresh_lora():
    return init_lora(jax.random.key(1), base_params(), targets=("q", "v"), rank=8, alpha=16.0)


# ----- scripted teacher ---------------------------------------------------------------


def start_state(map_name, task, **changes):
    env = SaladKitchen(map_name, task=task)
    _, state = env.reset(jax.random.key(0))
    return env, state.replace(**{k: jnp.asarray(v) for k, v in changes.items()})


def cell(row, col):
    return row * 7 + col


def test_scripted_teacher_map_a_closest_agent_fetches():
    env, state = start_state("A", "tomato salad")
    # agent 1 at (1, 4) is one step from the tomato's counter, agent 0 three
    assert scripted_messages(env, state) == [
        ["I wait; you fetch the tomato", "I fetch the tomato; you wait"]
    ]
    env, state = start_state("A", "lettuce-tomato salad")
    assert scripted_messages(env, state) == [
        ["I fetch the lettuce; you fetch the tomato", "I fetch the tomato; you fetch the lettuce"]
    ]


def test_scripted_teacher_map_a_holding_and_chopped_food():
    # agent 0 holds the raw tomato; the lettuce lies chopped on knife 2 (2, 0)
    env, state = start_state(
        "A",
        "lettuce-tomato salad",
        item_holder=np.array([0, -1, -1, -1], np.int32),
        item_cell=np.array([cell(0, 5), cell(2, 0), cell(2, 6), cell(6, 5)], np.int32),
        chops=np.array([0, 3, 0], np.int32),
    )
    assert scripted_messages(env, state) == [
        [
            "I chop the tomato; you plate the chopped lettuce",
            "I plate the chopped lettuce; you chop the tomato",
        ]
    ]


def test_scripted_teacher_map_b_hands_over_via_the_middle_counter():
    env, state = start_state("B", "tomato salad")
    # only the right agent reaches the tomato, and it reaches no knife
    assert scripted_messages(env, state) == [
        ["I wait; you pass the tomato over", "I pass the tomato over; you wait"]
    ]
    # the raw tomato on the middle counter (3, 3): the left agent takes it to chop
    env, state = start_state(
        "B",
        "tomato salad",
        agent_pos=np.array([[1, 2], [5, 5]], np.int32),
        item_cell=np.array([cell(3, 3), cell(1, 6), cell(2, 6), cell(6, 5)], np.int32),
    )
    assert scripted_messages(env, state)[0][0] == "I fetch the tomato; you wait"
    # right agent holds the plate; the tomato lies chopped on knife 1 (1, 0)
    env, state = start_state(
        "B",
        "tomato salad",
        item_holder=np.array([-1, -1, -1, 1], np.int32),
        item_cell=np.array([cell(1, 0), cell(1, 6), cell(2, 6), cell(6, 5)], np.int32),
        chops=np.array([3, 0, 0], np.int32),
    )
    assert scripted_messages(env, state) == [
        [
            "I plate the chopped tomato; you pass the plate over",
            "I pass the plate over; you plate the chopped tomato",
        ]
    ]


@pytest.mark.parametrize("map_name", ["A", "B"])
def test_collected_pairs_are_within_budget_and_mirror_each_other(map_name):
    env = SaladKitchen(map_name, max_steps=40)
    pairs = collect_message_pairs(env, jax.random.key(3), num_episodes=4, epsilon=0.3)
    assert len(pairs) > 20
    assert max(len(m.split()) for m in pairs.messages) <= MESSAGE_WORD_BUDGET
    assert set(np.unique(pairs.episodes)) <= set(range(4))
    assert set(pairs.agents.tolist()) == {0, 1}
    # diversity: more than a handful of distinct observations and messages
    assert len(set(pairs.observations)) > 10 and len(set(pairs.messages)) > 3
    for mine, theirs in (m.removeprefix("I ").split("; you ") for m in pairs.messages):
        assert mine and theirs
    train, held = split_by_episode(pairs, 0.25, seed=0)
    assert len(train) + len(held) == len(pairs)
    assert not set(train.episodes.tolist()) & set(held.episodes.tolist())


def test_collection_is_deterministic_and_epsilon_checked():
    env = SaladKitchen("A", max_steps=20)
    a = collect_message_pairs(env, jax.random.key(5), 2, epsilon=0.5)
    b = collect_message_pairs(env, jax.random.key(5), 2, epsilon=0.5)
    assert a.observations == b.observations and a.messages == b.messages
    with pytest.raises(ValueError, match="epsilon"):
        collect_message_pairs(env, jax.random.key(5), 2, epsilon=1.5)


# ----- LM teacher ----------------------------------------------------------------------


def some_states(map_name="B", n=3):
    env = SaladKitchen(map_name, max_steps=30)
    keys = jax.random.split(jax.random.key(7), n)
    _, states = jax.vmap(env.reset)(keys)
    return env, states


class FlakyTeacher(Backend):
    """Answers nonsense to first attempts and an over-long message pair to retries."""

    kind, model = "flaky", "flaky-teacher"

    def __init__(self):
        self.calls = 0

    def generate(self, requests, on_result=None):
        self.calls += 1
        out = []
        for i, r in enumerate(requests):
            long = "I will chop every single tomato on the knife right now please"
            text = "Sure! Here you go." if r.params.seed == 0 else f"Agent 1: {long}\nAgent 2: ok"
            out.append(Completion(text))
            if on_result is not None:
                on_result(i, out[-1])
        return out


class NoModel(Backend):
    """FlakyTeacher's identity (so its stored answers are found) without a model."""

    kind, model = "flaky", "flaky-teacher"

    def generate(self, requests, on_result=None):
        raise AssertionError("replay must not call the model")


def test_lm_teacher_prompt_is_the_papers():
    env, states = some_states("A", 1)
    prompt = teacher_requests(env, states)[0].prompt
    assert prompt.startswith(
        "You are a message design assistant who needs to design messages for 2 agents, two cooks"
    )
    assert "The observation of Agent 1: Task:" in prompt
    assert "The observation of Agent 2: Task:" in prompt
    assert "design concise messages (within 10 words) for each agent to their teammate" in prompt


def test_lm_teacher_parses_good_answers_through_the_store(tmp_path):
    env, states = some_states()
    store = LabelStore(tmp_path / "labels.sqlite")
    backend = CachedBackend(ScriptedBackend("verco_messages", scripted_message_answer), store)
    messages, report = lm_teacher_messages(backend, env, states)
    assert messages == scripted_messages(env, states)
    assert report.labeling.abstained == 0 and report.cut_messages == 0
    assert format_agent_messages(["a b", "c"]) == "Agent 1: a b\nAgent 2: c"


def test_lm_teacher_retries_malformed_cuts_long_and_replays(tmp_path):
    env, states = some_states()
    store = LabelStore(tmp_path / "labels.sqlite")
    flaky = FlakyTeacher()
    messages, report = lm_teacher_messages(
        CachedBackend(flaky, store), env, states, LabelingPolicy(max_retries=1)
    )
    assert report.labeling.retried_queries == 3 and report.labeling.abstained == 0
    assert "agent_messages" in str(report.labeling.examples[0])
    assert report.cut_messages == 3 and report.dropped_words == 3 * 2
    assert all(m == ["I will chop every single tomato on the knife right", "ok"] for m in messages)
    assert all(len(m[0].split()) == MESSAGE_WORD_BUDGET for m in messages)
    # replay: the same labels from the store without the model
    replayed, _ = lm_teacher_messages(
        CachedBackend(NoModel(), store, mode="replay"), env, states, LabelingPolicy(max_retries=1)
    )
    assert replayed == messages
    env_a, other = some_states("A", 1)
    with pytest.raises(CacheMiss):
        lm_teacher_messages(CachedBackend(NoModel(), store, mode="replay"), env_a, other)


def test_lm_teacher_abstains_when_retries_run_out():
    env, states = some_states(n=2)
    messages, report = lm_teacher_messages(FlakyTeacher(), env, states, LabelingPolicy(0))
    assert messages == [None, None] and report.labeling.abstained == 2


# ----- student: SFT, generation, cache --------------------------------------------------

FOODS = ("tomato", "lettuce", "onion")
SFT_TRAIN = MessagePairs(
    [f"see {f} {n}" for f in FOODS for n in ("here", "there", "near")],
    [f"I fetch the {f}" for f in FOODS for _ in range(3)],
    np.zeros(9, np.int32),
    np.zeros(9, np.int32),
)
SFT_HELD = MessagePairs(
    [f"see {f} far" for f in FOODS],
    [f"I fetch the {f}" for f in FOODS],
    np.ones(3, np.int32),
    np.zeros(3, np.int32),
)


@functools.lru_cache(maxsize=1)
def trained():
    config = SFTConfig(epochs=40, batch_size=8, learning_rate=1e-2, seed=0)
    return train_message_adapter(LM, base_params(), fresh_lora(), TOK, SFT_TRAIN, config)


def held_token_accuracy(lora):
    tokens, valid, mask = pack_sft_examples(TOK, SFT_HELD.observations, SFT_HELD.messages)
    correct, counted = message_token_accuracy(LM, base_params(), lora, tokens, valid, mask)
    unjitted = message_token_accuracy.__wrapped__(LM, base_params(), lora, tokens, valid, mask)
    assert (int(correct), int(counted)) == tuple(int(x) for x in unjitted)
    return int(correct) / int(counted)


def test_pack_sft_examples_masks_only_the_message_and_end_token():
    tokens, valid, mask = pack_sft_examples(TOK, ["see"], ["I fetch"])
    prompt_len = len(TOK.encode("Observation: see\nMessage to your teammate:"))
    assert mask[0].sum() == len(["I", "fetch"]) + 1
    assert mask[0, prompt_len] and not mask[0, prompt_len - 1]
    assert tokens[0, valid[0].sum() - 1] == TOK.eos_id
    with pytest.raises(ValueError, match="too short"):
        pack_sft_examples(TOK, ["see"], ["I fetch"], length=4)


@pytest.mark.slow
def test_sft_drives_held_out_token_accuracy_up():
    lora, history = trained()
    before = held_token_accuracy(fresh_lora())
    after = held_token_accuracy(lora)
    assert history["epoch_losses"][-1] < 0.5 * history["epoch_losses"][0]
    assert after > before + 0.3, (before, after)


def test_greedy_decode_matches_uncached_argmax_and_stops_at_stop_tokens():
    lora = trained()[0]
    prompts = [TOK.encode("Observation: see onion here\nMessage to your teammate:"), [1, 20, 9]]
    tokens, valid = pack_prompts(prompts, 64)
    never = jnp.asarray([-1], jnp.int32)
    out, lengths = greedy_decode(LM, base_params(), lora, tokens, valid, never, 6)
    out_nojit, _ = greedy_decode.__wrapped__(LM, base_params(), lora, tokens, valid, never, 6)
    np.testing.assert_array_equal(out, out_nojit)
    assert lengths.tolist() == [6, 6]
    params = merge_lora(base_params(), lora)

    @jax.jit
    def next_token(seq, length):  # reference: a full forward of the sequence, no cache
        valid = jnp.arange(seq.shape[1])[None] < length
        logits, _ = Decoder(TINY).apply(
            {"params": params},
            seq,
            jnp.arange(seq.shape[1])[None],
            valid,
            init_cache(TINY, 1, seq.shape[1]),
        )
        return jnp.argmax(logits[0, length - 1])

    for row, prompt in enumerate(prompts):
        seq = list(prompt)
        for _ in range(6):
            padded = jnp.asarray([seq + [0] * (32 - len(seq))])
            seq.append(int(next_token(padded, len(seq))))
        assert np.asarray(out[row]).tolist() == seq[len(prompt) :]
    stop = int(out[0, 2])
    _, stopped = greedy_decode(LM, base_params(), lora, tokens, valid, jnp.asarray([stop]), 6)
    assert int(stopped[0]) == np.asarray(out[0]).tolist().index(stop)


def test_generation_is_deterministic_stops_at_eos_and_reports_cuts():
    lora = trained()[0]
    obs = SFT_HELD.observations
    first = generate_messages(LM, base_params(), lora, TOK, obs, max_tokens=40, batch_size=4)
    again = generate_messages(LM, base_params(), lora, TOK, obs, max_tokens=40, batch_size=2)
    assert first.messages == again.messages
    assert first.token_cuts == 0  # every row met the end token
    assert all(m.startswith("I fetch the") for m in first.messages), first.messages
    short = generate_messages(LM, base_params(), lora, TOK, obs, max_tokens=40, max_words=2)
    assert short.word_cuts == 3 and all(m == "I fetch" for m in short.messages)
    clipped = generate_messages(LM, base_params(), lora, TOK, obs, max_tokens=2)
    assert clipped.token_cuts == 3 and all(m == "I fetch" for m in clipped.messages)
    with pytest.raises(ValueError, match="max_tokens"):
        generate_messages(LM, base_params(), lora, TOK, obs, max_tokens=0)


def test_generation_pads_a_call_to_the_rows_it_needs_with_the_same_messages(monkeypatch):
    """A rollout step's call of a few texts decodes a power of two rows, not the whole
    batch, and each text gets the message it gets alone."""
    from jaxmarl_llm.methods.verco import messages as module

    lora = trained()[0]
    obs = SFT_HELD.observations  # 3 texts
    rows = []
    decode = module.greedy_decode

    def spy(lm, params, adapter, tokens, *rest):
        rows.append(tokens.shape[0])
        return decode(lm, params, adapter, tokens, *rest)

    monkeypatch.setattr(module, "greedy_decode", spy)
    together = generate_messages(LM, base_params(), lora, TOK, obs, max_tokens=40, batch_size=16)
    alone = [generate_messages(LM, base_params(), lora, TOK, [o], 40).messages[0] for o in obs]
    assert rows == [4, 1, 1, 1]
    assert together.messages == alone
    generate_messages(LM, base_params(), lora, TOK, obs * 6, max_tokens=40, batch_size=16)
    assert rows[4:] == [16, 2]  # 18 texts: a full batch, then the 2 left


def test_message_cache_returns_identical_messages_and_decodes_each_text_once():
    lora = trained()[0]
    calls = []
    direct = MessageCache.for_adapter(LM, base_params(), lora, TOK, max_tokens=40)

    def counting(texts):
        calls.append(list(texts))
        return direct._generate(texts)

    cache = MessageCache(counting)
    obs = SFT_HELD.observations + SFT_HELD.observations[:1]
    first = cache(obs)
    second = cache(list(reversed(obs)))
    assert second == list(reversed(first))
    assert calls == [SFT_HELD.observations]
    assert cache.stats()["misses"] == 3 and cache.stats()["hits"] == 5
    assert first[:3] == generate_messages(LM, base_params(), lora, TOK, obs[:3], 40).messages


def test_evaluation_report_and_adapter_round_trip(tmp_path):
    lora = trained()[0]
    report = evaluate_messages(LM, base_params(), lora, TOK, SFT_HELD, max_tokens=40)
    assert report["pairs"] == 3 and 0.0 <= report["exact_match"] <= 1.0
    assert report["token_accuracy"] == pytest.approx(held_token_accuracy(lora))
    save_adapters(tmp_path / "message_adapter", lora)
    restored = load_adapters(tmp_path / "message_adapter", fresh_lora())
    again = evaluate_messages(LM, base_params(), restored, TOK, SFT_HELD, max_tokens=40)
    assert again["exact_match"] == report["exact_match"]
    assert [e["student"] for e in again["examples"]] == [e["student"] for e in report["examples"]]


def test_global_description_drives_the_teacher_batched():
    env, states = some_states("A", 4)
    g = global_description(env, states)
    batched = scripted_messages(env, states)
    one_by_one = [
        scripted_messages(env, jax.tree.map(lambda x, i=i: x[i], states))[0] for i in range(4)
    ]
    assert batched == one_by_one and len(g["task"]) == 4


def test_adapters_on_the_top_blocks_default_to_their_own_folders_the_salad_configs_load():
    from scripts import load_script

    from jaxmarl_llm.config import load_config

    script = load_script("experiments/verco_messages.py")
    report, adapter = script.default_folders("A", "all")
    assert (report.name, adapter.name) == ("messages_A", "verco_messages_A")
    for name in ("a", "b"):
        cfg = load_config(f"verco_salad_{name}", [])
        _, adapter = script.default_folders(name.upper(), cfg.algo.lora_layers)
        assert cfg.algo.message_adapter == f"experiments/models/{adapter.name}"

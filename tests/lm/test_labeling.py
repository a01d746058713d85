"""Scripted backend + labeling policy: retries, abstentions, arrays, the store round trip."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from jaxmarl_llm.lm import templates
from jaxmarl_llm.lm.backend import Backend, Completion, Request, SamplingParams
from jaxmarl_llm.lm.labeling import (
    LabelingPolicy,
    ask,
    choices_to_arrays,
    rank_pair,
    rankings_to_pair_arrays,
    repeated_choices_to_confidence,
    retry_request,
)
from jaxmarl_llm.lm.scripted import (
    ScriptedBackend,
    agent_ranking_teacher,
    pair_choice_teacher,
)
from jaxmarl_llm.lm.store import CachedBackend, LabelStore
from jaxmarl_llm.lm.teachers import TeacherNoise, agent_rankings
from jaxmarl_llm.methods.dpm.answers import (
    format_agent_ranking,
    parse_agent_ranking,
    parse_hash_choice,
)
from jaxmarl_llm.methods.lca.answers import parse_pair_choice  # registers lca_pair_ranking


def _pair_requests(values_a, values_b, seed=0):
    return [
        Request(
            f"is {a:.3f} better than {b:.3f}?",
            params=SamplingParams(seed=seed),
            payload={"value_a": a, "value_b": b},
        )
        for a, b in zip(values_a, values_b, strict=True)
    ]


def test_perfect_scripted_teacher_through_the_text_path():
    rng = np.random.default_rng(0)
    a, b = rng.normal(size=64), rng.normal(size=64)
    backend = ScriptedBackend("pair", pair_choice_teacher(style="hash"))
    values, report = ask(backend, _pair_requests(a, b), parse_hash_choice)
    label, valid = choices_to_arrays(values)
    np.testing.assert_array_equal(label, (a > b).astype(np.float32))
    assert valid.all() and report.abstained == 0 and report.retried_queries == 0


def test_skips_are_retried_then_abstained_and_counted():
    rng = np.random.default_rng(1)
    a, b = rng.normal(size=400), rng.normal(size=400)
    backend = ScriptedBackend("pair", pair_choice_teacher(TeacherNoise(skip=0.5)))
    values, report = ask(
        backend, _pair_requests(a, b), parse_pair_choice, LabelingPolicy(max_retries=2)
    )
    # Each attempt is a fresh draw: abstain only if all 3 attempts skipped (1/8).
    assert 0.3 < report.retried_queries / 400 < 0.7
    assert 0.06 < report.abstained / 400 < 0.2
    assert report.answered + report.abstained == 400
    assert sum(v is None for v in values) == report.abstained
    assert report.as_dict()["example_failures"][0].startswith("pair_choice: no choice")


class Babbler(Backend):
    kind = "babbler"
    model = "b"

    def __init__(self):
        self.seen = []

    def generate(self, requests, on_result=None):
        self.seen.extend(requests)
        return [Completion("hmm, hard to say") for _ in requests]


def test_malformed_answers_abstain_after_the_configured_retries():
    babbler = Babbler()
    values, report = ask(
        babbler,
        [Request("q")] * 3,
        parse_pair_choice,
        LabelingPolicy(max_retries=1, retry_temperature=0.9),
    )
    assert values == [None, None, None] and report.abstained == 3
    assert len(babbler.seen) == 6
    retried = babbler.seen[3].params
    assert retried.temperature == 0.9 and retried.seed != 0


def test_retry_request_keeps_the_prompt():
    r = Request("p", system="s", params=SamplingParams(seed=3, temperature=1.0), payload={"x": 1})
    again = retry_request(r, 2, LabelingPolicy(retry_temperature=0.5))
    assert (again.prompt, again.system, again.payload) == ("p", "s", {"x": 1})
    assert again.params.temperature == 1.0 and again.params.seed != 3
    with pytest.raises(ValueError, match="max_retries"):
        LabelingPolicy(max_retries=-1)


def test_repeated_queries_use_new_seeds_and_aggregate(tmp_path):
    rng = np.random.default_rng(2)
    a, b = rng.normal(size=200), rng.normal(size=200)
    with LabelStore(tmp_path / "labels.sqlite") as store:
        backend = CachedBackend(
            ScriptedBackend("pair", pair_choice_teacher(TeacherNoise.with_accuracy(0.75))), store
        )
        answers = [
            ask(backend, _pair_requests(a, b, seed=q), parse_pair_choice)[0] for q in range(4)
        ]
        assert len(store) == 800
        conf, count = repeated_choices_to_confidence(list(zip(*answers, strict=True)))
        # The same queries again come from the store, identically.
        again = [ask(backend, _pair_requests(a, b, seed=q), parse_pair_choice)[0] for q in range(4)]
        assert again == answers and backend.hits == 800
    np.testing.assert_array_equal(count, 4)
    truth = a > b
    assert ((conf > 0.5) == truth)[conf != 0.5].mean() > 0.8


def test_rankings_through_text_match_the_array_teacher():
    scores = np.array([[3.0, 1.0, 2.0], [1.0, 1.0, 0.0]])
    backend = ScriptedBackend("rank", agent_ranking_teacher(format_agent_ranking))
    requests = [Request(f"scene {i}", payload={"scores": s.tolist()}) for i, s in enumerate(scores)]
    ranks, report = ask(backend, requests, lambda t: parse_agent_ranking(t, 3))
    label, valid = rankings_to_pair_arrays(ranks, 3)
    expected = agent_rankings(jax.random.PRNGKey(0), jnp.asarray(scores), TeacherNoise())
    np.testing.assert_array_equal(label[valid], np.asarray(expected.label)[valid])
    np.testing.assert_array_equal(valid, expected.valid)


def test_scripted_backend_needs_payloads():
    backend = ScriptedBackend("pair", pair_choice_teacher())
    with pytest.raises(ValueError, match=r"needs request.payload.*\[0\]"):
        backend.generate([Request("no payload")])


def test_rendered_template_labels_with_payload_in_the_cache_identity():
    fields = {f: f for f in templates.template_fields("lca_pair_ranking")}
    prompt = templates.render("lca_pair_ranking", **fields)
    backend = ScriptedBackend("pair", pair_choice_teacher())
    r1 = Request(prompt, payload={"value_a": 1.0, "value_b": 0.0})
    r2 = Request(prompt, payload={"value_a": 0.0, "value_b": 1.0})
    assert backend.cache_identity(r1) != backend.cache_identity(r2)
    assert [c.text for c in backend.generate([r1, r2])] == ["1", "2"]


class PositionBiased(Backend):
    """Log-odds for "first" = preference for the shown-first item + a bias of 3 nats."""

    kind = "biased"
    model = "b"

    def generate(self, requests, on_result=None):
        raise NotImplementedError

    def score(self, prompts, candidates):
        out = []
        for p in prompts:
            first, second = (float(x) for x in p.split())
            out.append([0.5 * (first - second) + 3.0, 0.0])
        return out


def test_rank_pair_cancels_position_bias(tmp_path):
    a = np.array([0.0, 1.0, 2.0])
    b = np.array([1.0, 1.0, 0.0])
    ab = [f"{x} {y}" for x, y in zip(a, b, strict=True)]
    ba = [f"{y} {x}" for x, y in zip(a, b, strict=True)]
    with LabelStore(tmp_path / "s.sqlite") as store:
        p = rank_pair(CachedBackend(PositionBiased(), store), ab, ba)
        assert len(store) == 5  # the tied pair reads the same in both orders: asked once
    np.testing.assert_allclose(p, 1 / (1 + np.exp(-(a - b) / 2)))
    with pytest.raises(ValueError, match="3 prompts in A-B order but 2"):
        rank_pair(PositionBiased(), ab, ba[:2])

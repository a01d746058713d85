"""DPM's answer forms: the trajectory choice "#1"/"#2"/"#0" and the agent ranking
"Rank #k : {agents}"; round trips, the paper's examples, and property fuzzing
(``answer_noise``)."""

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from jaxmarl_llm.lm.parsers import CHOICE_LABELS, ParseError
from jaxmarl_llm.methods.dpm.answers import (
    format_agent_ranking,
    parse_agent_ranking,
    parse_hash_choice,
)
from tests.methods.answer_noise import (
    EMPTY,
    HUGE,
    PREAMBLES,
    assert_fast,
    assert_refused,
    case,
    explanation,
    fuzz,
    newline,
    preamble,
    words,
)

_LABEL = {"1": 1.0, "2": 0.0, "0": 0.5}


@settings(max_examples=200, deadline=None)
@given(st.lists(words, max_size=4), st.sampled_from(["1", "2", "0"]))
def test_hash_choice_round_trip(lines, choice):
    text = "\n".join([*lines, "Trajectory #1 lost more health than Trajectory #2.", f"#{choice}"])
    assert parse_hash_choice(text) == _LABEL[choice]


def test_hash_choice_ignores_named_references():
    with pytest.raises(ParseError, match="no standalone"):
        parse_hash_choice("Trajectory #1 killed Enemy #2 at Rank #1")
    assert parse_hash_choice("Output: #2") == 0.0


@settings(max_examples=200, deadline=None)
@given(st.lists(st.integers(0, 3), min_size=1, max_size=8))
def test_agent_ranking_round_trip(raw):
    dense = np.unique(raw, return_inverse=True)[1].reshape(-1)  # ranks without gaps
    text = format_agent_ranking(dense)
    np.testing.assert_array_equal(parse_agent_ranking(f"Here you go:\n{text}\n", len(raw)), dense)


def test_agent_ranking_paper_examples_and_errors():
    paper = "Rank #1 : {3}\n Rank #2 : {1,2}"
    np.testing.assert_array_equal(parse_agent_ranking(paper, 3), [1, 1, 0])
    np.testing.assert_array_equal(
        parse_agent_ranking("Rank #1: {1}\nRank #2: {3}\nRank #3: {2}", 3), [0, 2, 1]
    )
    for text, reason in [
        ("Rank #1 : {3}\nRank #2 : {1}", r"agents \[2\] are not ranked"),
        ("Rank #1 : {3}\nRank #3 : {1,2}", "rank #3 listed where #2 was due"),
        ("Rank #1 : {3,3}\nRank #2 : {1,2}", "agent 3 is ranked twice"),
        ("Rank #1 : {4}\nRank #2 : {1,2,3}", "agent 4 is not in 1..3"),
        ("Rank #1 : {x}", "'x' is not an agent number"),
        ("agents 3, 1, 2", "no 'Rank #k"),
    ]:
        with pytest.raises(ParseError, match=reason):
            parse_agent_ranking(text, 3)


# ----- DPM: "#1" / "#2" / "#0" and agent rankings ---------------------------------------

HASH_LINE_FORMS = ["#{c}", "Output: #{c}", "Answer: #{c}", "**#{c}**", "Answer: {c}", "(#{c})"]
HASH_SENTENCE_FORMS = ["I choose #{c}", "The better trajectory is #{c}", "So the output is #{c}"]
ANALYSES = [
    "",
    "Trajectory #1 killed Enemy #2 while Trajectory #2 lost a unit.",
    "Comparing #1 and #2, the outcomes differ.\n",
    "[Trajectory 1] ends with more health than [Trajectory 2] at Rank #1.\n",
]


@fuzz
@given(st.sampled_from("120"), st.data())
def test_hash_choice_well_formed_in_noise(c, data):
    analysis = data.draw(st.sampled_from(ANALYSES))
    kind = data.draw(st.sampled_from(["line", "sentence", "comparison"]))
    if kind == "comparison" and c != "0":
        form = data.draw(
            st.sampled_from(["[Trajectory {c}] is better", "Trajectory {c} seems better"])
        )
        text = data.draw(preamble) + " " + form.format(c=c) + ". " + data.draw(explanation)
    elif kind == "sentence":
        form = data.draw(st.sampled_from(HASH_SENTENCE_FORMS))
        text = f"{analysis}{data.draw(newline)}{form.format(c=c)}. {data.draw(explanation)}"
    else:
        form = data.draw(case)(data.draw(st.sampled_from(HASH_LINE_FORMS)).format(c=c))
        text = (
            f"{data.draw(preamble)}\n{analysis}{data.draw(newline)}{form}\n{data.draw(explanation)}"
        )
    assert parse_hash_choice(text) == CHOICE_LABELS[c], text


HASH_BAD = [
    "#-1", "#+2", "#1.5", "#0.5", "#12", "#2024", "#1a", "#3", "#9", "#２", "#٢",
    "#1 or #2", "#2, no #1", "#1/#2", "#1 and #2", "not #1", "Output: #3", "Output: -1",
    "Trajectory #1 killed Enemy #2 at Rank #1", "option#2b",
]  # fmt: skip


@fuzz
@given(st.sampled_from(HASH_BAD + EMPTY), preamble, explanation)
def test_hash_choice_refuses_non_choices(core, pre, post):
    assert_refused(parse_hash_choice, f"{pre}\n{core}\n{post}")


def test_hash_choice_huge_inputs():
    assert parse_hash_choice("Trajectory #1 lost. " * 5000 + "\n#1") == 1.0
    for text in HUGE:
        assert_fast(parse_hash_choice, text, refused=text != "#1 " * 33_000)
    assert parse_hash_choice("#1 " * 33_000) == 1.0  # one answer, restated


ranking_case = st.integers(2, 8).flatmap(
    lambda n: st.tuples(st.just(n), st.lists(st.integers(0, n - 1), min_size=n, max_size=n))
)
RANK_STYLES = [
    "Rank #{k} : {{{members}}}",
    "Rank #{k}: {{{members}}}",
    "rank {k} - {{{members}}}",
    "**Rank #{k}** : {{{members}}}",
    "- RANK #{k} = {{{members}}}",
]
MEMBER_STYLES = ["{a}", "Agent {a}", "agent_{a}", " {a} "]


def _dense(raw):
    return np.unique(raw, return_inverse=True)[1].reshape(-1)


def _ranking_text(ranks, style, member, sep=","):
    return "\n".join(
        style.format(
            k=k + 1, members=sep.join(member.format(a=a + 1) for a in np.flatnonzero(ranks == r))
        )
        for k, r in enumerate(sorted(set(ranks.tolist())))
    )


@fuzz
@given(ranking_case, st.sampled_from(RANK_STYLES), st.sampled_from(MEMBER_STYLES), st.data())
def test_agent_ranking_well_formed_in_noise(case_, style, member, data):
    n, raw = case_
    ranks = _dense(raw)
    body = _ranking_text(ranks, style, member, sep=data.draw(st.sampled_from([",", ", "])))
    pre = data.draw(st.sampled_from([*PREAMBLES, "I rank the agents {see below}:"]))
    text = f"{pre}\n{body}\n{data.draw(explanation)}"
    np.testing.assert_array_equal(parse_agent_ranking(text, n), ranks)


@fuzz
@given(ranking_case, st.data())
def test_agent_ranking_refuses_malformed_rankings(case_, data):
    n, raw = case_
    ranks = _dense(raw)
    lines = format_agent_ranking(ranks).splitlines()
    fault = data.draw(
        st.sampled_from(
            ["missing", "duplicate", "out_of_range", "zero", "gap", "permuted", "restated",
             "member", "rank_number", "empty"]
        )
    )  # fmt: skip
    a = data.draw(st.integers(1, n))
    if fault == "missing":
        kept = [
            [str(i + 1) for i in np.flatnonzero(ranks == r) if i + 1 != a]
            for r in sorted(set(ranks.tolist()))
        ]
        text = "\n".join(f"Rank #{k + 1} : {{{','.join(m)}}}" for k, m in enumerate(kept))
    elif fault == "duplicate":
        text = "\n".join(lines) + f"\nRank #{len(lines) + 1} : {{{a}}}"
    elif fault in ("out_of_range", "zero"):
        bad = data.draw(st.sampled_from([n + 1, n + 10, 12])) if fault == "out_of_range" else 0
        text = "\n".join(lines[:-1] + [lines[-1].replace("}", f",{bad}}}")])
    elif fault == "gap":
        text = "\n".join(lines[:-1] + [lines[-1].replace(f"#{len(lines)}", f"#{len(lines) + 1}")])
    elif fault == "permuted":
        if len(lines) < 2:
            lines = lines + ["Rank #2 : {1}"]
        text = "\n".join(lines[::-1])
    elif fault == "restated":
        text = "\n".join(lines + lines)
    elif fault == "member":
        junk = data.draw(
            st.sampled_from(["-1", "+1", "1.5", "2b", "A1", "２", "1 and 2", "x", "01"])
        )
        text = "\n".join(lines[:-1] + [lines[-1].replace("{", "{" + junk + ",")])
    elif fault == "rank_number":
        junk = data.draw(st.sampled_from(["1.5", "-1", "２", "x"]))
        text = "\n".join([lines[0].replace("#1", "#" + junk)] + lines[1:])
    else:
        text = "\n".join(lines + [f"Rank #{len(lines) + 1} : {{}}"])
    assert_refused(lambda t: parse_agent_ranking(t, n), text)


def test_agent_ranking_huge_inputs():
    for text in HUGE:
        assert_fast(lambda t: parse_agent_ranking(t, 3), text)

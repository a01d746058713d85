"""Parsers: round trips, the papers' own examples, and fuzzing (only ParseError escapes)."""

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from jaxmarl_llm.lm.parsers import (
    ParseError,
    format_agent_ranking,
    parse_agent_messages,
    parse_agent_ranking,
    parse_hash_choice,
    parse_option,
    parse_pair_choice,
    parse_python_block,
)

# Words without digits, '#', backticks or the parsers' marker words.
_words = st.text(alphabet="abcdefghjkmnpqstuvwxyz ,;", max_size=40)
_any_text = st.text(max_size=300)
_LABEL = {"1": 1.0, "2": 0.0, "0": 0.5}


@settings(max_examples=300, deadline=None)
@given(_any_text)
def test_fuzz_only_parse_errors_escape(text):
    parsers = [
        parse_pair_choice,
        parse_hash_choice,
        lambda t: parse_agent_ranking(t, 3),
        parse_python_block,
        lambda t: parse_python_block(t, "planning_function"),
        lambda t: parse_option(t, ["pass", "long pass", "shoot"]),
        lambda t: parse_agent_messages(t, 2),
    ]
    for parse in parsers:
        try:
            parse(text)
        except ParseError as e:
            assert e.raw == text and e.reason


@settings(max_examples=200, deadline=None)
@given(_words, st.sampled_from(["1", "2", "0"]), _words)
def test_pair_choice_round_trip(before, choice, after):
    assert parse_pair_choice(f"{before}\nAnswer: {choice}\n{after}") == _LABEL[choice]
    assert parse_pair_choice(f" {choice}. ") == _LABEL[choice]


def test_pair_choice_cases():
    assert parse_pair_choice("State 1 is worse than state 2, so the answer is 2.") == 0.0
    assert parse_pair_choice("I prefer 1") == 1.0
    assert parse_pair_choice("**0**") == 0.5
    with pytest.raises(ParseError, match="ambiguous choices"):
        parse_pair_choice("either 1 or 2")
    with pytest.raises(ParseError, match="no choice"):
        parse_pair_choice("I cannot tell.")


@settings(max_examples=200, deadline=None)
@given(st.lists(_words, max_size=4), st.sampled_from(["1", "2", "0"]))
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


@settings(max_examples=100, deadline=None)
@given(st.from_regex(r"[a-z_][a-z0-9_]{0,12}", fullmatch=True), _words)
def test_python_block_round_trip(name, prose):
    code = f"def {name}(state):\n    return {{'agent_0': 1}}"
    text = f"{prose}\n```python\n{code}\n```\n{prose}"
    if name in {"def", "return", "if", "in", "is", "or", "and", "not", "for", "as"}:
        return  # keywords are not function names
    assert parse_python_block(text, name) == code


def test_python_block_picks_the_valid_block_with_the_function():
    text = (
        "```python\ndef planning_function(s):\n    return {}\n```\n"
        "Fixed version:\n```python\ndef planning_function(s):\n    return {'a': 1}\n```\n"
        "```python\nthis is not python(\n```"
    )
    assert "{'a': 1}" in parse_python_block(text, "planning_function")
    with pytest.raises(ParseError, match="no function 'compute_reward'"):
        parse_python_block(text, "compute_reward")
    with pytest.raises(ParseError, match="no fenced"):
        parse_python_block("Here is my plan: go left.")


@settings(max_examples=200, deadline=None)
@given(
    st.lists(
        st.from_regex(r"[a-z]{3,8}( [a-z]{3,8})?", fullmatch=True),
        min_size=1,
        max_size=6,
        unique=True,
    ),
    st.data(),
)
def test_option_round_trip(options, data):
    k = data.draw(st.integers(0, len(options) - 1))
    assert parse_option(f"Reflection...\nSkill: {options[k].upper()}", options) == k
    assert parse_option(str(k + 1), options) == k


def test_option_cases():
    skills = ["pass", "long pass", "shoot", "keep formation"]
    assert parse_option("I would pick long pass to stretch the defence", skills) == 1
    assert parse_option("Skill: Keep_Formation", skills) == 3
    with pytest.raises(ParseError, match="several options"):
        parse_option("pass or shoot", skills)
    with pytest.raises(ParseError, match="option number 9"):
        parse_option("Skill 9", skills)
    with pytest.raises(ParseError, match="names none"):
        parse_option("dribble", skills)


def test_agent_messages():
    text = 'Agent 1: "I take the onion"\nAgent 2: chop the tomato\n'
    assert parse_agent_messages(text, 2) == ["I take the onion", "chop the tomato"]
    with pytest.raises(ParseError, match=r"no message for agents \[2\]"):
        parse_agent_messages("Agent 1: go", 2)
    with pytest.raises(ParseError, match="agent 1 has two messages"):
        parse_agent_messages("Agent 1: go\nAgent 1: stop", 1)

"""YOLO-MARL's answer form, a fenced Python block: round trips, picking the valid block,
and property fuzzing (``answer_noise``)."""

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from jaxmarl_llm.lm.parsers import ParseError
from jaxmarl_llm.methods.yolo.answers import parse_python_block
from tests.methods.answer_noise import (
    HUGE,
    assert_fast,
    assert_refused,
    explanation,
    fuzz,
    preamble,
    words,
)


@settings(max_examples=100, deadline=None)
@given(st.from_regex(r"[a-z_][a-z0-9_]{0,12}", fullmatch=True), words)
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


# ----- YOLO-MARL: fenced Python -----------------------------------------------------------

CODE = "def planning_function(processed_state):\n    return {'agent_0': 1}"
FENCES = [
    "```python\n{}\n```",
    "```py\n{}\n```",
    "```Python3\n{}\n```",
    "```\n{}\n```",
    "```python\n{}\n",
]


@fuzz
@given(st.sampled_from(FENCES), preamble, explanation, st.integers(0, 2))
def test_python_block_well_formed_in_noise(fence, pre, post, older):
    # Older drafts first (the last valid block wins), then the answer.
    drafts = ["```python\ndef planning_function(s):\n    return {}\n```\n"] * older
    tail = "" if fence.endswith("\n{}\n") else post  # an unclosed fence runs to the end
    text = pre + "\n" + "".join(drafts) + fence.format(CODE) + "\n" + tail
    assert parse_python_block(text, "planning_function") == CODE


BAD_BLOCKS = [
    "```python\ndef other(s):\n    return {}\n```",  # required function missing
    "```python\ndef outer():\n    def planning_function(s):\n        return {}\n```",  # nested
    "```python\nplanning_function = lambda s: {}\n```",
    '```json\n{"planning_function": 1}\n```',  # not Python
    "```python\ndef planning_function(s):\n    return {\n```",  # syntax error
    "```python\ndef planning_function(s):\n    return {'a':",  # unclosed and truncated
    "```python\ndef plan(s):\n    return {}\n```\n```python\nnot python(\n```",  # none valid
    "Here is my plan: go left.",
    "```python\n" + "(" * 300 + "\n```",
    "```python\n" + "-" * 100_000 + "1\n```",  # nested too deeply for Python's parser
    "```python\nx = " + "[" * 5000 + "\n```",
]


@pytest.mark.parametrize("text", BAD_BLOCKS)
def test_python_block_refuses(text):
    assert_refused(lambda t: parse_python_block(t, "planning_function"), text)


def test_python_block_huge_inputs():
    for text in HUGE:
        assert_fast(lambda t: parse_python_block(t, "planning_function"), text)

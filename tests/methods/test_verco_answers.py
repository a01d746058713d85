"""Verco's answer form, "Agent k: <message>" lines: cases and property fuzzing
(``answer_noise``)."""

import pytest
from hypothesis import given
from hypothesis import strategies as st

from jaxmarl_llm.lm.parsers import ParseError
from jaxmarl_llm.methods.verco.answers import parse_agent_messages
from tests.methods.answer_noise import (
    HUGE,
    assert_fast,
    assert_refused,
    explanation,
    fuzz,
    preamble,
)


def test_agent_messages():
    text = 'Agent 1: "I take the onion"\nAgent 2: chop the tomato\n'
    assert parse_agent_messages(text, 2) == ["I take the onion", "chop the tomato"]
    with pytest.raises(ParseError, match=r"no message for agents \[2\]"):
        parse_agent_messages("Agent 1: go", 2)
    with pytest.raises(ParseError, match="agent 1 has two messages"):
        parse_agent_messages("Agent 1: go\nAgent 1: stop", 1)


# ----- Verco: "Agent k: <message>" lines -------------------------------------------------

message = st.lists(
    st.sampled_from(["go", "left", "chop", "the", "onion", "wait", "plate"]), min_size=1, max_size=6
).map(" ".join)
LINE_STYLES = ["Agent {k}: {m}", "- Agent {k}: {m}", "**Agent {k}**: {m}", "Agent {k}: \"{m}\"",
               "AGENT {k} - {m}", "Agent #{k}: {m}", "Agent {k} (chopper): {m}"]  # fmt: skip


@fuzz
@given(st.integers(1, 12), st.data())
def test_agent_messages_well_formed_in_noise(n, data):
    messages = [data.draw(message) for _ in range(n)]
    order = data.draw(st.permutations(range(n)))  # any order; "Agent 1" vs "Agent 10"
    style = data.draw(st.sampled_from(LINE_STYLES))
    lines = [style.format(k=i + 1, m=messages[i]) for i in order]
    text = f"{data.draw(preamble)}\n" + "\n".join(lines) + f"\n{data.draw(explanation)}"
    assert parse_agent_messages(text, n) == messages, text


@fuzz
@given(st.integers(2, 12), st.data())
def test_agent_messages_refuse_malformed(n, data):
    lines = [f"Agent {i + 1}: go" for i in range(n)]
    fault = data.draw(
        st.sampled_from(["missing", "duplicate", "out_of_range", "zero", "id", "empty"])
    )
    k = data.draw(st.integers(0, n - 1))
    if fault == "missing":
        del lines[k]
    elif fault == "duplicate":
        lines.append(lines[k])
    elif fault == "out_of_range":
        lines.append(f"Agent {n + data.draw(st.integers(1, 20))}: go")
    elif fault == "zero":
        lines.append("Agent 0: go")
    elif fault == "id":
        junk = data.draw(st.sampled_from(["1.5", "-1", "1-2", "２", "01", "1a", "+1"]))
        lines[k] = f"Agent {junk}: go"
    else:
        lines[k] = f"Agent {k + 1}: **"
    assert_refused(lambda t: parse_agent_messages(t, n), "\n".join(lines))


def test_agent_messages_huge_inputs():
    for text in HUGE:
        assert_fast(lambda t: parse_agent_messages(t, 2), text)

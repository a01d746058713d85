"""Noise and adversarial pieces for fuzzing the answer parsers (``test_*_answers.py``).

The property: a parser returns the label a careful reader would take from the answer, or
raises ``ParseError``; nothing else escapes, and a 100 kB answer is read fast. Two kinds
of generated answers per form:
(a) a well-formed answer wrapped in realistic noise (preambles, markdown, case and
    whitespace, trailing explanations) -> must parse to the intended value;
(b) adversarial answers (signed, fractional, embedded and non-ASCII numbers, digits in
    words, conflicting or out-of-range choices, empty and huge texts) -> must raise.
Examples are bounded and derandomized (``fuzz``), so every run checks the same cases.
"""

import time

import pytest
from hypothesis import settings
from hypothesis import strategies as st

from jaxmarl_llm.lm.parsers import ParseError

CASES = 150  # examples per property test
fuzz = settings(max_examples=CASES, deadline=None, derandomize=True, database=None)

# ----- noise that carries no answer: no digits, negations or answer words ---------------

PREAMBLES = [
    "",
    "Sure.",
    "Let me compare the two situations carefully.",
    "Here is my judgement:",
    "After looking at the team target and the key steps,",
    "OK!",
]
EXPLANATIONS = [
    "",
    "The ego agent moved towards the switch.",
    "It brings the team closer to the target.",
    "This helps the teammates reach the goal.",
]
preamble = st.sampled_from(PREAMBLES)
explanation = st.sampled_from(EXPLANATIONS)
space = st.sampled_from([" ", "  ", "\t", " \n"])
newline = st.sampled_from(["\n", "\n\n", " \n", "\r\n"])
case = st.sampled_from([str, str.upper, str.lower, str.title])
wrap = st.sampled_from(["{}", "**{}**", "`{}`", "'{}'", '"{}"', "({})", "{}.", "*{}*"])
# Words without digits, '#', backticks or the parsers' marker words.
words = st.text(alphabet="abcdefghjkmnpqstuvwxyz ,;", max_size=40)


def assert_refused(parse, text):
    with pytest.raises(ParseError) as e:
        parse(text)
    assert e.value.raw == text and e.value.reason


# A backtracking pattern takes minutes on these texts; a linear one milliseconds.
HUGE_LIMIT_S = 2.0


def assert_fast(parse, text, refused=True):
    """Parse a huge text within HUGE_LIMIT_S; ``refused``: it must raise ParseError."""
    t0 = time.perf_counter()
    try:
        parse(text)
        raised = False
    except ParseError:
        raised = True
    assert time.perf_counter() - t0 < HUGE_LIMIT_S, f"{text[:20]!r}... took too long"
    assert raised or not refused, f"{text[:20]!r}... was not refused"


# Texts of 100 kB that trip backtracking patterns (many spaces, newlines, repeats).
HUGE = [
    " " * 100_000,
    "\n" * 100_000,
    "1 " * 50_000,
    "#1 " * 33_000,
    "1." * 50_000,
    "-" * 100_000,
    "1_" * 50_000,
    "9" * 100_000,
    "Rank #" + "1" * 5000 + " : {1}",
    "Agent " + "1" * 5000 + ": go",
    "Skill " + "2" * 5000,
    "```python\n" + "x" * 100_000,
    "Answer: " * 12_500,
    "rank" + " " * 100_000 + "#x",
    "Rank #1 : {" + "1," * 50_000,
    "agent" + " " * 100_000,
    "agent" + "\n" * 100_000,
    "\n" * 100_000 + "Agent 1",
    "next skill: a" + " " * 100_000 + "b",
    "```" + " " * 100_000,
    "```python\n" * 10_000,
    "pass " * 20_000,
    "state" + " " * 100_000 + "1",
    "a" * 100_000,
]


# ----- numbers that are never a choice, and option names that contain each other ---------

SIGNED_FRACTIONAL = ["-1", "+2", "-2", "+1", "−1", "1.5", "0.5", "2.0", "1,5", "-0"]
EMBEDDED = ["12", "2024", "10", "21", "102", "0012", "1e2", "1/2", "1-2", "1:2"]
IN_WORDS = ["option2b", "A1", "h2o", "x1", "state2", "1st", "2nd", "B2B", "v1.2"]
UNICODE_DIGITS = ["２", "٢", "१", "𝟐", "１", "۲", "²"]
EMPTY = ["", " ", "\n\t ", "...", "?!", "**", "```", "-", "#"]

# Names that are prefixes of, or contained in, each other.
POOL = ["pass", "long pass", "shoot", "encourage attack", "encourage attacking", "attack"]

"""LCA's answer forms: the state-pair choice "1"/"2"/"0" and the team goal with its key
steps; round trips, the paper's examples, and property fuzzing (``answer_noise``)."""

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from jaxmarl_llm.lm.parsers import CHOICE_LABELS, ParseError
from jaxmarl_llm.methods.lca.answers import parse_pair_choice, parse_team_goal
from tests.methods.answer_noise import (
    EMBEDDED,
    EMPTY,
    HUGE,
    IN_WORDS,
    SIGNED_FRACTIONAL,
    UNICODE_DIGITS,
    assert_fast,
    assert_refused,
    case,
    explanation,
    fuzz,
    newline,
    preamble,
    space,
    words,
    wrap,
)

_LABEL = {"1": 1.0, "2": 0.0, "0": 0.5}


@settings(max_examples=200, deadline=None)
@given(words, st.sampled_from(["1", "2", "0"]), words)
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


# ----- LCA: "1" / "2" / "0" -------------------------------------------------------------

# Forms that sit on a line of their own, and forms that read as a sentence.
PAIR_LINE_FORMS = [
    "{c}", "#{c}", "Answer: {c}", "answer:{c}", "Final answer: {c}", "**Answer:** {c}",
    "Output: {c}", "Option {c}", "My choice: {c}",
]  # fmt: skip
PAIR_SENTENCE_FORMS = ["The answer is {c}", "I prefer {c}", "I would go with option {c}"]
PAIR_COMPARISONS = [
    "State {c} is better",
    "State {c} is clearly better",
    "State {o} is worse",
    "The better state is {c}",
]


@fuzz
@given(st.sampled_from("120"), st.data())
def test_pair_choice_well_formed_in_noise(c, data):
    o = {"1": "2", "2": "1", "0": "0"}[c]
    kind = data.draw(st.sampled_from(["line", "sentence", "comparison", "leading"]))
    if kind == "comparison" and c == "0":
        kind = "line"
    if kind == "line":
        core = data.draw(st.sampled_from(PAIR_LINE_FORMS)).format(c=c)
        core = data.draw(wrap).format(data.draw(case)(core))
        text = data.draw(preamble) + data.draw(newline) + core + data.draw(newline)
    elif kind == "leading":
        core = data.draw(wrap).format(c)
        text = core + data.draw(st.sampled_from([" because ", " - ", ", since ", "\n"]))
    else:
        forms = PAIR_SENTENCE_FORMS if kind == "sentence" else PAIR_COMPARISONS
        core = data.draw(case)(data.draw(st.sampled_from(forms)).format(c=c, o=o))
        text = data.draw(preamble) + data.draw(space) + core + ". "
    text += data.draw(explanation)
    assert parse_pair_choice(text) == CHOICE_LABELS[c], text


OUT_OF_RANGE = ["3", "4", "9", "7"]
CONFLICTS = [
    "1 or 2", "2, no 1", "either 1 or 2", "1 and 2", "2 / 1", "2, 1", "0 or 1",
    "Answer: 1 or 2", "Answer: 2, no 1", "Answer: 1\nAnswer: 2", "2\n1",
    "State 1 is better. State 2 is better.", "Answer: 2 (or maybe 1)",
]  # fmt: skip
NEGATED = ["not 1", "Answer: not 2", "I would not choose 1", "State 1 is not better",
           "I don't think state 2 is better", "no 2"]  # fmt: skip


@fuzz
@given(
    st.sampled_from(SIGNED_FRACTIONAL + EMBEDDED + IN_WORDS + OUT_OF_RANGE + UNICODE_DIGITS),
    st.sampled_from(
        ["{}", "Answer: {}", "**{}**", "The answer is {}.", "#{}", "State {} is better"]
    ),
    wrap,
    preamble,
    explanation,
)
def test_pair_choice_refuses_numbers_that_are_not_choices(number, form, wrapper, pre, post):
    text = f"{pre}\n{wrapper.format(form.format(number))}\n{post}"
    assert_refused(parse_pair_choice, text)


@fuzz
@given(st.sampled_from(CONFLICTS + NEGATED + EMPTY), preamble, explanation)
def test_pair_choice_refuses_conflicts_negations_and_empty(core, pre, post):
    assert_refused(parse_pair_choice, f"{pre}\n{core}\n{post}")


def test_pair_choice_reads_the_answer_after_huge_noise_and_refuses_huge_junk():
    assert parse_pair_choice("The ego agent waits. " * 5000 + "\nAnswer: 2") == 0.0
    for text in HUGE:
        assert_fast(parse_pair_choice, text, refused=text not in ("1 " * 50_000, "#1 " * 33_000))
    assert parse_pair_choice("1 " * 50_000) == 1.0  # one answer, restated


# ----- LCA: "Team goal: ..." / "Key steps:" / numbered steps --------------------------

GOALS = ["Open the door and reach the goal.", "heal every victim, then go home"]
STEPS = ["Trigger the left switch.", "walk (x, y) to the door", "reach the goal", "go home"]


@fuzz
@given(
    st.sampled_from(GOALS),
    st.lists(st.sampled_from(STEPS), min_size=1, max_size=4),
    preamble,
    st.sampled_from(["Team goal: {}", "**Team goal:** {}", "TEAM GOAL:{}", " {}"]),
    st.sampled_from(["Key steps:", "**Key steps:**", "key steps :"]),
    st.sampled_from(["{k}. {s}", "{k}) {s}", "  {k}. {s}"]),
    st.sampled_from([" ", "\n"]),
    newline,
    st.sampled_from(["", "\n\nThat is all.", "\n\nStep 9: more text"]),
)
def test_team_goal_well_formed_in_noise(
    goal, steps, pre, goal_form, label, step_form, joint, nl, post
):
    lines = [step_form.format(k=k, s=s) for k, s in enumerate(steps, 1)]
    between = nl if joint == "\n" else " "
    body = between.join(lines) if joint == "\n" or len(steps) == 1 else " ".join(lines)
    head = goal_form.format(goal)
    text = (f"{pre}{nl}{head}" if goal_form != " {}" else head) + f"{nl}{label}{nl}{body}"
    if joint == "\n" and len(steps) > 1:
        text += post
    got = parse_team_goal(text)
    assert got.goal == goal and got.steps == tuple(steps)


@pytest.mark.parametrize(
    "text",
    [
        "", "Team goal: x", "Key steps: 1. a", "Team goal: x\nKey steps:",
        "Team goal: x\nKey steps:\n1. a\n3. b", "Team goal: x\nKey steps:\n2. a\n3. b",
        "Team goal: x\nKey steps: first 1. a 2. b", "Team goal: x\nKey steps:\n1. a\n2.",
        "Team goal: <one sentence>\nKey steps:\n1. a", "Team goal: x\nKey steps: 1. <step>",
        "Team goal: x\nKey steps:\n1. a\n1. b", "Team goal: x\nKey steps:\n１. a\n1. c\n2. d",
    ],
)  # fmt: skip
def test_team_goal_refuses_malformed(text):
    assert_refused(parse_team_goal, text)


def test_team_goal_huge_inputs():
    for text in [
        *HUGE,
        "Key steps: " + "1. a\n" * 20_000 + "3. b",
        "team goal:" * 10_000,
        "Team goal: x\nKey steps:\n1. a\n" + "b\n" * 50_000 + "2. c\n3. d",
    ]:
        assert_fast(parse_team_goal, text, refused=False)
    assert_fast(parse_team_goal, "key" + " " * 100_000 + "steps")

"""V-GEPF's answer form, one option of a list ("Next Skill:"): round trips, cases, and
property fuzzing (``answer_noise``)."""

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from jaxmarl_llm.lm.parsers import ParseError
from jaxmarl_llm.methods.vgepf.answers import parse_next_option, parse_option
from tests.methods.answer_noise import (
    HUGE,
    POOL,
    assert_fast,
    assert_refused,
    case,
    fuzz,
    newline,
    preamble,
    wrap,
)


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


# ----- V-GEPF: one option of a list, "Next Skill:" ----------------------------------------


def _styled(name, style):
    return {"space": name, "snake": name.replace(" ", "_"), "kebab": name.replace(" ", "-")}[style]


@fuzz
@given(st.integers(0, len(POOL) - 1), st.data())
def test_option_well_formed_in_noise(k, data):
    name = data.draw(case)(
        _styled(POOL[k], data.draw(st.sampled_from(["space", "snake", "kebab"])))
    )
    other = POOL[data.draw(st.integers(0, len(POOL) - 1).filter(lambda j: j != k))]
    form = data.draw(
        st.sampled_from(
            ["{name}", "Skill: {name}", "**Skill:** {name}", "Answer: {name}.", "{number}",
             "Option {number}", "Skill #{number}", "I would pick {name} now",
             "Skill: {name} (not {other})", "Rather than {other}, {name}"]
        )
    )  # fmt: skip
    if "{other}" in form and (POOL[k] in other or other in POOL[k]):
        form = "Skill: {name}"  # a negated name containing the answer hides it
    if "{name} now" in form and any(POOL[k] in o and o != POOL[k] for o in POOL):
        form = "{name}"  # "pass now": fine; "attack now" vs "encourage attack": fine too
    core = data.draw(wrap).format(form.format(name=name, number=k + 1, other=other))
    text = core if "{number}" in form else f"{data.draw(preamble)}\n{core}"
    assert parse_option(text, POOL) == k, text


@fuzz
@given(st.integers(0, len(POOL) - 1), st.data())
def test_next_option_well_formed_after_an_analysis(k, data):
    other = POOL[(k + 1) % len(POOL)]
    analysis = f"Analysis: the record of {other} rose, but the team needs more."
    name = data.draw(case)(POOL[k])
    line = data.draw(
        st.sampled_from(
            ["Next Skill: {}", "**Next Skill:** *{}*", "next skill : {}.", "Next Skill:\n{}"]
        )
    )
    text = f"{analysis}{data.draw(newline)}{line.format(name)}{data.draw(newline)}"
    assert parse_next_option(text, POOL) == k, text


OPTION_BAD = [
    "-1", "+2", "1.5", "0", "7", "12", "option2b", "Skill 2b", "２", "Skill: ٢",
    "pass or shoot", "Skill: shoot, no, pass", "not shoot", "Skill: not shoot",
    "avoid the long pass",
    "not only pass but also shoot", "dribble", "", " ", "**", "Skill:",
]  # fmt: skip


@fuzz
@given(
    st.sampled_from(OPTION_BAD),
    st.sampled_from(["{}", "Next Skill: {}", "Analysis: hm.\nNext Skill: {}"]),
)
def test_option_and_next_option_refuse(core, form):
    text = form.format(core)
    assert_refused(lambda t: parse_next_option(t, POOL), text)
    if not form.startswith("Analysis"):
        assert_refused(lambda t: parse_option(t, POOL), core)


def test_option_huge_inputs():
    for text in HUGE:
        assert_fast(lambda t: parse_option(t, POOL), text, refused=not text.startswith("pass "))
        assert_fast(
            lambda t: parse_next_option(t, POOL), text, refused=not text.startswith("pass ")
        )
    assert_refused(lambda t: parse_option(t, POOL), "pass " * 20_000 + "shoot")

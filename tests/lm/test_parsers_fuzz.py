"""Property fuzzing of the answer parsers against every answer form the prompts ask for.

The property: a parser returns the label a careful reader would take from the answer, or
raises ``ParseError``; nothing else escapes, and a 100 kB answer is read fast. Two kinds
of generated answers per form:
(a) a well-formed answer wrapped in realistic noise (preambles, markdown, case and
    whitespace, trailing explanations) -> must parse to the intended value;
(b) adversarial answers (signed, fractional, embedded and non-ASCII numbers, digits in
    words, conflicting or out-of-range choices, empty and huge texts) -> must raise.
Examples are bounded and derandomized, so every run checks the same cases.
"""

import time

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from jaxmarl_llm.lm import templates
from jaxmarl_llm.lm.parsers import (
    CHOICE_LABELS,
    ParseError,
    format_agent_ranking,
    parse_agent_messages,
    parse_agent_ranking,
    parse_hash_choice,
    parse_next_option,
    parse_option,
    parse_pair_choice,
    parse_python_block,
    parse_team_goal,
)

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


def _raises(parse, text):
    with pytest.raises(ParseError) as e:
        parse(text)
    assert e.value.raw == text and e.value.reason


# A backtracking pattern takes minutes on these texts; a linear one milliseconds.
HUGE_LIMIT_S = 2.0


def _fast(parse, text, refused=True):
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


SIGNED_FRACTIONAL = ["-1", "+2", "-2", "+1", "−1", "1.5", "0.5", "2.0", "1,5", "-0"]
EMBEDDED = ["12", "2024", "10", "21", "102", "0012", "1e2", "1/2", "1-2", "1:2"]
IN_WORDS = ["option2b", "A1", "h2o", "x1", "state2", "1st", "2nd", "B2B", "v1.2"]
OUT_OF_RANGE = ["3", "4", "9", "7"]
UNICODE_DIGITS = ["２", "٢", "१", "𝟐", "１", "۲", "²"]
CONFLICTS = [
    "1 or 2", "2, no 1", "either 1 or 2", "1 and 2", "2 / 1", "2, 1", "0 or 1",
    "Answer: 1 or 2", "Answer: 2, no 1", "Answer: 1\nAnswer: 2", "2\n1",
    "State 1 is better. State 2 is better.", "Answer: 2 (or maybe 1)",
]  # fmt: skip
NEGATED = ["not 1", "Answer: not 2", "I would not choose 1", "State 1 is not better",
           "I don't think state 2 is better", "no 2"]  # fmt: skip
EMPTY = ["", " ", "\n\t ", "...", "?!", "**", "```", "-", "#"]


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
    _raises(parse_pair_choice, text)


@fuzz
@given(st.sampled_from(CONFLICTS + NEGATED + EMPTY), preamble, explanation)
def test_pair_choice_refuses_conflicts_negations_and_empty(core, pre, post):
    _raises(parse_pair_choice, f"{pre}\n{core}\n{post}")


def test_pair_choice_reads_the_answer_after_huge_noise_and_refuses_huge_junk():
    assert parse_pair_choice("The ego agent waits. " * 5000 + "\nAnswer: 2") == 0.0
    for text in HUGE:
        _fast(parse_pair_choice, text, refused=text not in ("1 " * 50_000, "#1 " * 33_000))
    assert parse_pair_choice("1 " * 50_000) == 1.0  # one answer, restated


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
    _raises(parse_hash_choice, f"{pre}\n{core}\n{post}")


def test_hash_choice_huge_inputs():
    assert parse_hash_choice("Trajectory #1 lost. " * 5000 + "\n#1") == 1.0
    for text in HUGE:
        _fast(parse_hash_choice, text, refused=text != "#1 " * 33_000)
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
    _raises(lambda t: parse_agent_ranking(t, n), text)


def test_agent_ranking_huge_inputs():
    for text in HUGE:
        _fast(lambda t: parse_agent_ranking(t, 3), text)


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
    _raises(lambda t: parse_python_block(t, "planning_function"), text)


def test_python_block_huge_inputs():
    for text in HUGE:
        _fast(lambda t: parse_python_block(t, "planning_function"), text)


# ----- V-GEPF: one option of a list, "Next Skill:" ----------------------------------------

# Names that are prefixes of, or contained in, each other.
POOL = ["pass", "long pass", "shoot", "encourage attack", "encourage attacking", "attack"]


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
    _raises(lambda t: parse_next_option(t, POOL), text)
    if not form.startswith("Analysis"):
        _raises(lambda t: parse_option(t, POOL), core)


def test_option_huge_inputs():
    for text in HUGE:
        _fast(lambda t: parse_option(t, POOL), text, refused=not text.startswith("pass "))
        _fast(lambda t: parse_next_option(t, POOL), text, refused=not text.startswith("pass "))
    _raises(lambda t: parse_option(t, POOL), "pass " * 20_000 + "shoot")


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
    _raises(lambda t: parse_agent_messages(t, n), "\n".join(lines))


def test_agent_messages_huge_inputs():
    for text in HUGE:
        _fast(lambda t: parse_agent_messages(t, 2), text)


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
    _raises(parse_team_goal, text)


def test_team_goal_huge_inputs():
    for text in [
        *HUGE,
        "Key steps: " + "1. a\n" * 20_000 + "3. b",
        "team goal:" * 10_000,
        "Team goal: x\nKey steps:\n1. a\n" + "b\n" * 50_000 + "2. c\n3. d",
    ]:
        _fast(parse_team_goal, text, refused=False)
    _fast(parse_team_goal, "key" + " " * 100_000 + "steps")


# ----- every prompt's answer form is fuzzed here ------------------------------------------

FUZZED_FORMS = {
    "lca_pair_ranking": parse_pair_choice,
    "dpm_trajectory_comparison": parse_hash_choice,
    "dpm_episode_comparison": parse_hash_choice,
    "dpm_agent_ranking": parse_agent_ranking,
    "yolo_planning_function": parse_python_block,
    "yolo_reward_function": parse_python_block,
    "vgepf_skill_choice": parse_next_option,
    "verco_message": parse_agent_messages,
    "lca_team_goal": parse_team_goal,
}


def test_every_packaged_prompt_has_its_answer_form_fuzzed():
    for name in templates.template_names():
        parser, _ = templates.ANSWER_FORMS[name]
        if parser is str.strip:  # free text (YOLO's strategy) has no form to get wrong
            continue
        assert getattr(parser, "func", parser) is FUZZED_FORMS[name], name


@settings(max_examples=CASES, deadline=None, derandomize=True, database=None)
@given(
    st.lists(
        st.sampled_from(
            [*SIGNED_FRACTIONAL, *EMBEDDED, *IN_WORDS, *UNICODE_DIGITS, "1", "2", "0", "#1", "#2",
             "Answer:", "Rank #1 : {1}", "Agent 1:", "Next Skill:", "```python\n", "```", "\n",
             " or ", " not ", "better", "worse", "pass", "shoot", "def planning_function(s):"]
        ),
        max_size=12,
    ).map("".join)
)  # fmt: skip
def test_only_parse_errors_escape_from_mixed_pieces(text):
    for parse in [
        parse_pair_choice,
        parse_hash_choice,
        lambda t: parse_agent_ranking(t, 2),
        lambda t: parse_python_block(t, "planning_function"),
        lambda t: parse_option(t, POOL),
        lambda t: parse_next_option(t, POOL),
        lambda t: parse_agent_messages(t, 2),
        parse_team_goal,
    ]:
        try:
            value = parse(text)
        except ParseError as e:
            assert e.raw == text and e.reason
            continue
        if parse in (parse_pair_choice, parse_hash_choice):
            assert value in (0.0, 0.5, 1.0)

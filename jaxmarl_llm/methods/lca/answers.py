"""LCA's answer forms, and its prompt templates (``prompts/``) with the form each asks for.

- pair choice ``"1"`` / ``"2"`` / ``"0"`` (the state-pair ranking, ``lca_pair_ranking``):
  first, second, equal, read by the shared two-way choice reader
  (:mod:`jaxmarl_llm.lm.parsers`);
- a team goal and numbered key steps (the goal inferred from a trajectory's rewards,
  ``lca_team_goal``).
"""

from __future__ import annotations

import dataclasses
import re

from jaxmarl_llm.lm import templates
from jaxmarl_llm.lm.parsers import (
    CHOICE_LABELS,
    NEGATION,
    TOKEN,
    ParseError,
    comparisons,
    decide,
    explicit_answers,
    token_choice,
)

# ----- the state-pair choice -------------------------------------------------------------

_SHORT_ANSWER_WORDS = 5
_SHORT_ANSWER_CHARS = 200


def parse_pair_choice(text: str) -> float:
    """``"1"`` / ``"2"`` / ``"0"`` -> P(first preferred) in {1, 0, 0.5}.

    The prompt ends in "Answer:", so the answer is read, in this order of trust, from
    1. explicit answers, which must all agree: the text's leading token ("2", "**2**",
       "#2", "(1)", "2 because ..."; not a list number "1. State 1 has ...\n2. ..."), a
       line that is only the answer ("2", "Answer: 2"; "1:" is a heading), and a marker
       with its choice ("Answer: 2", "the answer is state 1", "I prefer 1", "I'd go
       with option 2", "the better one is 2");
    2. else lines that only name one state ("State 2", "**Option 1**"), which must agree
       (two such lines are headings, and raise);
    3. else comparisons, which must all agree: "State 1 is better", "2 is worse" (-> 1);
    4. else a short answer (at most five words and 200 characters: "I think 2") naming
       exactly one choice digit and no negation.
    An explicit answer that is not a clean choice ("Answer: -1", "Answer: 1.5",
    "Answer: 12", "Answer: 3", "Answer: ２", "Answer: A1"), that is followed by another
    number ("1 or 2", "2, no 1", "1/2", "2, 1"), or that is negated in its clause ("I
    would not choose 1", "I don't think state 1 is better") raises; so does a level
    whose statements disagree. Words for numbers ("two") and "equally good" are not
    read. A later level is not checked against an earlier one: "Answer: 2. State 1 is
    better" reads 2.
    """
    try:
        choice = decide([*explicit_answers(text, bare_lines=True), comparisons(text)])
    except ValueError as e:
        raise ParseError("pair_choice", str(e), text) from None
    if choice is not None:
        return CHOICE_LABELS[choice]
    if len(text) > _SHORT_ANSWER_CHARS:
        raise ParseError("pair_choice", "no stated choice 1/2/0 found", text)
    named = {c for m in TOKEN.finditer(text) if (c := token_choice(m.group())) is not None}
    if not named:
        raise ParseError("pair_choice", "no choice 1/2/0 found", text)
    if len(named) > 1:
        raise ParseError("pair_choice", f"ambiguous choices {sorted(named)}", text)
    if NEGATION.search(text):
        raise ParseError("pair_choice", "a choice next to a negation", text)
    if len(text.split()) > _SHORT_ANSWER_WORDS:
        raise ParseError(
            "pair_choice", "no stated answer, and too long to read a lone digit as one", text
        )
    return CHOICE_LABELS[named.pop()]


# ----- the team goal ---------------------------------------------------------------------


@dataclasses.dataclass(frozen=True)
class TeamGoal:
    """LCA's team goal and its key steps in order (the ranking prompts' ``team_target``
    and ``key_steps``)."""

    goal: str
    steps: tuple[str, ...]

    def key_steps_text(self) -> str:
        """``"1. a 2. b"`` (one step: its text alone), the form the ranking prompts show."""
        if len(self.steps) == 1:
            return self.steps[0]
        return " ".join(f"{k}. {step}" for k, step in enumerate(self.steps, 1))

    def answer_text(self) -> str:
        """The answer form the team-goal prompt asks for, which ``parse_team_goal`` reads."""
        steps = [f"{k}. {step}" for k, step in enumerate(self.steps, 1)]
        return "\n".join([f"Team goal: {self.goal}", "Key steps:", *steps])


_GOAL_LABEL = re.compile(r"team[ \t]+goal[ \t*]*:", re.I)
_STEPS_LABEL = re.compile(r"key[ \t]+steps[ \t*]*:\**", re.I)
_LINE_STEP = re.compile(r"^\s*([0-9]{1,2})[.)](?:\s+(.*))?$")
_INLINE_STEP = re.compile(r"(?:^|(?<=\s))([0-9]{1,2})[.)](?:\s+|$)")


def parse_key_steps(text: str) -> tuple[str, ...]:
    """Numbered steps, one per line where several lines start with a number (``1. a`` /
    ``2) b``; a line without a number continues the step before it, unless a blank line
    came between: that text follows the list), else inline (``1. a 2. b``: a number that
    is not the next one stays in the step's text). Numbering runs 1, 2, ... Text without
    numbers is one step."""
    lines = text.strip().splitlines()
    if sum(bool(_LINE_STEP.match(line)) for line in lines) > 1:
        parts: list[list[str]] = []  # the lines of each step
        blank = False  # a blank line since the last step line
        for line in lines:
            m = _LINE_STEP.match(line)
            if m:
                if int(m.group(1)) != len(parts) + 1:
                    raise ParseError(
                        "team_goal", f"step {m.group(1)} where {len(parts) + 1} was due", text
                    )
                parts.append([m.group(2) or ""])
                blank = False
            elif not line.strip():
                blank = bool(parts)
            elif blank:
                break  # text after the list
            elif parts:
                parts[-1].append(line)
            else:
                raise ParseError("team_goal", "text before the first numbered step", text)
        steps = [" ".join(" ".join(p).split()) for p in parts]
    else:
        flat = " ".join(line.strip() for line in lines)
        cuts, due = [], 1
        for m in _INLINE_STEP.finditer(flat):
            if int(m.group(1)) == due:
                cuts.append(m)
                due += 1
        if not cuts:
            steps = [flat] if flat else []
        elif cuts[0].start() != 0:
            raise ParseError("team_goal", "text before step 1", text)
        else:
            ends = [c.start() for c in cuts[1:]] + [len(flat)]
            steps = [flat[c.end() : e].strip() for c, e in zip(cuts, ends, strict=True)]
    if not steps or any(not step for step in steps):
        raise ParseError("team_goal", "an empty key step" if steps else "no key steps", text)
    return tuple(steps)


def parse_team_goal(text: str) -> TeamGoal:
    """``Team goal: <sentence>`` (the text after the last such label; without one, all the
    text before the steps: a prompt may end with the label), then ``Key steps:`` and the
    numbered steps (``parse_key_steps``) -> ``TeamGoal``. A goal or step that starts with
    a ``<placeholder>`` of the asked form is no answer."""
    label = _STEPS_LABEL.search(text)
    if label is None:
        raise ParseError("team_goal", "no 'Key steps:' label", text)
    head = text[: label.start()]
    marks = list(_GOAL_LABEL.finditer(head))  # the last label: a preamble may come first
    goal = " ".join(head[marks[-1].end() if marks else 0 :].split()).strip("*# ")
    if not goal.strip("*#.: "):
        raise ParseError("team_goal", "no team goal before 'Key steps:'", text)
    try:
        steps = parse_key_steps(text[label.end() :])
    except ParseError as e:
        raise ParseError("team_goal", e.reason, text) from None
    if any(_PLACEHOLDER.match(part) for part in (goal, *steps)):
        raise ParseError("team_goal", "repeats the answer form's <placeholders>", text)
    return TeamGoal(goal=goal, steps=steps)


_PLACEHOLDER = re.compile(r"\s*<[^<>]*>")  # "<one sentence>": the form, not an answer


# template -> (parser, what it returns)
ANSWER_FORMS = {
    "lca_pair_ranking": (parse_pair_choice, "P(state 1 better) in {1, 0, 0.5}"),
    "lca_team_goal": (parse_team_goal, "TeamGoal: goal and ordered key steps"),
}
templates.register(__package__, ANSWER_FORMS)

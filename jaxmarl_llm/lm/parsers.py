"""Parsers for every answer form the papers ask language models for.

Each parser takes the model's raw text and returns a typed value or raises
:class:`ParseError` carrying the raw text and the reason. A parser never raises
anything else, whatever the text (fuzzed with hypothesis in tests/lm/test_parsers.py).
What to do with a failure (retry, then abstain) is :mod:`jaxmarl_llm.lm.labeling`'s job.

Answer forms:
- pair choice ``"1"`` / ``"2"`` / ``"0"`` (LCA's state-pair ranking): first, second, equal;
- hash choice ``"#1"`` / ``"#2"`` / ``"#0"`` (DPM's trajectory comparison);
- agent ranking ``"Rank #1 : {3}"`` lines with ties ``{1,2}`` (DPM's agent ranking);
- a fenced Python block (YOLO-MARL's planning and reward functions);
- one option of a list (V-GEPF's skill choice);
- a team goal and numbered key steps (LCA's goal inferred from a trajectory's rewards).
"""

from __future__ import annotations

import ast
import dataclasses
import re
from collections.abc import Sequence

import numpy as np

# P(first item preferred) for each answer: the Bradley-Terry label convention.
CHOICE_LABELS = {"1": 1.0, "2": 0.0, "0": 0.5}


class ParseError(ValueError):
    """A malformed answer: ``parser`` names the answer form, ``raw`` is the full text."""

    def __init__(self, parser: str, reason: str, raw: str):
        self.parser = parser
        self.reason = reason
        self.raw = raw
        shown = raw if len(raw) <= 200 else raw[:200] + "..."
        super().__init__(f"{parser}: {reason}; answer was {shown!r}")


_MARKER = r"(?:answer|output|choice|result|preferred|prefer|better|final)"
_DIGIT_AFTER_MARKER = re.compile(
    rf"{_MARKER}\W{{0,3}}(?:is\W{{0,3}})?(?:state\s*)?([012])(?!\d)", re.I
)
_LONE_DIGIT = re.compile(r"(?<![\w.#])([012])(?![\w.])")


def parse_pair_choice(text: str) -> float:
    """``"1"`` / ``"2"`` / ``"0"`` -> P(first preferred) in {1, 0, 0.5}.

    Accepts the bare digit, an explicit marker ("Answer: 2", the last one wins when a
    model restates), or a text in which exactly one distinct choice digit stands alone.
    Anything else is ambiguous and raises.
    """
    stripped = text.strip().strip("*`'\".").strip()
    if stripped in CHOICE_LABELS:
        return CHOICE_LABELS[stripped]
    marked = _DIGIT_AFTER_MARKER.findall(text)
    if marked:
        return CHOICE_LABELS[marked[-1]]
    lone = set(_LONE_DIGIT.findall(text))
    if len(lone) == 1:
        return CHOICE_LABELS[lone.pop()]
    reason = "no choice 1/2/0 found" if not lone else f"ambiguous choices {sorted(lone)}"
    raise ParseError("pair_choice", reason, text)


# "#1" standing alone: not "Trajectory #1", "Enemy #2", "Rank #1".
_HASH_CHOICE = re.compile(r"(?<![A-Za-z]\s)(?<![A-Za-z])#\s?([012])(?!\d)")


def parse_hash_choice(text: str) -> float:
    """``"#1"`` / ``"#2"`` / ``"#0"`` -> P(first preferred); the last standalone one wins."""
    for line in reversed(text.strip().splitlines()):
        found = _HASH_CHOICE.findall(line)
        if found:
            return CHOICE_LABELS[found[-1]]
    raise ParseError("hash_choice", "no standalone #1/#2/#0 found", text)


_RANK_LINE = re.compile(r"rank\s*#?\s*(\d+)\s*[:=\-]\s*\{([^}]*)\}", re.I)


def parse_agent_ranking(text: str, num_agents: int) -> np.ndarray:
    """``"Rank #1 : {3}\\nRank #2 : {1,2}"`` -> ranks ``[num_agents]`` int, 0 = best.

    Agents are numbered from 1 in the text. Tied agents share a rank; every agent must
    appear exactly once, and ranks must be listed 1, 2, ... without gaps.
    """
    lines = _RANK_LINE.findall(text)
    if not lines:
        raise ParseError("agent_ranking", "no 'Rank #k : {agents}' lines found", text)
    ranks = np.full(num_agents, -1, dtype=np.int32)
    expected = 1
    for rank_text, members in lines:
        rank = int(rank_text)
        if rank != expected:
            raise ParseError(
                "agent_ranking", f"rank #{rank} listed where #{expected} was due", text
            )
        expected += 1
        agents = [m.strip() for m in members.split(",") if m.strip()]
        if not agents:
            raise ParseError("agent_ranking", f"rank #{rank} lists no agent", text)
        for agent_text in agents:
            agent_text = re.sub(r"(?i)^agent\s*", "", agent_text)
            if not agent_text.isdigit():
                raise ParseError("agent_ranking", f"{agent_text!r} is not an agent number", text)
            agent = int(agent_text)
            if not 1 <= agent <= num_agents:
                raise ParseError("agent_ranking", f"agent {agent} is not in 1..{num_agents}", text)
            if ranks[agent - 1] >= 0:
                raise ParseError("agent_ranking", f"agent {agent} is ranked twice", text)
            ranks[agent - 1] = rank - 1
    missing = [int(i) + 1 for i in np.flatnonzero(ranks < 0)]
    if missing:
        raise ParseError("agent_ranking", f"agents {missing} are not ranked", text)
    return ranks


def format_agent_ranking(ranks: Sequence[int]) -> str:
    """The inverse of :func:`parse_agent_ranking` for dense ranks (0 = best)."""
    ranks = np.asarray(ranks)
    levels = sorted(set(ranks.tolist()))
    return "\n".join(
        f"Rank #{k + 1} : {{{','.join(str(i + 1) for i in np.flatnonzero(ranks == r))}}}"
        for k, r in enumerate(levels)
    )


_FENCE = re.compile(r"```[ \t]*(?:python|py|python3)?[ \t]*\n(.*?)```", re.S | re.I)


def parse_python_block(text: str, required_function: str | None = None) -> str:
    """The last fenced Python block that is valid Python (and defines the function).

    Only syntax is checked here; whether generated code is safe to run is the sandbox's
    decision (see the method recipes), never the parser's.
    """
    blocks = _FENCE.findall(text)
    if not blocks and "def " in text and "```" not in text:
        blocks = [text]  # a model that answered with bare code
    if not blocks:
        raise ParseError("python_block", "no fenced ```python block found", text)
    last_error = ""
    for block in reversed(blocks):
        try:
            tree = ast.parse(block)
        except (SyntaxError, ValueError) as e:  # ValueError: null bytes in source
            last_error = f"block does not parse: {e}"
            continue
        if required_function is not None:
            names = {n.name for n in ast.walk(tree) if isinstance(n, ast.FunctionDef)}
            if required_function not in names:
                last_error = f"no function {required_function!r} defined (found {sorted(names)})"
                continue
        return block.strip("\n")
    raise ParseError("python_block", last_error, text)


_OPTION_MARKER = re.compile(
    r"^\W*(?:skill|answer|choice|option|instruction)\W*:\s*(.+)$", re.I | re.M
)


def _normalize(s: str) -> str:
    return re.sub(r"[\s_\-]+", " ", s.strip().lower())


def parse_option(text: str, options: Sequence[str]) -> int:
    """Index of the one option the answer names (V-GEPF's skill choice).

    Accepts the option text (case, spaces, '_' and '-' ignored), its 1-based number
    ("3", "Skill 3", "option #3"), or a sentence naming exactly one option; the longest
    option wins when one contains another ("pass" vs "long pass").
    """
    if not options:
        raise ValueError("parse_option needs at least one option")
    norm = [_normalize(o) for o in options]
    marked = _OPTION_MARKER.findall(text)
    if marked:  # "Skill: <name>" lines: the last one is the answer
        text = marked[-1]
    answer = _normalize(text).strip("*`'\".:").strip()
    if answer in norm:
        return norm.index(answer)
    number = re.fullmatch(r"(?:skill|option|instruction|choice)?\s*#?\s*(\d+)", answer)
    if number:
        k = int(number.group(1))
        if 1 <= k <= len(options):
            return k - 1
        raise ParseError("option", f"option number {k} is not in 1..{len(options)}", text)
    spans = []
    for i, o in enumerate(norm):
        for m in re.finditer(rf"(?<!\w){re.escape(o)}(?!\w)", _normalize(text)):
            spans.append((m.start(), m.end(), i))
    # Drop mentions inside a longer mention ("pass" inside "long pass").
    kept = {
        i
        for s, e, i in spans
        if not any(s2 <= s and e <= e2 and (e2 - s2) > (e - s) for s2, e2, _ in spans)
    }
    if len(kept) == 1:
        return kept.pop()
    reason = (
        "names none of the options"
        if not kept
        else (f"names several options {[options[i] for i in sorted(kept)]}")
    )
    raise ParseError("option", reason, text)


_MESSAGE_LINE = re.compile(r"^\W*agent\s*#?\s*(\d+)\s*[:\-]\s*(.*\S)\s*$", re.I | re.M)


def parse_agent_messages(text: str, num_agents: int) -> list[str]:
    """``"Agent 1: go left"`` lines -> one message per agent (Verco's teacher labels)."""
    messages: list[str | None] = [None] * num_agents
    for agent_text, message in _MESSAGE_LINE.findall(text):
        agent = int(agent_text)
        if not 1 <= agent <= num_agents:
            raise ParseError("agent_messages", f"agent {agent} is not in 1..{num_agents}", text)
        if messages[agent - 1] is not None:
            raise ParseError("agent_messages", f"agent {agent} has two messages", text)
        messages[agent - 1] = message.strip().strip('"')
    missing = [i + 1 for i, m in enumerate(messages) if m is None]
    if missing:
        raise ParseError("agent_messages", f"no message for agents {missing}", text)
    return messages  # type: ignore[return-value]


_NEXT_OPTION = re.compile(r"next[\s_\-]*(?:skill|option)\W*?:[\s*]*(.+?)\s*$", re.I | re.M)


def parse_next_option(text: str, options: Sequence[str]) -> int:
    """Index of the option named after an answer's last ``Next Skill:`` line (V-GEPF's
    appendix B.3 answer form: an analysis that may mention other options, then the
    choice; case, punctuation and markdown ignored), else of the one option the whole
    answer names. Raises ``ParseError`` when that is not exactly one option."""
    found = _NEXT_OPTION.findall(text)
    tail = found[-1] if found else text
    try:
        return parse_option(tail, options)
    except ParseError as e:
        where = "after 'Next Skill:'" if found else "(no 'Next Skill:' line)"
        raise ParseError("skill_choice", f"{e.reason} {where}", text) from None


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


_GOAL_LABEL = re.compile(r"^[\s*#]*team\s+goal\s*\**\s*:\**\s*", re.I)
_STEPS_LABEL = re.compile(r"[\s*#]*key\s+steps\s*\**\s*:\**", re.I)
_LINE_STEP = re.compile(r"^\s*(\d{1,2})[.)](?:\s+(.*))?$")
_INLINE_STEP = re.compile(r"(?:^|(?<=\s))(\d{1,2})[.)](?:\s+|$)")


def parse_key_steps(text: str) -> tuple[str, ...]:
    """Numbered steps, one per line where several lines start with a number (``1. a`` /
    ``2) b``; a line without a number continues the step before it; a blank line after
    the steps ends them), else inline (``1. a 2. b``: a number that is not the next one
    stays in the step's text). Numbering runs 1, 2, ... Text without numbers is one step."""
    lines = text.strip().splitlines()
    if sum(bool(_LINE_STEP.match(line)) for line in lines) > 1:
        steps: list[str] = []
        for line in lines:
            m = _LINE_STEP.match(line)
            if m:
                if int(m.group(1)) != len(steps) + 1:
                    raise ParseError(
                        "team_goal", f"step {m.group(1)} where {len(steps) + 1} was due", text
                    )
                steps.append((m.group(2) or "").strip())
            elif not line.strip():
                if steps:
                    break
            elif steps:
                steps[-1] = f"{steps[-1]} {line.strip()}".strip()
            else:
                raise ParseError("team_goal", "text before the first numbered step", text)
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
    """``Team goal: <sentence>`` (the label optional: a prompt may end with it), then
    ``Key steps:`` and the numbered steps (``parse_key_steps``) -> ``TeamGoal``. A goal or
    step that starts with a ``<placeholder>`` of the asked form is no answer."""
    label = _STEPS_LABEL.search(text)
    if label is None:
        raise ParseError("team_goal", "no 'Key steps:' label", text)
    goal = " ".join(_GOAL_LABEL.sub("", text[: label.start()].strip(), count=1).split())
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

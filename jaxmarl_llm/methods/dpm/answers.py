"""DPM's answer forms, and its prompt templates (``prompts/``) with the form each asks for.

- hash choice ``"#1"`` / ``"#2"`` / ``"#0"`` (the trajectory and episode comparisons),
  read by the shared two-way choice reader (:mod:`jaxmarl_llm.lm.parsers`) with the
  last line's standalone ``#k`` as a level of its own;
- agent ranking ``"Rank #1 : {3}"`` lines with ties ``{1,2}`` (the agent ranking).
"""

from __future__ import annotations

import re
from collections.abc import Sequence

import numpy as np

from jaxmarl_llm.lm import templates
from jaxmarl_llm.lm.factory import register_teacher
from jaxmarl_llm.lm.parsers import (
    CHOICE_LABELS,
    HAS_DIGIT,
    TOKEN,
    Negations,
    ParseError,
    Reading,
    comparisons,
    decide,
    explicit_answers,
    standalone_hash,
    token_choice,
)
from jaxmarl_llm.lm.scripted import agent_ranking_teacher

# ----- the trajectory and episode comparisons --------------------------------------------

_MAX_HASHES_PER_LINE = 64


def parse_hash_choice(text: str) -> float:
    """``"#1"`` / ``"#2"`` / ``"#0"`` -> P(first preferred).

    Read, in this order of trust, from
    1. explicit answers, which must all agree: a leading ``#k``, a line that is only
       ``#k`` or "Output: #2" / "Answer: 1", a marker ("I choose #2", "the better
       trajectory is #1");
    2. else the standalone ``#k`` of the last line that has one, which must agree (an
       analysis may compare "#1" and "#2" on earlier lines);
    3. else a line that only names one trajectory ("[Trajectory 2]");
    4. else comparisons: "Trajectory 1 is better", "[Trajectory 2] seems better",
       "#2 is worse" (-> 1).
    ``#k`` right after a noun is a reference, not an answer ("Trajectory #1", "Enemy #2",
    "Rank #1"); after "or", "is", "choose", "so" and the like it is an answer. Raises on
    "#1 or #2", "#2, no #1", "#1/#2", "#3", "#1.5", "#-1", "#1a", "#12", "#２", a
    negated answer ("not #1"), and disagreeing answers in a level.
    """
    explicit, named_lines = explicit_answers(text, bare_lines=False)
    last_line = Reading()
    end = len(text)
    while (at := text.rfind("#", 0, end)) >= 0:  # lines with a '#', from the last
        start = text.rfind("\n", 0, at) + 1
        line_end = text.find("\n", at)
        line = text[start : line_end if line_end >= 0 else len(text)]
        end = start
        if line.count("#") > _MAX_HASHES_PER_LINE:
            last_line.refuse(f"more than {_MAX_HASHES_PER_LINE} '#' on the answer line")
            break
        hashes = [m for m in TOKEN.finditer(line) if standalone_hash(line, m.start())]
        if not hashes:
            continue
        negations = Negations(line)
        for m in hashes:
            if HAS_DIGIT.search(m.group()):
                choice = token_choice(m.group(), need_hash=True)
                if choice is None:
                    last_line.refuse(f"{m.group()!r} is not one of #1/#2/#0")
                elif negations.before(m.start()):
                    last_line.refuse(f"{m.group()!r} is negated")
                else:
                    last_line.labels.add(choice)
        break
    try:
        choice = decide([explicit, last_line, named_lines, comparisons(text)])
    except ValueError as e:
        raise ParseError("hash_choice", str(e), text) from None
    if choice is None:
        raise ParseError("hash_choice", "no standalone #1/#2/#0 found", text)
    return CHOICE_LABELS[choice]


# ----- the agent ranking -----------------------------------------------------------------

# ("I rank them {see below}" has no number and is prose).
_RANK_LIKE = re.compile(
    r"\brank[ \t*_]*(?:#[ \t]*)?(?P<number>[^\s:={*_]+)[^\n{]{0,24}\{[^{}\n]*\}", re.I
)
_RANK_LINE = re.compile(
    r"rank[ \t*_]*(?:#[ \t]*)?(?P<rank>[0-9]{1,6})[ \t*_]*[:=\-–][ \t*_]*\{(?P<members>[^{}]*)\}",
    re.I,
)
_AGENT_ID = re.compile(r"(?:agent[ \t_]*)?#?[ \t]*([1-9][0-9]{0,5})", re.I)


def parse_agent_ranking(text: str, num_agents: int) -> np.ndarray:
    """``"Rank #1 : {3}\\nRank #2 : {1,2}"`` -> ranks ``[num_agents]`` int, 0 = best.

    Agents are numbered from 1 in the text ("3", "Agent 3", "agent_3"); tied agents
    share a rank; markdown around "Rank #1" is ignored. Raises when: no rank line is
    found; a rank line is malformed ("Rank #1.5 : {1}", "Rank #1 : {1.5}", "{-1}",
    "{2b}", "{２}", "{1 and 2}", "{}"); ranks are not listed 1, 2, ... without gaps
    (competition ranking "#1 {1,2}, #3 {3}" and a restated ranking both raise); an agent
    is out of 1..N, ranked twice or not ranked.
    """
    lines = []
    for m in _RANK_LIKE.finditer(text):
        if not HAS_DIGIT.search(m.group("number")):
            continue
        strict = _RANK_LINE.fullmatch(m.group())
        if strict is None:
            raise ParseError("agent_ranking", f"malformed rank line {m.group()!r}", text)
        lines.append((strict.group("rank"), strict.group("members")))
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
        agents = [m.strip(" \t*_`'\"") for m in members.split(",")]
        if not any(agents):
            raise ParseError("agent_ranking", f"rank #{rank} lists no agent", text)
        for agent_text in agents:
            number = _AGENT_ID.fullmatch(agent_text)
            if number is None:
                raise ParseError("agent_ranking", f"{agent_text!r} is not an agent number", text)
            agent = int(number.group(1))
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


# template -> (parser, what it returns)
ANSWER_FORMS = {
    "dpm_trajectory_comparison": (parse_hash_choice, "P(trajectory 1 better)"),
    "dpm_episode_comparison": (parse_hash_choice, "P(episode 1 better)"),
    "dpm_agent_ranking": (parse_agent_ranking, "ranks [N], 0 = best"),
}
templates.register(__package__, ANSWER_FORMS)
# the scripted teacher of agent rankings answers in this format
register_teacher("agent_ranking", lambda noise: agent_ranking_teacher(format_agent_ranking, noise))

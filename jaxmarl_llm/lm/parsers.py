"""Parsers for every answer form the papers ask language models for.

Each parser takes the model's raw text and returns the value a careful reader would
take from it, or raises :class:`ParseError` carrying the raw text and the reason. A
parser never raises anything else, whatever the text, and reads a 100 kB answer in
milliseconds (every pattern here is linear in the text length). What to do with a
failure (retry, then abstain) is :mod:`jaxmarl_llm.lm.labeling`'s job.

Rules shared by all parsers: a number is read only when it stands alone as a whole
ASCII integer. Signed or fractional numbers ("-1", "+2", "1.5"), numbers inside longer
numbers ("12", "2024"), digits inside words ("option2b", "A1", "h2o") and non-ASCII
digits ("２", "٢") never become a label; where such a number stands in the place of the
answer ("Answer: -1"), the parser raises instead of looking for another number.

Answer forms:
- pair choice ``"1"`` / ``"2"`` / ``"0"`` (LCA's state-pair ranking): first, second, equal;
- hash choice ``"#1"`` / ``"#2"`` / ``"#0"`` (DPM's trajectory comparison);
- agent ranking ``"Rank #1 : {3}"`` lines with ties ``{1,2}`` (DPM's agent ranking);
- a fenced Python block (YOLO-MARL's planning and reward functions);
- one option of a list (V-GEPF's skill choice);
- ``"Agent k: <message>"`` lines (Verco's teacher messages);
- a team goal and numbered key steps (LCA's goal inferred from a trajectory's rewards).
"""

from __future__ import annotations

import ast
import bisect
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


# ----- two-way choices (LCA's "1"/"2"/"0", DPM's "#1"/"#2"/"#0") -----------------------

# A token is a run of characters between spaces, markdown, quotes and brackets; "-1",
# "1.5", "option2b" and "1/2" are single tokens, so they are never read as "1".
_TOKEN_CHARS = r"[^\s*`'\"()\[\]{}<>]"
_TOKEN = re.compile(rf"{_TOKEN_CHARS}+")
_CHOICE_TOKEN = re.compile(r"_*(#?)([012])_*[.,;:!?]*")  # fullmatch on a token
_HAS_DIGIT = re.compile(r"\d")  # any script's digits: "２" is a number, never a choice
_NEGATION = re.compile(
    r"\b(?:not|no|never|neither|nor|cannot|hardly|instead\s+of|rather\s+than)\b|n['’]t\b",
    re.I,
)
_CLAUSE_END = re.compile(r"[.!?;\n]")
_WORDS_ANSWER = r"(?:final\s+answer|answer|output|choice|verdict)"
_MARKER = re.compile(
    rf"\b(?:{_WORDS_ANSWER}|prefer(?:red|ence)?|pick|choose|chose|select(?:ed)?"
    r"|go(?:ing)?\s+with|better(?:\s+(?:one|state|trajectory|option))?)\b"
    r"[ \t*_:=]{0,6}(?:(?:is|would\s+be|will\s+be)\b[ \t*_:]{0,4})?"
    r"(?:(?:state|option|choice|trajectory|number)\b[ \t*_:]{0,3})?",
    re.I,
)
_ANSWER_LINE = re.compile(
    r"^[ \t\r>*`'\"(\[]*(?P<kw>(?:final[ \t]+answer|answer|output|choice|verdict|state|option"
    r"|trajectory)\b[ \t*_:=]{0,6})?"
    rf"(?P<tok>{_TOKEN_CHARS}+)"
    r"[ \t\r*`'\")\]]*$",
    re.I | re.M,
)
_NAMING_WORDS = ("state", "option", "trajectory")
_COMPARATIVE = re.compile(r"\b(?:better|worse|preferable|preferred|superior|inferior)\b", re.I)
# What stands before a comparative, read back from it (at most 60 characters).
_COMPARED = re.compile(
    r"(?:\b(?:state|option|trajectory|choice)[ \t]*(?:\[[ \t]*)?)?"
    rf"(?<!{_TOKEN_CHARS})(?P<tok>{_TOKEN_CHARS}+)[ \t*`'\")\]]*"
    r"(?:(?:is|seems|looks|was|appears)[ \t]+)?"
    r"(?:(?:much|clearly|slightly|a\s+bit|definitely|significantly|far|somewhat)[ \t]+)?$",
    re.I,
)
# Right after an answer: "1 or 2", "2, no 1", "1/2", "2 (or maybe 1)", "2, 1".
_ALTERNATIVE = re.compile(
    r"[ \t,;*_`'\"()\[\]\-–—]*"
    r"(?:(?:/|\b(?:or|no|not|nor|and|vs|versus|rather|actually|maybe|perhaps|wait)\b)"
    r"[ \t,;:.*_`'\"()\[\]\-–—]*){0,3}"
    r"(?:\b(?:state|option|choice|trajectory)\b[ \t]*)?(?P<tok>[#+\-−]?\d\S{0,8})",
    re.I,
)
_WORD_BEFORE = re.compile(r"([A-Za-z]+)[ \t]?$")
# "#2" after a noun is a reference ("Trajectory #1", "Enemy #2", "Rank #1"); after
# these words it is still the answer ("or #2", "choose #2", "so #1").
_NOT_NOUNS = frozenset(
    "or and no not nor is be to with than vs versus either maybe perhaps actually "
    "choose pick select prefer output answer so then thus therefore hence".split()
)


def _standalone_hash(line: str, start: int) -> bool:
    if not line.startswith("#", start):
        return False
    word = _WORD_BEFORE.search(line[max(0, start - 24) : start])
    return word is None or word.group(1).lower() in _NOT_NOUNS


class _Reading:
    """The answers one text states, and the first reason to refuse it."""

    def __init__(self):
        self.labels: set[str] = set()
        self.refusal: str | None = None

    def refuse(self, reason: str) -> None:
        self.refusal = self.refusal or reason


def _choice(token: str, need_hash: bool = False) -> str | None:
    m = _CHOICE_TOKEN.fullmatch(token)
    if m is None or (need_hash and not m.group(1)):
        return None
    return m.group(2)


class _Negations:
    """Where a text negates: ``before(i)`` is whether a negation stands earlier in the
    clause that position ``i`` is in ("I don't think state 1 is better"), looking back
    at most 80 characters. Found once per text, so each question costs a bisection."""

    def __init__(self, text: str):
        self.negations = [m.start() for m in _NEGATION.finditer(text)]
        self.clause_ends = [m.end() for m in _CLAUSE_END.finditer(text)]

    def before(self, i: int) -> bool:
        k = bisect.bisect_right(self.clause_ends, i) - 1
        clause_start = max(self.clause_ends[k] if k >= 0 else 0, i - 80)
        j = bisect.bisect_left(self.negations, clause_start)
        return j < len(self.negations) and self.negations[j] < i


def _read_answer_at(
    text: str, pos: int, reading: _Reading, where: str, negated: bool = False
) -> None:
    """The token at ``pos`` was put forward as the answer: a choice, or a refusal."""
    m = _TOKEN.match(text, pos)
    if m is None or not _HAS_DIGIT.search(m.group()):
        return  # "the answer is that ..." names no number here
    if negated:
        reading.refuse(f"{where} {m.group()!r} is negated")
        return
    choice = _choice(m.group())
    if choice is None:
        reading.refuse(f"{where} {m.group()!r} is not one of 1/2/0")
        return
    after = _ALTERNATIVE.match(text, m.start() + m.group().index(choice) + 1)
    if after is not None and _choice(_TOKEN.match(after.group("tok")).group()) != choice:
        reading.refuse(f"{where} {m.group()!r} is followed by another number")
        return
    reading.labels.add(choice)


def _explicit_answers(text: str, bare_lines: bool) -> tuple[_Reading, _Reading]:
    """Answers stated as such: a leading choice, a line that is only the answer, and
    "Answer: k" / "I prefer k" / "the better one is k" markers; and, trusted less (they
    may be headings), lines that only name one item ("State 2", "**Option 1**").
    ``bare_lines``: a bare digit counts (LCA's "1"); else only ``#k`` or a digit after
    an answer word does."""
    reading, named_lines = _Reading(), _Reading()
    negations = _Negations(text)
    lead = re.match(r"[\s>*`'\"(\[]*", text).end()
    token = _TOKEN.match(text, lead)
    if token and (bare_lines or token.group().startswith("#")):
        number = re.fullmatch(r"([0-9]{1,4})\.?", token.group())
        # "1. State 1 has ...\n2. State 2 has ..." is a list, not an answer.
        listed = number and re.search(rf"^[ \t]*{int(number.group(1)) + 1}[.)]", text, re.M)
        if not listed:
            _read_answer_at(text, lead, reading, "leading answer")
    for m in _ANSWER_LINE.finditer(text):
        tok = m.group("tok")
        if tok.endswith(":"):  # "1:" is a heading
            continue
        keyword = (m.group("kw") or "").lower()
        if _HAS_DIGIT.search(tok) and (bare_lines or keyword or tok.startswith("#")):
            into = named_lines if keyword.startswith(_NAMING_WORDS) else reading
            choice = _choice(tok)
            if choice is None:
                into.refuse(f"answer line {tok!r} is not one of 1/2/0")
            else:
                into.labels.add(choice)
    for m in _MARKER.finditer(text):
        _read_answer_at(text, m.end(), reading, "answer", negated=negations.before(m.start()))
    return reading, named_lines


def _comparisons(text: str) -> _Reading:
    """Comparisons: "State 1 is better", "#2 is worse", "[Trajectory 1] seems better"."""
    reading = _Reading()
    negations = _Negations(text)
    for cmp in _COMPARATIVE.finditer(text):
        window_start = max(0, cmp.start() - 60)
        m = _COMPARED.search(text, window_start, cmp.start())
        if m is None or not _HAS_DIGIT.search(m.group("tok")):
            continue
        tok = m.group("tok")
        choice = _choice(tok)
        if choice is None or choice == "0":
            reading.refuse(f"{tok!r} compared is not one of 1/2")
        elif negations.before(m.start()):
            reading.refuse(f"comparison {text[m.start() : cmp.end()]!r} is negated")
        elif cmp.group().lower() in ("worse", "inferior"):
            reading.labels.add("2" if choice == "1" else "1")
        else:
            reading.labels.add(choice)
    return reading


def _decide(readings: Sequence[_Reading]) -> str | None:
    """The first reading that states anything decides; a conflicting one raises."""
    for reading in readings:
        if reading.refusal:
            raise ValueError(reading.refusal)
        if len(reading.labels) > 1:
            raise ValueError(f"conflicting answers {sorted(reading.labels)}")
        if reading.labels:
            return next(iter(reading.labels))
    return None


_SHORT_ANSWER_WORDS = 5
_SHORT_ANSWER_CHARS = 200
_MAX_HASHES_PER_LINE = 64


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
        choice = _decide([*_explicit_answers(text, bare_lines=True), _comparisons(text)])
    except ValueError as e:
        raise ParseError("pair_choice", str(e), text) from None
    if choice is not None:
        return CHOICE_LABELS[choice]
    if len(text) > _SHORT_ANSWER_CHARS:
        raise ParseError("pair_choice", "no stated choice 1/2/0 found", text)
    named = {c for m in _TOKEN.finditer(text) if (c := _choice(m.group())) is not None}
    if not named:
        raise ParseError("pair_choice", "no choice 1/2/0 found", text)
    if len(named) > 1:
        raise ParseError("pair_choice", f"ambiguous choices {sorted(named)}", text)
    if _NEGATION.search(text):
        raise ParseError("pair_choice", "a choice next to a negation", text)
    if len(text.split()) > _SHORT_ANSWER_WORDS:
        raise ParseError(
            "pair_choice", "no stated answer, and too long to read a lone digit as one", text
        )
    return CHOICE_LABELS[named.pop()]


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
    explicit, named_lines = _explicit_answers(text, bare_lines=False)
    last_line = _Reading()
    end = len(text)
    while (at := text.rfind("#", 0, end)) >= 0:  # lines with a '#', from the last
        start = text.rfind("\n", 0, at) + 1
        line_end = text.find("\n", at)
        line = text[start : line_end if line_end >= 0 else len(text)]
        end = start
        if line.count("#") > _MAX_HASHES_PER_LINE:
            last_line.refuse(f"more than {_MAX_HASHES_PER_LINE} '#' on the answer line")
            break
        hashes = [m for m in _TOKEN.finditer(line) if _standalone_hash(line, m.start())]
        if not hashes:
            continue
        negations = _Negations(line)
        for m in hashes:
            if _HAS_DIGIT.search(m.group()):
                choice = _choice(m.group(), need_hash=True)
                if choice is None:
                    last_line.refuse(f"{m.group()!r} is not one of #1/#2/#0")
                elif negations.before(m.start()):
                    last_line.refuse(f"{m.group()!r} is negated")
                else:
                    last_line.labels.add(choice)
        break
    try:
        choice = _decide([explicit, last_line, named_lines, _comparisons(text)])
    except ValueError as e:
        raise ParseError("hash_choice", str(e), text) from None
    if choice is None:
        raise ParseError("hash_choice", "no standalone #1/#2/#0 found", text)
    return CHOICE_LABELS[choice]


# ----- DPM's agent ranking ---------------------------------------------------------------

# Loose: "rank" and a number, then braces; each must then match the strict form
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
        if not _HAS_DIGIT.search(m.group("number")):
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


# ----- YOLO-MARL's code --------------------------------------------------------------------

_PYTHON_FENCE_TAGS = ("", "python", "py", "python3")


def _fenced_blocks(text: str) -> list[str]:
    """Bodies of the ```python (or untagged) blocks; an unclosed last fence runs to the
    end of the text. A scan with ``str.find``: linear whatever the fences."""
    blocks = []
    i = 0
    while (start := text.find("```", i)) >= 0:
        newline = text.find("\n", start + 3)
        if newline < 0:
            break  # a fence with nothing after it
        info = text[start + 3 : newline].strip().lower()
        end = text.find("```", newline + 1)
        if (info.split() or [""])[0] in _PYTHON_FENCE_TAGS:
            blocks.append(text[newline + 1 : end if end >= 0 else len(text)])
        if end < 0:
            break
        i = end + 3
    return blocks


def parse_python_block(text: str, required_function: str | None = None) -> str:
    """The last fenced Python block that is valid Python (and defines the function).

    Blocks are ```` ```python ````, ```` ```py ````, ```` ```python3 ```` or untagged
    fences (other languages are skipped); an unclosed last fence counts to the end of
    the text (a truncated answer then usually fails to parse); an answer with no fence
    at all that contains ``def`` is read as bare code. Of several blocks the last one
    that parses and defines ``required_function`` at module level (not nested, not a
    lambda) wins: models restate fixed versions last. Source that Python's parser
    cannot handle (too deeply nested) raises ``ParseError`` like a syntax error.

    Only syntax is checked here; whether generated code is safe to run is the sandbox's
    decision (see the method recipes), never the parser's.
    """
    blocks = _fenced_blocks(text)
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
        except (RecursionError, MemoryError):
            last_error = "block is nested too deeply to parse"
            continue
        if required_function is not None:
            names = {n.name for n in tree.body if isinstance(n, ast.FunctionDef)}
            if required_function not in names:
                last_error = (
                    f"no function {required_function!r} defined at module level"
                    f" (found {sorted(names)})"
                )
                continue
        return block.strip("\n")
    raise ParseError("python_block", last_error, text)


# ----- V-GEPF's skill choice ------------------------------------------------------------

_OPTION_MARKER = re.compile(
    r"^[^\w\n]*(?:skill|answer|choice|option|instruction)[^\w\n]*:[ \t]*(\S[^\n]*)$",
    re.I | re.M,
)
_OPTION_NUMBER = re.compile(r"(?:(?:skill|option|instruction|choice)[ \t]*)?#?[ \t]*([0-9]{1,6})")
# A mention right after one of these (up to two words between) is not the choice:
# "not shoot", "avoid the long pass", "rather than shoot", "not repeating shoot".
_OPTION_NEGATION = re.compile(
    r"\b(?:not(?! only\b)|no|never|avoid|avoiding|don'?t|instead of|rather than|than|except"
    r"|besides)(?: [\w']+){0,2} $"
)


def _normalize(s: str) -> str:
    return re.sub(r"[\s_\-]+", " ", s.strip().lower())


def _clean_answer(s: str) -> str:
    return s.strip().strip("*`'\".:!()[]").strip()


def parse_option(text: str, options: Sequence[str]) -> int:
    """Index of the one option the answer names (V-GEPF's skill choice).

    The answer is the last "Skill: ..." / "Answer: ..." line if there is one, else the
    whole text. It may be the option text (case, markdown, spaces, '_' and '-' ignored),
    its 1-based number as the whole answer ("3", "Skill 3", "option #3"; ASCII digits,
    no sign or fraction), or a sentence naming exactly one option. In a sentence: the
    longest option wins when one contains another ("pass" inside "long pass"); a
    mention after a negation ("not shoot", "rather than shoot", "avoid the long pass",
    up to two words between) does not count; numbers are not read. Raises when no
    option or several options are named, or the number is out of range.
    """
    if not options:
        raise ValueError("parse_option needs at least one option")
    norm = [_normalize(o) for o in options]
    raw = text
    marked = _OPTION_MARKER.findall(text)
    if marked:  # "Skill: <name>" lines: the last one is the answer
        text = marked[-1]
    answer = _clean_answer(text)
    if _normalize(answer) in norm:
        return norm.index(_normalize(answer))
    number = _OPTION_NUMBER.fullmatch(answer.lower())
    if number:
        k = int(number.group(1))
        if 1 <= k <= len(options):
            return k - 1
        raise ParseError("option", f"option number {k} is not in 1..{len(options)}", raw)
    sentence = _normalize(text)
    spans = sorted(
        (m.start(), -m.end(), i)
        for i, o in enumerate(norm)
        for m in re.finditer(rf"(?<!\w){re.escape(o)}(?!\w)", sentence)
    )
    kept, negated, reach = set(), set(), -1
    for start, neg_end, i in spans:  # by start, longest first: a sweep finds containment
        end = -neg_end
        if end <= reach:
            continue  # "pass" inside "long pass"
        reach = end
        before = sentence[max(0, start - 40) : start]
        (negated if _OPTION_NEGATION.search(before) else kept).add(i)
    if len(kept) == 1:
        return kept.pop()
    if kept:
        reason = f"names several options {[options[i] for i in sorted(kept)]}"
    elif negated:
        reason = f"names options only in negation {[options[i] for i in sorted(negated)]}"
    else:
        reason = "names none of the options"
    raise ParseError("option", reason, raw)


_NEXT_OPTION = re.compile(
    r"\bnext[ \t_\-]*(?:skill|option)[^\w\n]{0,6}?:[ \t*_]*(?:\n[ \t*_]*)?([^\n]*)", re.I
)


def parse_next_option(text: str, options: Sequence[str]) -> int:
    """Index of the option named after an answer's last ``Next Skill:`` (V-GEPF's
    appendix B.3 answer form: an analysis that may mention other options, then the
    choice on that line or the next), read by :func:`parse_option`; else of the one
    option the whole answer names. Raises ``ParseError`` when that is not exactly one
    option."""
    found = _NEXT_OPTION.findall(text)
    tail = found[-1] if found else text
    try:
        return parse_option(tail, options)
    except ParseError as e:
        where = "after 'Next Skill:'" if found else "(no 'Next Skill:' line)"
        raise ParseError("skill_choice", f"{e.reason} {where}", text) from None


# ----- Verco's teacher messages ----------------------------------------------------------

# "Agent 1: go left", "- **Agent 2**: chop", "Agent #3 (the chopper) - wait"
_MESSAGE_LINE = re.compile(
    r"^[^\w\n]*agent[ \t_]*(?:#[ \t]*)?(?P<id>[^\s:*()\-–]+)[ \t*_]*(?:\([^)\n]{0,40}\)[ \t*_]*)?"
    r"(?::|-|–)(?P<message>[^\n]*)",
    re.I | re.M,
)


def parse_agent_messages(text: str, num_agents: int) -> list[str]:
    """``"Agent 1: go left"`` lines -> one message per agent (Verco's teacher labels).

    A message line starts with "Agent <k>" (markdown, list bullets and a parenthesised
    note before the ':' or '-' are ignored); the message is the rest of that line,
    stripped of markdown and quotes; other lines are ignored. ``k`` is a plain ASCII
    integer in 1..N: "Agent 1.5:", "Agent -1:", "Agent 1-2:", "Agent ２:" raise, as do a
    message line with an empty message, two messages for one agent, and a missing agent.
    """
    messages: list[str | None] = [None] * num_agents
    for m in _MESSAGE_LINE.finditer(text):
        agent_text = m.group("id")
        if not _HAS_DIGIT.search(agent_text):
            continue  # "Agent messages: ...", "Agents: ..." are not message lines
        two_ids = text.startswith("-", m.end("id")) and _HAS_DIGIT.match(text, m.end("id") + 1)
        if not re.fullmatch(r"[1-9][0-9]{0,5}", agent_text) or two_ids:  # "Agent 1-2:"
            raise ParseError("agent_messages", f"{agent_text!r} is not an agent number", text)
        agent = int(agent_text)
        if not 1 <= agent <= num_agents:
            raise ParseError("agent_messages", f"agent {agent} is not in 1..{num_agents}", text)
        message = m.group("message").strip().strip("*_`'\"“”").strip()
        if not message:
            raise ParseError("agent_messages", f"agent {agent} has an empty message", text)
        if messages[agent - 1] is not None:
            raise ParseError("agent_messages", f"agent {agent} has two messages", text)
        messages[agent - 1] = message
    missing = [i + 1 for i, m in enumerate(messages) if m is None]
    if missing:
        raise ParseError("agent_messages", f"no message for agents {missing}", text)
    return messages  # type: ignore[return-value]


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

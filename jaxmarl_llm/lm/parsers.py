"""What every answer parser shares: ``ParseError`` and the reading of a two-way choice.

Each answer form is parsed beside the prompt that asks for it (a method's ``answers``
module). A parser takes the model's raw text and returns the value a careful reader would
take from it, or raises :class:`ParseError` carrying the raw text and the reason. A parser
never raises anything else, whatever the text, and reads a 100 kB answer in milliseconds
(every pattern here is linear in the text length). What to do with a failure (retry,
then abstain) is :mod:`jaxmarl_llm.lm.labeling`'s job.

Rules shared by all parsers: a number is read only when it stands alone as a whole
ASCII integer. Signed or fractional numbers ("-1", "+2", "1.5"), numbers inside longer
numbers ("12", "2024"), digits inside words ("option2b", "A1", "h2o") and non-ASCII
digits ("２", "٢") never become a label; where such a number stands in the place of the
answer ("Answer: -1"), the parser raises instead of looking for another number.

The two-way choice reader finds the answers a text states about "which of two items is
better" (first, second, or equal: ``"1"`` / ``"2"`` / ``"0"``, or ``"#1"`` / ``"#2"`` /
``"#0"``), level by level of trust: ``explicit_answers`` (a leading choice, an answer
line, an answer marker; and lines that only name one item), ``comparisons`` ("State 1 is
better", "#2 is worse"), and ``decide``, where the first level that states anything
decides and a conflicting or refused one raises. A method's parser orders these levels
and adds its own (``token_choice``, ``standalone_hash``, ``Negations``, ``TOKEN``,
``HAS_DIGIT`` and ``NEGATION`` are the pieces they are built from).
"""

from __future__ import annotations

import bisect
import re
from collections.abc import Sequence

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


# ----- two-way choices ("1"/"2"/"0", "#1"/"#2"/"#0") -------------------------------------

# A token is a run of characters between spaces, markdown, quotes and brackets; "-1",
# "1.5", "option2b" and "1/2" are single tokens, so they are never read as "1".
_TOKEN_CHARS = r"[^\s*`'\"()\[\]{}<>]"
TOKEN = re.compile(rf"{_TOKEN_CHARS}+")
_CHOICE_TOKEN = re.compile(r"_*(#?)([012])_*[.,;:!?]*")  # fullmatch on a token
HAS_DIGIT = re.compile(r"\d")  # any script's digits: "２" is a number, never a choice
NEGATION = re.compile(
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


def standalone_hash(line: str, start: int) -> bool:
    if not line.startswith("#", start):
        return False
    word = _WORD_BEFORE.search(line[max(0, start - 24) : start])
    return word is None or word.group(1).lower() in _NOT_NOUNS


class Reading:
    """The answers one text states, and the first reason to refuse it."""

    def __init__(self):
        self.labels: set[str] = set()
        self.refusal: str | None = None

    def refuse(self, reason: str) -> None:
        self.refusal = self.refusal or reason


def token_choice(token: str, need_hash: bool = False) -> str | None:
    m = _CHOICE_TOKEN.fullmatch(token)
    if m is None or (need_hash and not m.group(1)):
        return None
    return m.group(2)


class Negations:
    """Where a text negates: ``before(i)`` is whether a negation stands earlier in the
    clause that position ``i`` is in ("I don't think state 1 is better"), looking back
    at most 80 characters. Found once per text, so each question costs a bisection."""

    def __init__(self, text: str):
        self.negations = [m.start() for m in NEGATION.finditer(text)]
        self.clause_ends = [m.end() for m in _CLAUSE_END.finditer(text)]

    def before(self, i: int) -> bool:
        k = bisect.bisect_right(self.clause_ends, i) - 1
        clause_start = max(self.clause_ends[k] if k >= 0 else 0, i - 80)
        j = bisect.bisect_left(self.negations, clause_start)
        return j < len(self.negations) and self.negations[j] < i


def _read_answer_at(
    text: str, pos: int, reading: Reading, where: str, negated: bool = False
) -> None:
    """The token at ``pos`` was put forward as the answer: a choice, or a refusal."""
    m = TOKEN.match(text, pos)
    if m is None or not HAS_DIGIT.search(m.group()):
        return  # "the answer is that ..." names no number here
    if negated:
        reading.refuse(f"{where} {m.group()!r} is negated")
        return
    choice = token_choice(m.group())
    if choice is None:
        reading.refuse(f"{where} {m.group()!r} is not one of 1/2/0")
        return
    after = _ALTERNATIVE.match(text, m.start() + m.group().index(choice) + 1)
    if after is not None and token_choice(TOKEN.match(after.group("tok")).group()) != choice:
        reading.refuse(f"{where} {m.group()!r} is followed by another number")
        return
    reading.labels.add(choice)


def explicit_answers(text: str, bare_lines: bool) -> tuple[Reading, Reading]:
    """Answers stated as such: a leading choice, a line that is only the answer, and
    "Answer: k" / "I prefer k" / "the better one is k" markers; and, trusted less (they
    may be headings), lines that only name one item ("State 2", "**Option 1**").
    ``bare_lines``: a bare digit counts ("1"); else only ``#k`` or a digit after an
    answer word does."""
    reading, named_lines = Reading(), Reading()
    negations = Negations(text)
    lead = re.match(r"[\s>*`'\"(\[]*", text).end()
    token = TOKEN.match(text, lead)
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
        if HAS_DIGIT.search(tok) and (bare_lines or keyword or tok.startswith("#")):
            into = named_lines if keyword.startswith(_NAMING_WORDS) else reading
            choice = token_choice(tok)
            if choice is None:
                into.refuse(f"answer line {tok!r} is not one of 1/2/0")
            else:
                into.labels.add(choice)
    for m in _MARKER.finditer(text):
        _read_answer_at(text, m.end(), reading, "answer", negated=negations.before(m.start()))
    return reading, named_lines


def comparisons(text: str) -> Reading:
    """Comparisons: "State 1 is better", "#2 is worse", "[Trajectory 1] seems better"."""
    reading = Reading()
    negations = Negations(text)
    for cmp in _COMPARATIVE.finditer(text):
        window_start = max(0, cmp.start() - 60)
        m = _COMPARED.search(text, window_start, cmp.start())
        if m is None or not HAS_DIGIT.search(m.group("tok")):
            continue
        tok = m.group("tok")
        choice = token_choice(tok)
        if choice is None or choice == "0":
            reading.refuse(f"{tok!r} compared is not one of 1/2")
        elif negations.before(m.start()):
            reading.refuse(f"comparison {text[m.start() : cmp.end()]!r} is negated")
        elif cmp.group().lower() in ("worse", "inferior"):
            reading.labels.add("2" if choice == "1" else "1")
        else:
            reading.labels.add(choice)
    return reading


def decide(readings: Sequence[Reading]) -> str | None:
    """The first reading that states anything decides; a conflicting one raises."""
    for reading in readings:
        if reading.refusal:
            raise ValueError(reading.refusal)
        if len(reading.labels) > 1:
            raise ValueError(f"conflicting answers {sorted(reading.labels)}")
        if reading.labels:
            return next(iter(reading.labels))
    return None

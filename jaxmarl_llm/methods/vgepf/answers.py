"""V-GEPF's answer form, one option of a list (the skill choice, after a ``Next Skill:``
line), and its prompt template (``prompts/``) with the form it asks for."""

from __future__ import annotations

import re
from collections.abc import Sequence

from jaxmarl_llm.lm import templates
from jaxmarl_llm.lm.parsers import ParseError

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


# template -> (parser, what it returns)
ANSWER_FORMS = {
    "vgepf_skill_choice": (parse_next_option, "index into the skill pool"),
}
templates.register(__package__, ANSWER_FORMS)

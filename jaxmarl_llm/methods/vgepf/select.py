"""Skill selection (paper section 4.2, appendix B.3): records in, the next skill out.

A selector has one method, ``select(records, frames, last_skill) -> SkillChoice``:

- ``ScriptedSelector``: a fixed rule over the records, no model (the offline default);
- ``BackendSelector``: the appendix B.3 prompt through a language-model backend (any kind
  of the LM factory, cached in the label store), the answer parsed from its
  ``Next Skill: <name>`` line; with ``vision=True`` the frames of the last episode go with
  the prompt as images (an OpenAI-compatible vision endpoint).

An answer that names no skill of the pool (a ``ParseError``) is followed up with the
answer and a correction, up to ``retries`` times; after that ``SkillChoiceError`` names
every answer (each is kept in the label store, and the runner saves the train state).
An answer that repeats the last skill is accepted ("try not repeating" is a request, not
a rule) and reported as ``repeated``.
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Sequence
from typing import Any, Protocol

from jaxmarl_llm.errors import RunError
from jaxmarl_llm.lm.backend import Backend, Request, SamplingParams
from jaxmarl_llm.lm.factory import register_teacher
from jaxmarl_llm.lm.labeling import LabelingPolicy, retry_request
from jaxmarl_llm.lm.parsers import ParseError
from jaxmarl_llm.lm.templates import render
from jaxmarl_llm.methods.vgepf.answers import parse_next_option
from jaxmarl_llm.methods.vgepf.skills import SKILL_NAMES, SKILLS, skill

TEMPLATE = "vgepf_skill_choice"

# The scripted rule's phases: the skills it rotates through while the team does not shoot
# (get the ball forward), while it shoots but does not win (combine and finish), and once
# it wins (keep shape and control).
PHASES: dict[str, tuple[str, ...]] = {
    "advance": ("ball location", "encourage dribbling", "encourage attack"),
    "finish": ("encourage passing", "encourage attack", "correct formation"),
    "hold": ("correct formation", "has advantage", "encourage defense"),
}


class SkillChoiceError(RunError):
    """The selector's answers named no skill of the pool after every retry."""


@dataclasses.dataclass(frozen=True)
class Records:
    """What the selector reads: per-update means over the window since the last
    selection (NaN where no episode ended), and the last skill's potential record."""

    shots: tuple[float, ...]  # mean shots per episode
    win_rate: tuple[float, ...]
    potential: tuple[float, ...]  # the last skill's mean potential, per round

    def as_dict(self) -> dict[str, list[float | None]]:
        clean = lambda xs: [None if math.isnan(x) else x for x in xs]
        return {
            "shots": clean(self.shots),
            "win_rate": clean(self.win_rate),
            "potential": clean(self.potential),
        }


@dataclasses.dataclass(frozen=True)
class SkillChoice:
    skill: str  # a name of SKILL_NAMES
    selector: str
    answers: tuple[str, ...] = ()  # every raw answer, the last one parsed
    retries: int = 0  # follow-ups after answers that named no skill
    repeated: bool = False  # the choice is the last skill

    def as_dict(self) -> dict[str, Any]:
        return {
            "skill": self.skill,
            "selector": self.selector,
            "raw_answer": self.answers[-1] if self.answers else None,
            "answers": list(self.answers),
            "parse_retries": self.retries,
            "repeated": self.repeated,
        }


class Selector(Protocol):
    name: str

    def select(self, records: Records, frames: Sequence[bytes], last_skill: str) -> SkillChoice: ...


def parse_skill_choice(text: str) -> str:
    """The pool's skill an answer names (``answers.parse_next_option``)."""
    return SKILL_NAMES[parse_next_option(text, SKILL_NAMES)]


def _recent(xs: Sequence[float]) -> float:
    """Mean of the last quarter of ``xs`` (at least one value), NaN ignored; 0 if none."""
    tail = [x for x in xs[-max(1, len(xs) // 4) :] if not math.isnan(x)]
    return sum(tail) / len(tail) if tail else 0.0


def scripted_phase(records: Records, shot_target: float, win_target: float) -> str:
    """``advance`` below ``shot_target`` mean shots per episode, else ``finish`` below
    ``win_target`` win rate, else ``hold`` (over the last quarter of the window; no
    finished episode counts as 0)."""
    if _recent(records.shots) < shot_target:
        return "advance"
    if _recent(records.win_rate) < win_target:
        return "finish"
    return "hold"


@dataclasses.dataclass(frozen=True)
class ScriptedSelector:
    """The rule: find the phase (``scripted_phase``), then take the phase's skill after
    the last skill in its list (its first when the last skill is not in it), skipping the
    last skill. Deterministic, and never the last skill (every phase has three)."""

    shot_target: float = 1.0
    win_target: float = 0.5
    name: str = "scripted"

    def select(self, records: Records, frames: Sequence[bytes], last_skill: str) -> SkillChoice:
        phase = scripted_phase(records, self.shot_target, self.win_target)
        order = PHASES[phase]
        last = skill(last_skill).name
        start = order.index(last) + 1 if last in order else 0
        pick = next(s for s in order[start:] + order[:start] if s != last)
        answer = f"Analysis: phase {phase}. Next Skill: {pick}"
        return SkillChoice(pick, self.name, (answer,))


def _numbers(xs: Sequence[float]) -> str:
    return "[" + ", ".join("n/a" if math.isnan(x) else f"{x:.2f}" for x in xs) + "]"


def skill_prompt(records: Records, last_skill: str, video: bool) -> str:
    """The appendix B.3 prompt for ``records`` (``video``: frames go with it)."""
    intro = (
        "Analyse this video."
        if video
        else "Analyse these records (no video of the last episode is attached)."
    )
    return render(
        TEMPLATE,
        video_intro=intro,
        shots=_numbers(records.shots),
        win_rate=_numbers(records.win_rate),
        skill_names=", ".join(SKILL_NAMES),
        skill_descriptions=" ".join(f"{s.name}: {s.description}" for s in SKILLS),
        last_skill=skill(last_skill).name,
        potential_record=_numbers(records.potential),
    )


def follow_up(request: Request, answer: str, error: ParseError, attempt: int) -> Request:
    """The corrective follow-up to an answer that named no skill: the prompt, the answer
    and what was wrong with it, with a fresh seed (``labeling.retry_request``)."""
    prompt = (
        f"{request.prompt}\n\nYour answer was:\n{answer}\n\nIt does not name exactly one "
        f"skill of the pool ({error.reason}). Answer again in the output format, ending "
        f"with the line 'Next Skill: <one of: {', '.join(SKILL_NAMES)}>'."
    )
    again = dataclasses.replace(request, prompt=prompt)
    return retry_request(again, attempt, LabelingPolicy(max_retries=attempt))


@dataclasses.dataclass
class BackendSelector:
    """The B.3 prompt through ``backend`` (a ``CachedBackend`` keeps every query and
    answer). ``payload`` carries the scripted rule's choice, which the scripted teacher
    answers with (a language model never sees it)."""

    backend: Backend
    params: SamplingParams = SamplingParams(max_tokens=400)
    retries: int = 2
    vision: bool = False
    scripted: ScriptedSelector = ScriptedSelector()

    @property
    def name(self) -> str:
        return "vision" if self.vision else "backend"

    def select(self, records: Records, frames: Sequence[bytes], last_skill: str) -> SkillChoice:
        hint = self.scripted.select(records, frames, last_skill).skill
        request = Request(
            prompt=skill_prompt(records, last_skill, self.vision),
            params=self.params,
            payload={"records": records.as_dict(), "last_skill": last_skill, "scripted": hint},
            images=tuple(frames) if self.vision else (),
        )
        answers: list[str] = []
        for attempt in range(self.retries + 1):
            text = self.backend.generate([request])[0].text
            answers.append(text)
            try:
                pick = parse_skill_choice(text)
            except ParseError as e:
                request = follow_up(request, text, e, attempt + 1)
                continue
            last = skill(last_skill).name
            return SkillChoice(pick, self.name, tuple(answers), attempt, pick == last)
        shown = "; ".join(repr(a if len(a) <= 200 else a[:200] + "...") for a in answers)
        raise SkillChoiceError(
            f"V-GEPF {self.name} selector ({self.backend.kind} {self.backend.model!r}): "
            f"{len(answers)} answers named no skill of the pool ({', '.join(SKILL_NAMES)}): "
            f"{shown}. They are kept in the label store; raise selection.retries, fix the "
            "prompt or the model, and resume the run"
        )


def skill_teacher(payloads: Sequence[dict[str, Any]], seeds) -> list[str]:
    """The scripted teacher behind the text interface: answers the payload's scripted
    choice in the paper's output format."""
    return [f"Analysis: scripted rule. Next Skill: {p['scripted']}" for p in payloads]


SCRIPTED_TEACHER = "vgepf_skill"  # the LM factory's scripted teacher for skill choices
register_teacher(SCRIPTED_TEACHER, lambda noise: skill_teacher)

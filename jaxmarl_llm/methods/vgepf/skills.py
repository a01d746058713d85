"""V-GEPF's skill pool: the seven instructions of the paper's appendix B.2, with the short
names and descriptions its skill-selection prompt (appendix B.3) uses.

A skill is a CLIP text prompt; its potential is the cosine between a rendered frame's
image embedding and the prompt's text embedding. ``kind`` is the paper's category.
"""

from __future__ import annotations

import dataclasses


@dataclasses.dataclass(frozen=True)
class Skill:
    name: str  # the name the selector answers with
    instruction: str  # the CLIP text prompt
    description: str  # how the selection prompt describes it
    kind: str  # macro | state | agent | goal


SKILLS: tuple[Skill, ...] = (
    Skill(
        "has advantage",
        "The blue team has a bigger advantage than the red team.",
        "the blue team has bigger advantage than the red team.",
        "macro",
    ),
    Skill(
        "ball location",
        "The ball is close to the opponent's goal.",
        "the ball is close to the opponent's goal.",
        "state",
    ),
    Skill(
        "correct formation",
        "Three blue formation lines are parallel and have proper spacing.",
        "three blue formation lines are parallel and have proper spacing.",
        "agent",
    ),
    Skill(
        "encourage dribbling",
        "The black ball is well dribbled by the blue team.",
        "the black ball is well dribbled by the blue team.",
        "agent",
    ),
    Skill(
        "encourage attack",
        "The blue team is performing a coordinated attack.",
        "the blue team is performing a coordinated attack.",
        "agent",
    ),
    Skill(
        "encourage defense",
        "The blue team is trying to defend when the ball is close to their goal.",
        "the blue team is trying to defend when the ball is close to their goal.",
        "agent",
    ),
    Skill(
        "encourage passing",
        "The blue team is passing.",
        "the blue team is passing.",
        "goal",
    ),
)

SKILL_NAMES: tuple[str, ...] = tuple(s.name for s in SKILLS)


def skill(name: str) -> Skill:
    """The pool's skill called ``name`` (case and surrounding space ignored)."""
    key = " ".join(name.lower().split())
    for s in SKILLS:
        if s.name == key:
            return s
    raise ValueError(f"unknown skill {name!r}; the pool has: {', '.join(SKILL_NAMES)}")


def skill_index(name: str) -> int:
    return SKILL_NAMES.index(skill(name).name)

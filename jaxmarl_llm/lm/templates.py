"""Prompt templates are data: text files in ``jaxmarl_llm/lm/prompts/`` (or a directory
of your own), with ``$name`` placeholders filled from per-environment state describers.

``render`` refuses a missing or an unexpected field, so a describer that drifts from its
template fails at once instead of sending a prompt with a hole in it. Each packaged
template names the parser for the answer form it asks for (``ANSWER_FORMS``).
"""

from __future__ import annotations

import functools
import string
from importlib import resources
from pathlib import Path

from jaxmarl_llm.lm import parsers

# template -> (parser, what it returns)
ANSWER_FORMS = {
    "lca_pair_ranking": (parsers.parse_pair_choice, "P(state 1 better) in {1, 0, 0.5}"),
    "lca_team_goal": (parsers.parse_team_goal, "TeamGoal: goal and ordered key steps"),
    "dpm_trajectory_comparison": (parsers.parse_hash_choice, "P(trajectory 1 better)"),
    "dpm_episode_comparison": (parsers.parse_hash_choice, "P(episode 1 better)"),
    "dpm_agent_ranking": (parsers.parse_agent_ranking, "ranks [N], 0 = best"),
    "yolo_strategy": (str.strip, "free-text strategy"),
    "yolo_planning_function": (
        functools.partial(parsers.parse_python_block, required_function="planning_function"),
        "source of planning_function",
    ),
    "yolo_reward_function": (
        functools.partial(parsers.parse_python_block, required_function="compute_reward"),
        "source of planning_function and compute_reward",
    ),
    "vgepf_skill_choice": (parsers.parse_next_option, "index into the skill pool"),
    "verco_message": (parsers.parse_agent_messages, "one message per agent"),
}


def _template_dir(directory: str | Path | None) -> Path:
    if directory is not None:
        return Path(directory)
    return Path(str(resources.files("jaxmarl_llm.lm").joinpath("prompts")))


def template_names(directory: str | Path | None = None) -> list[str]:
    return sorted(p.stem for p in _template_dir(directory).glob("*.txt"))


def load_template(name: str, directory: str | Path | None = None) -> string.Template:
    path = _template_dir(directory) / f"{name}.txt"
    if not path.is_file():
        raise ValueError(
            f"unknown prompt template {name!r} in {path.parent}; "
            f"valid: {', '.join(template_names(directory))}"
        )
    return string.Template(path.read_text())


def template_fields(name: str, directory: str | Path | None = None) -> list[str]:
    """The placeholders a template needs, in order of first appearance."""
    return list(dict.fromkeys(load_template(name, directory).get_identifiers()))


def render(name: str, directory: str | Path | None = None, **fields: object) -> str:
    """Fill template ``name`` with exactly its fields."""
    template = load_template(name, directory)
    needed = template_fields(name, directory)
    missing = [f for f in needed if f not in fields]
    extra = sorted(set(fields) - set(needed))
    if missing or extra:
        raise ValueError(
            f"prompt template {name!r} needs fields {needed}; "
            + (f"missing {missing}" if missing else "")
            + ("; " if missing and extra else "")
            + (f"unexpected {extra}" if extra else "")
        )
    return template.substitute({k: str(v) for k, v in fields.items()})

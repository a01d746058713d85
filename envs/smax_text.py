"""Text descriptions of SMAX states for language-model prompts (DPM appendix E).

``scenario_info`` fills the environment-description part of DPM's prompts (teams,
situation, objective); ``scene`` describes one state as in DPM's Figure 17: every ally's
location and health with, when given, the action it takes, then every enemy's location
and health. ``agents`` restricts the allies described (DPM section 4.5: prompts about a
subset of agents on large maps). Units are numbered from 1 as in the paper's prompts;
dead units are said to be dead.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np

from envs.smax_unit_types import UNIT_TYPES

# SMAX's discrete ally actions: 4 moves (north, east, south, west), stop, then attacks.
MOVES = ("move north", "move east", "move south", "move west", "stop")
NUMBER_WORDS = ("zero", "one", "two", "three", "four", "five", "six", "seven", "eight", "nine")


def _units(env_state: Any):
    return getattr(env_state, "state", env_state)


def _team(types: Sequence[int]) -> str:
    counts = {t: list(types).count(t) for t in dict.fromkeys(types)}
    parts = []
    for t, n in counts.items():
        word = NUMBER_WORDS[n] if n < len(NUMBER_WORDS) else str(n)
        parts.append(f"{word} {UNIT_TYPES[t]}{'s' if n > 1 else ''}")
    return (" and ".join(parts)).capitalize()


def scenario_info(raw: Any, env_state: Any) -> str:
    """The scenario lines of DPM's prompts (unit types are read from ``env_state``, so
    SMACv2-style random teams are described as they are)."""
    types = np.asarray(_units(env_state).unit_types).tolist()
    n = raw.num_allies
    allies, enemies = types[:n], types[n:]
    return "\n".join(
        [
            f"- Scenario : {len(allies)} allies vs {len(enemies)} enemies",
            f"- Allied Team Agent Configuration : {_team(allies)}",
            f"- Enemy Team Agent Configuration : {_team(enemies)}",
            "- Situation Description : The situation involves the allied team and the enemy "
            "team engaging in combat, where victory is achieved by defeating all the enemies.",
            "- Objective : Defeat all enemy agents while ensuring as many allied agents as "
            "possible survive.",
        ]
    )


def action_text(raw: Any, action: int) -> str:
    moves = raw.num_movement_actions
    if action < moves:
        return MOVES[action]
    return f"attack Enemy Agent {action - moves + 1}"


def _unit_line(kind: str, k: int, pos, health, alive: bool, colon: bool) -> str:
    sep = " : " if colon else " "
    if not alive:
        return f"    - {kind} Agent {k}'s Location : dead / {kind} Agent {k}'s Health{sep}0"
    return (
        f"    - {kind} Agent {k}'s Location : ({pos[0]:.1f},{pos[1]:.1f}) / "
        f"{kind} Agent {k}'s Health{sep}{health:.0f}"
    )


def scene(
    raw: Any,
    env_state: Any,
    actions: Sequence[int] | None = None,
    agents: Sequence[int] | None = None,
) -> str:
    """One state as DPM's "Scene Information" (allies with actions, then enemies)."""
    u = _units(env_state)
    pos, health = np.asarray(u.unit_positions), np.asarray(u.unit_health)
    alive = np.asarray(u.unit_alive)
    n = raw.num_allies
    shown = range(n) if agents is None else agents
    lines = ["  1) Allied Agents Information"]
    for i in shown:
        lines.append(_unit_line("Ally", i + 1, pos[i], health[i], bool(alive[i]), True))
        if actions is not None and alive[i]:
            lines.append(
                f"      * Ally Agent {i + 1}'s Action : {action_text(raw, int(actions[i]))}"
            )
    lines.append("  2) Enemy Agents Information")
    for j in range(n, len(alive)):
        lines.append(_unit_line("Enemy", j - n + 1, pos[j], health[j], bool(alive[j]), False))
    return "\n".join(lines)


def trajectory(raw: Any, first: Any, last: Any, length: int) -> str:
    """A ``length``-step window of one episode for DPM's comparison prompt: the episode
    steps where it starts and ends, and its first and last states."""
    start, end = int(_units(first).step), int(_units(last).step)
    if end - start != length:
        raise ValueError(
            f"a {length}-step window must end {length} steps after it starts; its states are "
            f"at episode steps {start} and {end}"
        )
    return "\n".join(
        [
            f"Window : {length} steps, from episode step {start} to episode step {end}",
            f"Initial state (episode step {start}) :",
            scene(raw, first),
            f"Final state (episode step {end}) :",
            scene(raw, last),
        ]
    )


class SmaxDescriber:
    """The ``SceneDescriber`` capability of a SMAX env (``envs.capabilities``): this
    module's functions bound to ``env``."""

    def __init__(self, env: Any):
        self.env = env

    def scenario_info(self, state: Any) -> str:
        return scenario_info(self.env, state)

    def scene(
        self, state: Any, actions: Sequence[int] | None = None, agents: Sequence[int] | None = None
    ) -> str:
        return scene(self.env, state, actions, agents)

    def trajectory(self, first: Any, last: Any, length: int) -> str:
        return trajectory(self.env, first, last, length)

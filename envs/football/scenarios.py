"""Scenario definitions: starting positions, controlled players, difficulty, length.

Coordinates are GRF's, seen from the left team: x in [-1, 1] (the left team attacks
toward x = +1), y in [-0.42, 0.42] with "top" at negative y. Both teams are stored in
these left-team coordinates; the right team's formation is the left one mirrored through
the centre spot (x -> -x, y -> -y), so its left back also plays on its own left.

Team order (both teams): 0 GK, 1 LB, 2 CB, 3 CB, 4 RB, 5 LM, 6 CM, 7 CM, 8 RM, 9 CF, 10 CF
(a 4-4-2).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

# 4-4-2 kick-off formation of the left team, own half. [11, 2]
FORMATION_442 = np.array(
    [
        [-0.99, 0.00],  # GK
        [-0.55, -0.28],  # LB
        [-0.62, -0.10],  # CB
        [-0.62, 0.10],  # CB
        [-0.55, 0.28],  # RB
        [-0.30, -0.28],  # LM
        [-0.34, -0.09],  # CM
        [-0.34, 0.09],  # CM
        [-0.30, 0.28],  # RM
        [-0.06, -0.08],  # CF
        [-0.01, 0.06],  # CF (takes the kick-off)
    ],
    np.float32,
)
KICKOFF_PLAYER = 10
# the team not kicking off waits outside the centre circle (radius 9.15 m ~ 0.17)
FORMATION_442_RECEIVING = FORMATION_442.copy()
FORMATION_442_RECEIVING[:, 0] = np.minimum(FORMATION_442[:, 0], -0.18)


@dataclass(frozen=True)
class Scenario:
    difficulty: float  # GRF's opponent difficulty d in [0, 1]
    max_steps: int
    controlled: tuple[int, ...]  # left-team indices of the controlled players
    left_start: np.ndarray  # [11, 2] left-team coordinates
    right_start: np.ndarray  # [11, 2] left-team coordinates
    ball_start: tuple[float, float]
    owner_start: int  # player index 0..21 (right team 11..21) owning the ball at reset
    # academy rule: the episode ends on a goal, out of play or the right team winning the ball
    end_on_possession_change: bool


def _eleven(difficulty: float, scripted_keeper: bool) -> Scenario:
    left = FORMATION_442.copy()
    left[KICKOFF_PLAYER] = [-0.01, 0.0]
    return Scenario(
        difficulty=difficulty,
        max_steps=3000,
        controlled=tuple(range(1 if scripted_keeper else 0, 11)),
        left_start=left,
        right_start=-FORMATION_442_RECEIVING,
        ball_start=(0.0, 0.0),
        owner_start=KICKOFF_PLAYER,
        end_on_possession_change=False,
    )


def _counterattack(hard: bool) -> Scenario:
    """GRF's academy_counterattack: the left team breaks with the ball at (0.26, -0.11)
    against a right team caught upfield. Controlled: LM (5), CM (6), RM (8), CF (9); the
    CM starts on the ball. Hard adds one right-team defender at x = 0.4 (left-team
    coordinates, i.e. in front of the right team's goal between ball and box); on easy that
    player trails far behind the play at x = -0.6."""
    left = np.array(
        [
            [-0.99, 0.00],  # GK
            [-0.60, -0.20],  # LB
            [-0.65, -0.05],  # CB
            [-0.65, 0.05],  # CB
            [-0.60, 0.20],  # RB
            [0.30, -0.30],  # LM
            [0.25, -0.11],  # CM, on the ball
            [-0.20, 0.00],  # CM
            [0.30, 0.28],  # RM
            [0.45, 0.02],  # CF
            [-0.10, 0.10],  # CF (not controlled, trails)
        ],
        np.float32,
    )
    right = np.array(
        [
            [0.99, 0.00],  # GK
            [0.75, -0.12],  # CB
            [0.75, 0.12],  # CB
            [0.40 if hard else -0.60, 0.05],  # extra defender on hard
            [-0.10, 0.25],
            [-0.05, -0.25],
            [-0.20, 0.00],
            [-0.30, 0.15],
            [-0.30, -0.15],
            [-0.50, 0.05],
            [-0.50, -0.05],
        ],
        np.float32,
    )
    return Scenario(
        difficulty=0.95 if hard else 0.05,
        max_steps=400,
        controlled=(5, 6, 8, 9),
        left_start=left,
        right_start=right,
        ball_start=(0.26, -0.11),
        owner_start=6,
        end_on_possession_change=True,
    )


SCENARIOS = (
    "11_vs_11_easy_stochastic",
    "11_vs_11_hard_stochastic",
    "academy_counterattack_easy",
    "academy_counterattack_hard",
)


def scenario(name: str, scripted_keeper: bool = False) -> Scenario:
    if name == "11_vs_11_easy_stochastic":
        return _eleven(0.05, scripted_keeper)
    if name == "11_vs_11_hard_stochastic":
        return _eleven(0.95, scripted_keeper)
    if name == "academy_counterattack_easy":
        return _counterattack(hard=False)
    if name == "academy_counterattack_hard":
        return _counterattack(hard=True)
    raise ValueError(f"unknown football scenario {name!r}; known: {', '.join(SCENARIOS)}")

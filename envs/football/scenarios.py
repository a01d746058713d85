"""Scenario definitions after GRF's scenario files: starting positions, roles, controlled
players, difficulty, length.

Coordinates are GRF's, seen from the left team: x in [-1, 1] (the left team attacks
toward x = +1), y in [-0.42, 0.42] with "top" at negative y. GRF's scenario files write
each team as if it attacked to the right; the right team's positions are that point
mirrored through the centre spot, (x, y) -> (-x, -y). Both teams are stored here in
left-team coordinates.

Each team's players sit in fixed slots, the same in every scenario, so that a slot's role
and formation spot do not change between scenarios (``ROLES``): GRF's 4-3-3 of its
11 vs 11 and counterattack files (GK, LB, CB, CB, RB, CM, CM, CM, LM, RM, CF), its
players put into the slots by role. The files' own order is GRF's player order in
``simple115_v2``; ours is the slot order.

* ``11_vs_11_{easy,hard}_stochastic``: the files' kick-off layouts. The team that kicks
  off has its RM and CF on the centre spot; GRF alternates the kick-off team between
  episodes (``EpisodeNumber() % 2``), here each reset draws it with probability 1/2
  (a reset has no episode number). Difficulty 0.05 / 0.95, 3,000 steps.
* ``academy_counterattack_{easy,hard}``: the files' positions. The ball lies at
  (0.26, -0.11) in front of the left LM, who starts on it; the four left attackers
  (LM, RM, CF and the advanced CM) are controlled. Easy leaves one right centre back
  between the ball and the goal (the other far upfield), hard both. GRF's files set no
  difficulty, so the right team plays at GRF's default 0.6 on both; 400 steps; the
  episode ends on a goal, out of play or the right team winning the ball.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

# 11 vs 11 (``_stochastic``): every player but the one on the ball starts up to this far
# (per coordinate) from its layout spot; the academy starts on the file's spots
RESET_JITTER = 0.01

# slot -> GRF role (each team)
ROLES = ("GK", "LB", "CB", "CB", "RB", "LM", "CM", "CM", "RM", "CF", "CM")
GK, LB, CB_L, CB_R, RB, LM, CM_L, CM_R, RM, CF, CM_C = range(11)

# The three lines of the 4-3-3 by slot: the back four, the three central midfielders,
# the front three (LM, RM, CF); the renderer draws them and "correct formation" judges them
FORMATION_LINES = ((LB, CB_L, CB_R, RB), (CM_L, CM_C, CM_R), (LM, CF, RM))

# Home spot of each slot when the team defends around its own half (own-team frame): the
# scripted players hold it, shifted with the ball. [11, 2]
FORMATION = np.array(
    [
        [-0.99, 0.00],  # GK
        [-0.55, -0.28],  # LB
        [-0.62, -0.10],  # CB
        [-0.62, 0.10],  # CB
        [-0.55, 0.28],  # RB
        [-0.15, -0.28],  # LM
        [-0.34, -0.12],  # CM
        [-0.34, 0.12],  # CM
        [-0.15, 0.28],  # RM
        [-0.06, 0.00],  # CF
        [-0.40, 0.00],  # CM (holding)
    ],
    np.float32,
)


def _slots(by_role: dict[int, tuple[float, float]]) -> np.ndarray:
    out = np.zeros((11, 2), np.float32)
    for slot, xy in by_role.items():
        out[slot] = xy
    return out


# GRF's 11_vs_11_*_stochastic, own-team frame: the team kicking off ("first team") and the
# other one ("second team")
_ELEVEN_SHARED = {
    GK: (-1.0, 0.0),
    LB: (-0.422, -0.19576),
    CB_L: (-0.5, -0.06356),
    CB_R: (-0.5, 0.063559),
    RB: (-0.422, 0.19576),
    CM_L: (-0.184212, -0.10568),
    CM_C: (-0.267574, 0.0),
    CM_R: (-0.184212, 0.10568),
    LM: (-0.01, -0.2161),
}
KICKOFF_LAYOUT = _slots({**_ELEVEN_SHARED, RM: (0.0, 0.02), CF: (0.0, -0.02)})
RECEIVING_LAYOUT = _slots({**_ELEVEN_SHARED, RM: (-0.05, 0.0), CF: (-0.01, 0.216102)})
KICKOFF_PLAYER = CF  # of the two on the centre spot, the one given the ball


@dataclass(frozen=True)
class Scenario:
    difficulty: float  # GRF's right-team difficulty d in [0, 1]
    max_steps: int
    controlled: tuple[int, ...]  # left-team slots of the controlled players
    left_start: np.ndarray  # [11, 2] left-team coordinates
    right_start: np.ndarray  # [11, 2] left-team coordinates
    ball_start: tuple[float, float]
    owner_start: int  # player index 0..21 (right team 11..21) owning the ball at reset
    # academy rule: the episode ends on a goal, out of play or the right team winning the ball
    end_on_possession_change: bool
    # 11 vs 11: each reset draws the kick-off team; the start layout above is the left
    # team kicking off
    random_kickoff: bool = False
    # uniform +- this on every player's start coordinates but the ball carrier's
    reset_jitter: float = 0.0


def _eleven(difficulty: float, scripted_keeper: bool) -> Scenario:
    return Scenario(
        difficulty=difficulty,
        max_steps=3000,
        controlled=tuple(range(1 if scripted_keeper else 0, 11)),
        left_start=KICKOFF_LAYOUT.copy(),
        right_start=-RECEIVING_LAYOUT,
        ball_start=(0.0, 0.0),
        owner_start=KICKOFF_PLAYER,
        end_on_possession_change=False,
        random_kickoff=True,
        reset_jitter=RESET_JITTER,
    )


def _counterattack(hard: bool) -> Scenario:
    """GRF's academy_counterattack_easy / _hard files, slot by role."""
    left = _slots(
        {
            GK: (-1.0, 0.0),
            LB: (-0.672, -0.19576),
            CB_L: (-0.75, -0.06356),
            CB_R: (-0.75, 0.063559),
            RB: (-0.672, 0.19576),
            CM_L: (-0.434, -0.10568),
            CM_R: (-0.434, 0.10568),
            CM_C: (0.5, -0.3161),  # the file's third CM, the advanced left attacker
            LM: (0.25, -0.1),
            RM: (0.25, 0.1),
            CF: (0.35, 0.316102),
        }
    )
    right_own = _slots(
        {
            GK: (-1.0, 0.0),
            LB: (0.128, -0.19576),
            # easy: this centre back is far upfield; hard: back in front of its goal
            CB_L: (-0.4 if hard else 0.4, -0.06356),
            CB_R: (-0.4, 0.063559),
            RB: (0.128, -0.19576),  # the files put the RB on the LB's spot
            CM_L: (0.365, -0.10568),
            CM_C: (0.282, 0.0),
            CM_R: (0.365, 0.10568),
            LM: (0.54, -0.3161),
            RM: (0.51, 0.0),
            CF: (0.54, 0.316102),
        }
    )
    return Scenario(
        difficulty=0.6,
        max_steps=400,
        controlled=(LM, RM, CF, CM_C),
        left_start=left,
        right_start=-right_own,
        ball_start=(0.26, -0.11),
        owner_start=LM,
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

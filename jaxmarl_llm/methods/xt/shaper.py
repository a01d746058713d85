"""MAPPO-xT's shaping: an Expected-Threat potential on the ball's zone (V-GEPF's baseline).

``F = gamma * phi(s') - phi(s)`` with ``phi(s') = 0`` at the last step of an episode (the
paper's eq. 1), the same value for every agent; the config's ``shaping.coef`` is the
paper's rho (0.02). The potential reads the football state (``TransitionBatch.state`` and
``next_state`` are ``FootballState``s):

* left team on the ball: ``xT[zone(ball)]``;
* right team on the ball (``opponent: mirror``, the default): ``-xT[zone(-ball)]``, the
  right team's threat in its own attacking frame. xT is the chance the team on the ball
  scores; the env reward is +1 for a goal and -1 for one conceded, so the potential that
  tracks the reward's expectation counts the opponents' threat against us, and losing
  the ball costs what the possession was worth. ``opponent: zero`` gives 0 instead (xT
  only rewards our own attacks);
* a free ball belongs to the team that touched it last (a pass or shot in flight is
  still its kicker's attack, as the event model credits a pass to where it started).
"""

from __future__ import annotations

from dataclasses import dataclass
from enum import Enum

import jax
import jax.numpy as jnp

from envs.capabilities import FootballMatch, require
from envs.football import FootballState
from jaxmarl_llm.errors import ConfigError
from jaxmarl_llm.methods.xt.events import team_zone
from jaxmarl_llm.methods.xt.gridfile import load_grid
from jaxmarl_llm.shaper import CombineMode, Shaper, potential_difference
from jaxmarl_llm.transitions import TransitionBatch


class OpponentRule(str, Enum):
    mirror = "mirror"  # -xT of the right team's ball zone in its own attacking frame
    zero = "zero"  # no potential while the right team has the ball


@dataclass
class XTConfig:
    """``shaping.kwargs`` of ``shaping.name: xt``."""

    # xT grid file (JSON or .npy, [15, 21] = [y, x] or [21, 15] = [x, y]; see
    # methods/xt/gridfile.py); null: the packaged grid made by experiments/xt_grid.py
    grid: str | None = None
    # the discount of F = gamma * phi(s') - phi(s). A shaper builder does not see the
    # learner's config, so set it to algo.gamma (Table 1: 0.995) for policy invariance.
    gamma: float = 0.995
    opponent: OpponentRule = OpponentRule.mirror

    @staticmethod
    def check(cfg: XTConfig) -> None:
        if not 0.0 < cfg.gamma <= 1.0:
            raise ValueError(f"gamma must be in (0, 1], got {cfg.gamma}")
        load_grid(cfg.grid)  # a missing or malformed file fails at config load


def potential(grid: jax.Array, state: FootballState, opponent: OpponentRule) -> jax.Array:
    """``phi(s)`` ``[...]`` of states with any leading shape; ``grid`` is ``[NY, NX]``."""
    team = jnp.where(state.owner >= 0, state.owner // 11, state.last_touch)
    ny, nx = grid.shape
    value = grid.reshape(-1)[team_zone(state.ball, team, nx, ny)]
    if OpponentRule(opponent) == OpponentRule.mirror:
        return jnp.where(team == 0, value, -value)
    return jnp.where(team == 0, value, 0.0)


def xt_shaping(
    grid: jax.Array, batch: TransitionBatch, gamma: float, opponent: OpponentRule
) -> jax.Array:
    """``gamma * phi(s') - phi(s)`` per agent ``[..., N]`` (``phi(s') = 0`` where done)."""
    phi, phi_next = (
        potential(grid, batch.state, opponent),
        potential(grid, batch.next_state, opponent),
    )
    return potential_difference(gamma, batch.done, phi, phi_next, batch.reward)


def xt_shaper(env, cfg: XTConfig, mode: CombineMode = CombineMode.add, coef: float = 1.0) -> Shaper:
    """The ``xt`` shaper for ``env`` (an ``ArrayEnv`` of a football scenario)."""
    try:
        require(env, FootballMatch, needed_by="shaping.name=xt (it reads the ball's zone)")
    except ValueError as e:
        raise ConfigError(str(e)) from None
    gamma, opponent = float(cfg.gamma), OpponentRule(cfg.opponent)
    return Shaper(
        apply=lambda grid, batch: xt_shaping(grid, batch, gamma, opponent),
        params=jnp.asarray(load_grid(cfg.grid)),
        fields=("state", "next_state"),
        mode=mode,
        coef=coef,
        name="xt",
        potential=lambda grid, states: potential(grid, states, opponent),
        gamma=gamma,
    )

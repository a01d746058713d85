"""xT events from football transitions: moves, shots and goals of the team on the ball.

Events are read off consecutive ``FootballState``s plus the carrier's scripted kick intent
(the env resolves a kick only if no tackle wins the ball first). Every event is in the
acting team's attacking frame: the right team's positions are turned through the centre
spot (x, y) -> (-x, -y), so both teams' play counts toward one grid attacking +x.

* carry: the carrier keeps the ball and it enters another zone -> a successful move
  (staying inside one zone is no event, so ``T`` has no carry self-loops);
* tackle: an opponent wins the ball -> a failed move from the carrier's zone;
* pass: the kick opens a pending pass from the ball's zone; it ends when the ball is next
  owned: a teammate's pick-up is a successful move to the pick-up zone, an opponent's
  pick-up or the ball going out (or into a goal) a failed one;
* shot: counted in the ball's zone when kicked; a goal for the shooting team before the
  ball is owned again credits that zone with a goal.
"""

from __future__ import annotations

import jax
import jax.numpy as jnp
from flax import struct

from envs.football.env import KICK_SHOT, NO_KICK, NORMAL, FootballState
from jaxmarl_llm.methods.xt.grid import NX, NY, XTCounts, zone_index

NOTHING, PASS, SHOT = 0, 1, 2
# tallies kept beside the counts (for the grid file's record)
TALLY_NAMES = ("carries", "passes", "passes_completed", "tackles_lost")
CARRIES, PASSES, PASSES_DONE, TACKLES_LOST = range(len(TALLY_NAMES))


@struct.dataclass
class Pending:
    """A kicked ball not yet resolved: kind (NOTHING, PASS, SHOT), team, start zone."""

    kind: jax.Array  # [] int32
    team: jax.Array  # [] int32
    zone: jax.Array  # [] int32, in ``team``'s attacking frame

    @classmethod
    def none(cls) -> Pending:
        z = jnp.zeros((), jnp.int32)
        return cls(kind=z, team=z, zone=z)


@struct.dataclass
class StepEvents:
    """At most one move, one shot and one goal per step (flags and flat zones)."""

    move: jax.Array  # [] bool
    move_from: jax.Array  # [] int32
    move_to: jax.Array  # [] int32
    move_ok: jax.Array  # [] bool
    shot: jax.Array  # [] bool
    shot_zone: jax.Array  # [] int32
    goal: jax.Array  # [] bool
    goal_zone: jax.Array  # [] int32
    tallies: jax.Array  # [len(TALLY_NAMES)] float32


def team_zone(ball: jax.Array, team: jax.Array, nx: int = NX, ny: int = NY) -> jax.Array:
    """Zone of ``ball`` [..., 2] in the attacking frame of ``team`` [...] (0 left, 1 right)."""
    sign = jnp.where(team == 0, 1.0, -1.0)[..., None]
    return zone_index(ball * sign, nx, ny)


def step_events(
    pending: Pending,
    state: FootballState,
    kick: jax.Array,
    next_state: FootballState,
    nx: int = NX,
    ny: int = NY,
) -> tuple[Pending, StepEvents]:
    """Events of one step ``state -> next_state`` of one env; ``kick`` [22] is the
    scripted kick intent at ``state`` (``Football.scripted_intent(state)[2]``)."""
    owner, n_owner = state.owner, next_state.owner
    has, n_has = owner >= 0, n_owner >= 0
    team = jnp.maximum(owner, 0) // 11
    n_team = jnp.maximum(n_owner, 0) // 11
    zone = team_zone(state.ball, team, nx, ny)
    restart = next_state.game_mode != NORMAL  # a goal or the ball out of play this step
    scored = next_state.score - state.score  # [2]
    goal_by = jnp.where(scored[0] > 0, 0, jnp.where(scored[1] > 0, 1, -1))

    # the team on the ball at ``state``
    k = kick[jnp.maximum(owner, 0)]
    stolen = has & n_has & (n_team != team) & ~restart
    kicked = has & (k != NO_KICK) & ~stolen
    kept = has & ~kicked & (n_owner == owner)
    carry_to = team_zone(next_state.ball, team, nx, ny)
    carry = kept & (carry_to != zone)
    pass_kick = kicked & (k != KICK_SHOT)
    shot_kick = kicked & (k == KICK_SHOT)

    # a free ball at ``state``: the pending kick resolves once the ball is owned again
    free = ~has
    resolve = free & n_has & (pending.kind != NOTHING)
    pass_end = resolve & (pending.kind == PASS)
    pass_done = pass_end & ~restart & (n_team == pending.team)
    pass_to = team_zone(next_state.ball, pending.team, nx, ny)

    move = carry | stolen | (pass_kick & restart) | pass_end
    move_from = jnp.where(free, pending.zone, zone)
    move_to = jnp.where(free, pass_to, carry_to)
    move_ok = jnp.where(free, pass_done, carry)
    goal_now = shot_kick & (goal_by == team)
    goal_late = free & (pending.kind == SHOT) & (goal_by == pending.team)
    goal = goal_now | goal_late
    goal_zone = jnp.where(free, pending.zone, zone)

    opened = kicked & ~restart
    new_kind = jnp.where(pass_kick, PASS, SHOT)
    kept_kind = jnp.where(free & n_has, NOTHING, pending.kind)  # owned again: resolved
    pending = Pending(
        kind=jnp.where(opened, new_kind, kept_kind),
        team=jnp.where(opened, team, pending.team),
        zone=jnp.where(opened, zone, pending.zone),
    )
    tallies = jnp.stack([carry, pass_kick, pass_done, stolen]).astype(jnp.float32)
    events = StepEvents(
        move=move,
        move_from=move_from,
        move_to=move_to,
        move_ok=move_ok,
        shot=shot_kick,
        shot_zone=zone,
        goal=goal,
        goal_zone=goal_zone,
        tallies=tallies,
    )
    return pending, events


def add_events(counts: XTCounts, events: StepEvents) -> XTCounts:
    """``counts`` plus ``events`` of any leading shape (envs of one step)."""
    f = lambda b: jnp.ravel(b).astype(jnp.float32)
    i = jnp.ravel
    return XTCounts(
        moves=counts.moves.at[i(events.move_from)].add(f(events.move)),
        success=counts.success.at[i(events.move_from), i(events.move_to)].add(
            f(events.move & events.move_ok)
        ),
        shots=counts.shots.at[i(events.shot_zone)].add(f(events.shot)),
        goals=counts.goals.at[i(events.goal_zone)].add(f(events.goal)),
    )

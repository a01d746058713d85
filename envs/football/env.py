"""A pure-JAX 2D football game with Google Research Football's interface.

The left team (attacking toward x = +1) is the learners'; the right team and the left
players not controlled follow a scripted policy. Interface as GRF: the 19 actions of
``action_set_v1``, ``simple115_v2`` observations per controlled player, scoring reward
(optionally GRF's checkpoint reward), 10 steps per second. Scenarios (``scenarios.py``)
take their positions, roles and rules from GRF's scenario files.

Rules (all on one flat 2D pitch, ``dt`` = 0.1 s):

* Players move at ``RUN_SPEED`` per step, ``SPRINT_SPEED`` while sprinting, times
  ``DRIBBLE_FACTOR`` while dribbling; scripted right-team players are scaled by GRF's
  difficulty stat ``0.3 + 0.7 d``. Players stay on the pitch.
* The carrier keeps the ball just ahead of it in its facing direction (closer while
  dribbling). A free ball rolls with friction ``BALL_FRICTION`` per step; a free, grounded
  ball within ``CONTROL_RADIUS`` of a player's path (up to the goal line where it crosses
  one) is picked up by the nearest such player (the kicker cannot retake it for
  ``KICK_COOLDOWN`` steps, and a ball kicked this step cannot be taken in that step).
* Passes go to the best-placed teammate in the kicker's facing direction (score: the
  cosine to the facing direction minus a penalty for distance from the pass type's
  preferred length and for nearby opponents). The ball is kicked at the receiver's
  position with a speed that makes it roll there (and about 0.05 beyond): short passes
  reach at most ``0.45``, long and high ones ``0.95``; a high pass flies (cannot be
  picked up, height reported as ``AIR_HEIGHT``) for ``ceil(0.7 * length / initial
  speed)`` steps.
* A shot aims at the opponent goal's centre with Gaussian noise on the aimed y whose
  standard deviation grows with the square of the distance to goal.
* Keepers: a grounded ball the other team sent toward a keeper's goal passing within
  ``KEEPER_REACH`` of the keeper on its path (the kick's own step included) is saved, the
  keeper taking the ball, with probability ``KEEPER_SAVE * stat * (1 - distance /
  KEEPER_REACH)`` (``stat`` the difficulty stat; 1 for the left team): a keeper on its
  line saves some close shots, more on hard, and one off its line few.
* Tackles: each opponent within ``TACKLE_RADIUS`` of the carrier or of the ball at its
  feet wins the ball with probability ``TACKLE_PROB`` (scaled by its stat) per step;
  ``sliding`` reaches ``SLIDE_RADIUS`` and wins with ``SLIDE_PROB``. A won tackle cancels
  the carrier's kick of that step. A sliding player stands still for that step.
* Goal: the free ball crosses x = +-1 with |y| < 0.044 untaken. Kick-off after a goal:
  both teams in GRF's 11 vs 11 kick-off layouts (``scenarios.KICKOFF_LAYOUT`` for the
  conceding team, which kicks off, ``RECEIVING_LAYOUT`` for the other), the ball at the
  centre spot owned by the conceding team's CF. As in GRF, whose kick-off mode ends in
  the frame it starts, play goes on at once (game mode normal).
* Out of play (restarts): over a side line -> throw-in; over a goal line -> goal kick if
  the attacking team touched last, else corner. The ball is placed at the nearest legal
  spot (throw-in: where it left, inside the line; goal kick: (+-0.9, 0); corner: the
  nearest corner) and given to the other team's nearest outfield player (its keeper for
  a goal kick), who is moved onto the ball. As in GRF the game mode (throw-in, goal kick,
  corner) lasts until the taker kicks the ball: meanwhile the taker may turn but not
  walk, nobody tackles and the scripted players do not close in; a scripted taker passes
  at once, and after ``SET_PIECE_WAIT`` (20) steps a controlled taker that has not kicked
  plays a short pass, as GRF's env does for an agent that holds the game up.
* Scripted policy: the carrier dribbles toward goal, shoots within ``SHOT_RANGE`` and
  passes when an opponent is within ``PRESSED_RADIUS``; without the ball, the nearest
  outfield player chases a free ball and always presses the opponents' carrier, the
  second nearest presses too when within ``PRESS_RADIUS * (0.3 + 0.7 d)`` (GRF's AI sends
  its two nearest players to hunt the ball holder); the others hold their formation spot
  (``scenarios.FORMATION``) shifted with the ball; keepers track the ball's y on their
  line. So a team that keeps the ball still loses it within tens of steps at every
  difficulty (``experiments/football_behaviour.py``).
* Checkpoint reward (``rewards="scoring,checkpoints"``), as GRF's
  ``CheckpointRewardWrapper``: per controlled player, 0.1 for each of 10 zones of the
  ball's distance to the opponent goal (thresholds ``0.99 - 0.8 k / 9``) while that
  player has the ball, each zone once per episode; a goal pays every controlled player
  the zones it has left. The agents' rewards are per player.
* Starts: the 11 vs 11 scenarios (GRF's ``_stochastic``) move every player but the one on
  the ball by a uniform offset of up to ``scenarios.RESET_JITTER`` per coordinate.

Simplifications relative to GRF, stated here as the rules used:

* Offside, fouls, cards, free kicks and penalties are not modelled; the ball has no
  height except for the high pass' flight flag (the observed ball z is ``AIR_HEIGHT``
  while it flies, its z direction always 0). Players do not collide. Player directions in
  the observation are the last step's displacements.
* GRF's stoppage before a restart is invisible to the agents and does not count toward
  the episode's steps; here the restart is set up within the step the ball went out, and
  a set piece's waiting steps count.
* GRF alternates the 11 vs 11 kick-off team between episodes by episode number; a reset
  here has no episode number, so it draws the kick-off team with probability 1/2.
* Kick actions (passes, shot) by a player without the ball do nothing (GRF buffers them
  until the player receives the ball).
* The reaction delay ``(1 - d) * 100 ms`` rounds to whole steps (0 or 1 step): with a
  delay the scripted right team reacts to the ball position of the previous step.

Episode statistics (``FootballState.stats``, a fixed ``[NUM_STATS]`` float32 array,
returned in ``step_env``'s info as ``episode_stats`` and by ``episode_stats(state)`` as a
dict): goals scored and conceded, left shots, left shots on target (the noisy aim inside
the goal mouth), left passes and completed passes (received by a teammate), steps with
the left team on the ball, steps, and the sum over steps of the left outfield players'
convex hull area (gift wrapping over the 10 points; ``spread`` in the dict is its mean).
``ArrayEnv`` keeps only its own info keys, so learners read the statistics of an ended
episode from ``StepResult.terminal_env_state`` (``episode_stats(res.terminal_env_state)``
where ``res.done``); the win flag is also ``ArrayEnv``'s ``info["won"]`` (``won_fn``).
"""

from __future__ import annotations

import chex
import jax
import jax.numpy as jnp
import numpy as np
from flax import struct
from jaxmarl.environments.multi_agent_env import MultiAgentEnv
from jaxmarl.environments.spaces import Box, Discrete

from envs import fast_random
from envs.capabilities import FootballMatch, Renderer, ScriptedIntents, provides
from envs.football.scenarios import (
    FORMATION,
    KICKOFF_LAYOUT,
    KICKOFF_PLAYER,
    RECEIVING_LAYOUT,
    scenario,
)

# ----- GRF's action_set_v1 ------------------------------------------------------------------
ACTION_NAMES = (
    "idle",
    "left",
    "top_left",
    "top",
    "top_right",
    "right",
    "bottom_right",
    "bottom",
    "bottom_left",
    "long_pass",
    "high_pass",
    "short_pass",
    "shot",
    "sprint",
    "release_direction",
    "release_sprint",
    "sliding",
    "dribble",
    "release_dribble",
)
(
    IDLE,
    LEFT,
    TOP_LEFT,
    TOP,
    TOP_RIGHT,
    RIGHT,
    BOTTOM_RIGHT,
    BOTTOM,
    BOTTOM_LEFT,
    LONG_PASS,
    HIGH_PASS,
    SHORT_PASS,
    SHOT,
    SPRINT,
    RELEASE_DIRECTION,
    RELEASE_SPRINT,
    SLIDING,
    DRIBBLE,
    RELEASE_DRIBBLE,
) = range(19)
NUM_ACTIONS = 19
_R = float(np.sqrt(0.5))
# unit vector of sticky direction 0 (none) and the 8 move actions; "top" is -y [9, 2]
DIRECTIONS = jnp.array(
    [[0, 0], [-1, 0], [-_R, -_R], [0, -1], [_R, -_R], [1, 0], [_R, _R], [0, 1], [-_R, _R]],
    jnp.float32,
)

# kick kinds (internal)
NO_KICK, KICK_SHORT, KICK_LONG, KICK_HIGH, KICK_SHOT = range(5)
# GRF game modes
NORMAL, KICK_OFF, GOAL_KICK, FREE_KICK, CORNER, THROW_IN, PENALTY = range(7)

# ----- pitch and physics --------------------------------------------------------------------
PITCH_X, PITCH_Y, GOAL_Y = 1.0, 0.42, 0.044
RUN_SPEED, SPRINT_SPEED, DRIBBLE_FACTOR = 0.010, 0.015, 0.7
BALL_FRICTION = 0.92
CONTROL_RADIUS, BALL_OFFSET, DRIBBLE_OFFSET = 0.02, 0.012, 0.007
KICK_COOLDOWN = 3
PASS_MAX = {KICK_SHORT: 0.45, KICK_LONG: 0.95, KICK_HIGH: 0.95}
PASS_PREFERRED = {KICK_SHORT: 0.2, KICK_LONG: 0.55, KICK_HIGH: 0.6}
SHOT_SPEED, SHOT_NOISE_BASE, SHOT_NOISE_QUAD = 0.09, 0.005, 0.25
AIR_FRACTION, AIR_HEIGHT = 0.7, 0.1
TACKLE_RADIUS, TACKLE_PROB, SLIDE_RADIUS, SLIDE_PROB = 0.02, 0.12, 0.05, 0.6
# a keeper reaches a ball passing within KEEPER_REACH of it toward its goal and saves it
# with probability KEEPER_SAVE * stat * (1 - distance / KEEPER_REACH)
KEEPER_REACH, KEEPER_SAVE = 0.04, 0.7
# GRF's env takes a short pass for a set-piece taker that has waited this many steps
SET_PIECE_WAIT = 20
# scripted policy: the nearest player always presses the carrier, the second nearest
# within PRESS_RADIUS * stat (GRF's two hunters)
SHOT_RANGE, PRESSED_RADIUS, PRESS_RADIUS = 0.3, 0.06, 0.5
# GRF's checkpoint reward: 10 regions, thresholds 0.99 - 0.8 k / 9 on the distance to (1, 0)
NUM_CHECKPOINTS, CHECKPOINT_REWARD = 10, 0.1
CHECKPOINT_THRESHOLDS = jnp.array([0.99 - 0.8 * k / 9 for k in range(10)], jnp.float32)

STAT_NAMES = (
    "goals_scored",
    "goals_conceded",
    "shots",
    "shots_on_target",
    "passes",
    "passes_completed",
    "possession_steps",
    "steps",
    "spread_sum",
)
NUM_STATS = len(STAT_NAMES)
(
    S_GOALS_FOR,
    S_GOALS_AGAINST,
    S_SHOTS,
    S_ON_TARGET,
    S_PASSES,
    S_PASSES_DONE,
    S_POSSESSION,
    S_STEPS,
    S_SPREAD,
) = range(NUM_STATS)


@struct.dataclass
class FootballState:
    pos: chex.Array  # [22, 2] players, left 0..10 then right 11..21, left-team coordinates
    vel: chex.Array  # [22, 2] displacement of the last step
    facing: chex.Array  # [22, 2] unit vectors
    ball: chex.Array  # [2]
    ball_vel: chex.Array  # [2] per step
    prev_ball: chex.Array  # [2] ball of the previous step (the delayed view)
    ball_air: chex.Array  # [] int32 steps the ball still flies (high pass)
    owner: chex.Array  # [] int32 player 0..21 or -1 (free ball)
    last_touch: chex.Array  # [] int32 team (0 left, 1 right) that last touched the ball
    kicker: chex.Array  # [] int32 last kicker, cannot retake the ball during the cooldown
    kick_cool: chex.Array  # [] int32
    pass_team: chex.Array  # [] int32 team of the pass in flight, -1 none
    sticky_dir: chex.Array  # [11] int32 sticky direction per left player (0 none)
    sprint: chex.Array  # [11] bool
    dribble: chex.Array  # [11] bool
    game_mode: chex.Array  # [] int32
    mode_steps: chex.Array  # [] int32 steps the current set piece has waited
    score: chex.Array  # [2] int32 left, right
    checkpoints: chex.Array  # [C] int32 checkpoint regions each controlled player collected
    stats: chex.Array  # [NUM_STATS] float32
    step: chex.Array  # [] int32


def hull_area(points: jax.Array) -> jax.Array:
    """Convex hull area of ``points`` [P, 2] by gift wrapping (P fixed steps).

    From the lowest-x point, each step moves to the candidate that has no point strictly to
    its right (the farthest such one on ties); once back at the start it stays. The
    visited vertices close a convex polygon whose shoelace area is returned."""
    p_count = points.shape[0]
    start = jnp.argmin(points[:, 0] * 1e3 + points[:, 1])

    def step(carry, _):
        cur, closed = carry
        o = points[cur]
        d = points - o  # [P, 2]
        # cross[c, r] = (c - o) x (r - o); c is next if no r has cross < 0
        cross = d[:, None, 0] * d[None, :, 1] - d[:, None, 1] * d[None, :, 0]  # [P, P]
        dist = (d**2).sum(-1)
        ok = ~(cross < -1e-9).any(-1) & (dist > 1e-12)
        nxt = jnp.argmax(jnp.where(ok, dist, -1.0))
        nxt = jnp.where(closed | ~ok.any(), cur, nxt)
        area = o[0] * points[nxt, 1] - points[nxt, 0] * o[1]
        return (nxt, closed | (nxt == start)), area

    _, parts = jax.lax.scan(step, (start, jnp.zeros((), bool)), None, length=p_count)
    return 0.5 * jnp.abs(parts.sum())


def _pass_target(pos, team_idx, passer, facing, kind, opp_pos):
    """Best teammate (team index) for a pass of ``kind`` by ``passer`` facing ``facing``.

    pos [11, 2] own team; opp_pos [11, 2]."""
    d = pos - pos[passer]  # [11, 2]
    dist = jnp.sqrt((d**2).sum(-1) + 1e-12)
    cos = (d * facing).sum(-1) / dist
    preferred = jnp.array([0.0, PASS_PREFERRED[1], PASS_PREFERRED[2], PASS_PREFERRED[3], 0.0])[kind]
    max_len = jnp.array([0.0, PASS_MAX[1], PASS_MAX[2], PASS_MAX[3], 0.0])[kind]
    opp_d = jnp.sqrt(((pos[:, None] - opp_pos[None]) ** 2).sum(-1)).min(-1)  # [11]
    score = cos - 1.5 * jnp.abs(dist - preferred) - 0.5 * (opp_d < 0.05)
    score = score + jnp.where(dist > max_len, -0.5, 0.0)
    score = jnp.where(team_idx == passer, -jnp.inf, score)
    return jnp.argmax(score)


class Football(MultiAgentEnv):
    """GRF-like 11-a-side football; ``scenario_name`` from ``envs.football.scenarios``.

    Args:
        rewards: ``"scoring"`` or ``"scoring,checkpoints"`` (GRF's reward strings).
        scripted_keeper: 11-vs-11 only: the keeper is scripted, 10 players controlled.
        max_steps: episode length (default: the scenario's).
    """

    capabilities = provides(Renderer, FootballMatch, ScriptedIntents)

    def __init__(
        self,
        scenario_name: str = "11_vs_11_easy_stochastic",
        rewards: str = "scoring",
        scripted_keeper: bool = False,
        max_steps: int | None = None,
    ):
        sc = scenario(scenario_name, scripted_keeper)
        parts = set(rewards.split(","))
        if not parts <= {"scoring", "checkpoints"} or "scoring" not in parts:
            raise ValueError(f"rewards must be 'scoring' or 'scoring,checkpoints', got {rewards!r}")
        self.scenario_name = scenario_name
        self.scenario = sc
        self.checkpoint_reward = "checkpoints" in parts
        self.max_steps = int(max_steps if max_steps is not None else sc.max_steps)
        if self.max_steps < 1:
            raise ValueError("max_steps must be >= 1")
        self.controlled = np.asarray(sc.controlled, np.int32)
        super().__init__(len(sc.controlled))
        self.agents = [f"player_{i}" for i in sc.controlled]
        self.difficulty = float(sc.difficulty)
        self.right_stat = 0.3 + 0.7 * self.difficulty
        # (1 - d) * 100 ms in whole steps of 100 ms: 1 step on easy, 0 on hard
        self.reaction_delay = int(round((1.0 - self.difficulty) * 100.0 / 100.0))
        self.press_radius = PRESS_RADIUS * self.right_stat
        ctrl = np.zeros(22, bool)
        ctrl[self.controlled] = True
        self.is_controlled = jnp.asarray(ctrl)
        self.stat = jnp.asarray(np.r_[np.ones(11), np.full(11, self.right_stat)], jnp.float32)
        self.start_pos = jnp.asarray(np.concatenate([sc.left_start, sc.right_start]))
        self.formation = jnp.asarray(np.concatenate([FORMATION, -FORMATION]))  # [22, 2]
        # the kick-off layouts after a goal (and at a random 11 vs 11 reset), by kicking team
        self.kickoff_pos = jnp.asarray(
            np.stack(
                [
                    np.concatenate([KICKOFF_LAYOUT, -RECEIVING_LAYOUT]),
                    np.concatenate([RECEIVING_LAYOUT, -KICKOFF_LAYOUT]),
                ]
            )
        )  # [2, 22, 2]
        self.obs_dim = 115
        self.observation_spaces = {a: Box(-2.0, 2.0, (115,)) for a in self.agents}
        self.action_spaces = {a: Discrete(NUM_ACTIONS) for a in self.agents}

    @property
    def name(self) -> str:
        return f"football:{self.scenario_name}"

    # ----- reset --------------------------------------------------------------------------
    def reset(self, key):
        u = fast_random.uniform(key, 45)
        sc = self.scenario
        jitter = (u[:44].reshape(22, 2) * 2.0 - 1.0) * sc.reset_jitter
        if sc.random_kickoff:
            kick_team = (u[44] < 0.5).astype(jnp.int32)
            start = self.kickoff_pos[kick_team]
            owner_start = kick_team * 11 + KICKOFF_PLAYER
        else:
            start, owner_start = self.start_pos, jnp.int32(sc.owner_start)
        pos = start + jitter
        pos = pos.at[owner_start].set(start[owner_start])
        ball = jnp.asarray(sc.ball_start, jnp.float32)
        facing = jnp.concatenate(
            [
                jnp.tile(jnp.array([[1.0, 0.0]]), (11, 1)),
                jnp.tile(jnp.array([[-1.0, 0.0]]), (11, 1)),
            ]
        )
        i32 = lambda v: jnp.asarray(v, jnp.int32)
        state = FootballState(
            pos=pos,
            vel=jnp.zeros((22, 2), jnp.float32),
            facing=facing,
            ball=ball,
            ball_vel=jnp.zeros((2,), jnp.float32),
            prev_ball=ball,
            ball_air=i32(0),
            owner=i32(owner_start),
            last_touch=i32(owner_start // 11),
            kicker=i32(-1),
            kick_cool=i32(0),
            pass_team=i32(-1),
            sticky_dir=jnp.zeros((11,), jnp.int32),
            sprint=jnp.zeros((11,), bool),
            dribble=jnp.zeros((11,), bool),
            game_mode=i32(NORMAL),
            mode_steps=i32(0),
            score=jnp.zeros((2,), jnp.int32),
            checkpoints=jnp.zeros((len(self.controlled),), jnp.int32),
            stats=jnp.zeros((NUM_STATS,), jnp.float32),
            step=i32(0),
        )
        return self.get_obs(state), state

    # ----- scripted policy ----------------------------------------------------------------
    def scripted_intent(self, state: FootballState):
        """Scripted intent of all 22 players: move dir [22, 2], sprint [22], kick [22]."""
        team = jnp.arange(22) // 11
        # the right team sees the ball with its reaction delay
        seen = jnp.where(self.reaction_delay > 0, state.prev_ball, state.ball)
        ball_seen = jnp.where((team == 1)[:, None], seen[None], state.ball[None])  # [22, 2]
        owner_team = jnp.where(state.owner >= 0, state.owner // 11, -1)
        attacking = owner_team == team  # [22]
        sign = jnp.where(team == 0, 1.0, -1.0)[:, None]  # team frame: attack toward +x
        # formation spot shifted with the ball (team frame), keepers on their line
        bx = ball_seen * sign  # [22, 2] in team frame
        spot = self.formation * sign + jnp.stack(
            [0.6 * bx[:, 0] + 0.35 + jnp.where(attacking, 0.2, 0.0), 0.25 * bx[:, 1]], -1
        )
        spot = jnp.clip(spot, jnp.array([-0.95, -0.38]), jnp.array([0.9, 0.38]))
        keeper = jnp.arange(22) % 11 == 0
        keeper_spot = jnp.stack([jnp.full(22, -0.97), jnp.clip(bx[:, 1] * 0.3, -0.04, 0.04)], -1)
        spot = jnp.where(keeper[:, None], keeper_spot, spot) * sign  # back to left coords
        target = spot
        # chasers: the nearest outfield player of each team to the (seen) ball chases a free
        # ball and always presses the opponents' carrier; the second nearest presses too
        # when within the pressing distance. No one closes in on a set-piece taker.
        d_ball = jnp.sqrt(((state.pos - ball_seen) ** 2).sum(-1))  # [22]
        d_out = jnp.where(keeper, jnp.inf, d_ball)
        first = jnp.stack([jnp.argmin(d_out[:11]), 11 + jnp.argmin(d_out[11:])])
        d_rest = d_out.at[first].set(jnp.inf)
        second = jnp.stack([jnp.argmin(d_rest[:11]), 11 + jnp.argmin(d_rest[11:])])
        idx = jnp.arange(22)
        is_first, is_second = idx == first[team], idx == second[team]
        radius = jnp.where(team == 1, self.press_radius, PRESS_RADIUS)
        open_play = state.game_mode == NORMAL
        hunts = is_second & (owner_team >= 0) & (d_ball < radius)
        chase = ~attacking & open_play & (is_first | hunts)
        target = jnp.where(chase[:, None], ball_seen, target)
        # carrier: toward the opponent goal, shoot in range, pass when pressed
        goal = jnp.array([1.0, 0.0]) * sign  # [22, 2]
        is_carrier = jnp.arange(22) == state.owner
        target = jnp.where(is_carrier[:, None], goal, target)
        delta = target - state.pos
        dist = jnp.sqrt((delta**2).sum(-1, keepdims=True))
        move = jnp.where(dist > 0.01, delta / jnp.maximum(dist, 1e-6), 0.0)
        sprint = chase | (dist[:, 0] > 0.15)
        d_goal = jnp.sqrt(((state.pos - goal) ** 2).sum(-1))
        opp = jnp.where((team == 0)[:, None, None], state.pos[None, 11:], state.pos[None, :11])
        d_opp = jnp.sqrt(((state.pos[:, None] - opp) ** 2).sum(-1)).min(-1)  # [22]
        kick = jnp.where(
            d_goal < SHOT_RANGE, KICK_SHOT, jnp.where(d_opp < PRESSED_RADIUS, KICK_SHORT, NO_KICK)
        )
        kick = jnp.where(open_play, kick, KICK_SHORT)  # a set piece is taken at once
        kick = jnp.where(is_carrier, kick, NO_KICK)
        return move, sprint, kick

    # ----- step -----------------------------------------------------------------------------
    def step_env(self, key, state: FootballState, actions: dict):
        a = jnp.stack([jnp.asarray(actions[ag], jnp.int32) for ag in self.agents])  # [C]
        ctrl = self.controlled
        u = fast_random.uniform(key, 25)  # 22 tackles, 2 for the shot noise, 1 keeper save
        team = jnp.arange(22) // 11

        # controlled players: sticky state from the actions
        is_move = (a >= LEFT) & (a <= BOTTOM_LEFT)
        sticky = state.sticky_dir.at[ctrl].set(
            jnp.where(is_move, a, jnp.where(a == RELEASE_DIRECTION, 0, state.sticky_dir[ctrl]))
        )
        sprint_l = state.sprint.at[ctrl].set(
            jnp.where(a == SPRINT, True, jnp.where(a == RELEASE_SPRINT, False, state.sprint[ctrl]))
        )
        dribble_l = state.dribble.at[ctrl].set(
            jnp.where(
                a == DRIBBLE, True, jnp.where(a == RELEASE_DRIBBLE, False, state.dribble[ctrl])
            )
        )
        kick_c = jnp.select(
            [a == SHORT_PASS, a == LONG_PASS, a == HIGH_PASS, a == SHOT],
            [KICK_SHORT, KICK_LONG, KICK_HIGH, KICK_SHOT],
            NO_KICK,
        )
        slide = jnp.zeros((22,), bool).at[ctrl].set(a == SLIDING)

        s_move, s_sprint, s_kick = self.scripted_intent(state)
        ctrl_mask = self.is_controlled
        c_move = jnp.zeros((22, 2)).at[:11].set(DIRECTIONS[sticky])
        move = jnp.where(ctrl_mask[:, None], c_move, s_move)
        sprinting = jnp.where(ctrl_mask, jnp.pad(sprint_l, (0, 11)), s_sprint)
        dribbling = jnp.where(ctrl_mask, jnp.pad(dribble_l, (0, 11)), False)
        kick = jnp.where(ctrl_mask, jnp.zeros((22,), jnp.int32).at[ctrl].set(kick_c), s_kick)
        is_owner = jnp.arange(22) == state.owner
        sliding = slide & (state.owner >= 0)
        # a set piece (throw-in, goal kick, corner) lasts until its taker kicks the ball: the
        # taker may turn but not walk, and nobody tackles
        set_piece = state.game_mode != NORMAL

        # movement (sliding players and a set-piece taker stop for the step)
        speed = jnp.where(sprinting, SPRINT_SPEED, RUN_SPEED) * self.stat
        speed = jnp.where(dribbling & is_owner, speed * DRIBBLE_FACTOR, speed)
        speed = jnp.where(sliding | (set_piece & is_owner), 0.0, speed)
        vel = move * speed[:, None]
        pos = jnp.clip(
            state.pos + vel, jnp.array([-PITCH_X, -PITCH_Y]), jnp.array([PITCH_X, PITCH_Y])
        )
        vel = pos - state.pos
        moving = (move**2).sum(-1) > 0
        facing = jnp.where(moving[:, None], move, state.facing)

        # kicks by the owner
        owner = state.owner
        has_owner = owner >= 0
        o = jnp.maximum(owner, 0)
        o_team = o // 11
        k = jnp.where(has_owner, kick[o], NO_KICK)
        # GRF's env plays a short pass for a taker that keeps the game waiting
        waited = set_piece & (state.mode_steps >= SET_PIECE_WAIT)
        k = jnp.where(has_owner & waited & (k == NO_KICK), KICK_SHORT, k)
        own_pos = jnp.where(o_team == 0, pos[:11], pos[11:])  # [11, 2]
        opp_pos = jnp.where(o_team == 0, pos[11:], pos[:11])
        passer = o % 11
        # scripted passers look for teammates toward the goal they attack
        attack_dir = jnp.array([1.0, 0.0]) * jnp.where(o_team == 0, 1.0, -1.0)
        pass_facing = jnp.where(self.is_controlled[o], facing[o], attack_dir)
        tgt = _pass_target(own_pos, jnp.arange(11), passer, pass_facing, k, opp_pos)
        to_tgt = own_pos[tgt] - pos[o]
        tgt_dist = jnp.sqrt((to_tgt**2).sum() + 1e-12)
        max_len = jnp.array([0.0, PASS_MAX[1], PASS_MAX[2], PASS_MAX[3], 0.0])[k]
        pass_speed = jnp.minimum(tgt_dist, max_len) * (1 - BALL_FRICTION) + 0.004
        pass_vel = to_tgt / tgt_dist * pass_speed
        goal_x = jnp.where(o_team == 0, 1.0, -1.0)
        d_goal = jnp.sqrt((goal_x - pos[o, 0]) ** 2 + pos[o, 1] ** 2)
        std = SHOT_NOISE_BASE + SHOT_NOISE_QUAD * d_goal**2
        normal = jnp.sqrt(-2 * jnp.log(jnp.maximum(u[22], 1e-7))) * jnp.cos(2 * jnp.pi * u[23])
        aim = jnp.array([goal_x, 0.0]) + jnp.array([0.0, 1.0]) * std * normal
        to_aim = aim - pos[o]
        shot_vel = to_aim / jnp.sqrt((to_aim**2).sum() + 1e-12) * SHOT_SPEED
        # tackles on the carrier come first: a won tackle cancels the carrier's kick. A
        # tackle reaches the carrier or the ball at its feet
        at_feet = pos[o] + facing[o] * BALL_OFFSET
        d_car = jnp.minimum(
            jnp.sqrt(((pos - pos[o]) ** 2).sum(-1)), jnp.sqrt(((pos - at_feet) ** 2).sum(-1))
        )  # [22]
        rival = (team != o_team) & ~set_piece
        win = rival & (
            ((d_car < TACKLE_RADIUS) & (u[:22] < TACKLE_PROB * self.stat))
            | (sliding & (d_car < SLIDE_RADIUS) & (u[:22] < SLIDE_PROB))
        )
        stolen = has_owner & win.any()
        new_owner = jnp.where(stolen, jnp.argmax(win), owner)
        is_pass = (k == KICK_SHORT) | (k == KICK_LONG) | (k == KICK_HIGH)
        kicked = (k != NO_KICK) & ~stolen
        kick_vel = jnp.where(k == KICK_SHOT, shot_vel, pass_vel)
        air = jnp.where(
            k == KICK_HIGH,
            jnp.ceil(AIR_FRACTION * jnp.minimum(tgt_dist, max_len) / pass_speed),
            0,
        ).astype(jnp.int32)
        left_kick = kicked & (o_team == 0)
        stats = state.stats
        stats = stats.at[S_SHOTS].add(left_kick & (k == KICK_SHOT))
        stats = stats.at[S_ON_TARGET].add(left_kick & (k == KICK_SHOT) & (jnp.abs(aim[1]) < GOAL_Y))
        stats = stats.at[S_PASSES].add(left_kick & is_pass)

        new_owner = jnp.where(kicked, -1, new_owner)

        # ball
        n_o = jnp.maximum(new_owner, 0)
        offset = jnp.where(dribbling[n_o], DRIBBLE_OFFSET, BALL_OFFSET)
        pitch = jnp.array([PITCH_X, PITCH_Y])
        # a carried ball stays on the pitch: carriers are stopped at the lines
        carried = jnp.clip(pos[n_o] + facing[n_o] * offset, -pitch, pitch)
        free_vel = jnp.where(kicked, kick_vel, state.ball_vel)
        free_start = jnp.where(kicked, pos[o] + facing[o] * BALL_OFFSET, state.ball)
        free_ball = free_start + free_vel
        ball_owned = new_owner >= 0
        ball = jnp.where(ball_owned, carried, free_ball)
        ball_vel = jnp.where(ball_owned, vel[n_o], free_vel * BALL_FRICTION)
        ball_air = jnp.where(kicked, air, jnp.maximum(state.ball_air - 1, 0))
        kicker = jnp.where(kicked, owner, state.kicker)
        kick_cool = jnp.where(kicked, KICK_COOLDOWN, jnp.maximum(state.kick_cool - 1, 0))
        pass_team = jnp.where(kicked, jnp.where(is_pass, o_team, -1), state.pass_team)
        last_touch = jnp.where(ball_owned, n_o // 11, jnp.where(kicked, o_team, state.last_touch))

        # the free ball's path this step, up to the goal line where it crosses one
        prev = free_start
        crossing_x = ~ball_owned & (jnp.abs(ball[0]) > PITCH_X)
        t_cross = (jnp.sign(ball[0]) * PITCH_X - prev[0]) / jnp.where(
            ball[0] == prev[0], 1.0, ball[0] - prev[0]
        )
        t_cross = jnp.clip(t_cross, 0.0, 1.0)
        y_cross = prev[1] + t_cross * (ball[1] - prev[1])
        path_end = jnp.where(crossing_x, prev + t_cross * (ball - prev), ball)

        # pick-up of a free grounded ball by the nearest player near its path (before the
        # line): a ball kicked this step travels at least one step before anyone can take
        # it, except that the keeper it flies at may save it
        seg = path_end - prev
        tt = jnp.clip(((pos - prev) * seg).sum(-1) / jnp.maximum((seg**2).sum(), 1e-12), 0.0, 1.0)
        d_path = jnp.sqrt(((prev + tt[:, None] * seg - pos) ** 2).sum(-1))  # [22]
        grounded_free = ~ball_owned & (ball_air == 0)
        can = (d_path < CONTROL_RADIUS) & ~((jnp.arange(22) == kicker) & (kick_cool > 0))
        can = can & grounded_free & ~kicked
        # a ball the other team sent toward a keeper's goal: the keeper takes it (a save)
        # with a probability that falls with its distance from the path and its stat
        keeper = jnp.where(free_vel[0] > 0, 11, 0)
        at_keeper = grounded_free & (free_vel[0] != 0) & (last_touch != keeper // 11)
        d_keeper = d_path[keeper]
        save_prob = KEEPER_SAVE * self.stat[keeper] * (1.0 - d_keeper / KEEPER_REACH)
        save = at_keeper & (d_keeper < KEEPER_REACH) & (u[24] < save_prob)
        can = can.at[keeper].set(jnp.where(at_keeper, save, can[keeper]))
        picker = jnp.argmin(jnp.where(can, d_path, jnp.inf))
        picked = can.any()

        # goal / out of play, when nobody took the ball before the line
        goal = ~ball_owned & ~picked & crossing_x & (jnp.abs(y_cross) < GOAL_Y)
        left_goal = goal & (ball[0] > 0)
        right_goal = goal & (ball[0] < 0)
        out = ~ball_owned & ~picked & ~goal & (crossing_x | (jnp.abs(ball[1]) > PITCH_Y))

        p_team = picker // 11
        stats = stats.at[S_PASSES_DONE].add(picked & (pass_team == 0) & (p_team == 0))
        new_owner = jnp.where(picked, picker, new_owner)
        pass_team = jnp.where(picked, -1, pass_team)
        last_touch = jnp.where(picked, p_team, last_touch)
        ball = jnp.where(
            picked, jnp.clip(pos[picker] + facing[picker] * BALL_OFFSET, -pitch, pitch), ball
        )
        ball_vel = jnp.where(picked, vel[picker], ball_vel)
        ball = jnp.clip(
            ball, jnp.array([-1.05, -PITCH_Y - 0.05]), jnp.array([1.05, PITCH_Y + 0.05])
        )

        # restarts: out of play
        side = jnp.abs(ball[1]) > PITCH_Y
        getter_team = 1 - last_touch
        end_x = jnp.where(ball[0] > 0, PITCH_X, -PITCH_X)
        # goal line: the defending team of that goal gets a goal kick if the attackers
        # touched last, else the attackers get a corner
        defenders_of_line = jnp.where(ball[0] > 0, 1, 0)
        goal_kick = ~side & (getter_team == defenders_of_line)
        restart_ball = jnp.where(
            side,
            jnp.stack([jnp.clip(ball[0], -0.99, 0.99), jnp.sign(ball[1]) * (PITCH_Y - 0.005)]),
            jnp.where(
                goal_kick,
                jnp.stack([end_x * 0.9, 0.0]),
                jnp.stack([end_x * 0.99, jnp.sign(ball[1]) * (PITCH_Y - 0.005)]),
            ),
        )
        d_rb = jnp.sqrt(((pos - restart_ball) ** 2).sum(-1))
        d_rb = jnp.where((team == getter_team) & (jnp.arange(22) % 11 != 0), d_rb, jnp.inf)
        taker = jnp.where(goal_kick, getter_team * 11, jnp.argmin(d_rb))
        out_mode = jnp.where(side, THROW_IN, jnp.where(goal_kick, GOAL_KICK, CORNER))
        pos = jnp.where(out & (jnp.arange(22) == taker)[:, None], restart_ball, pos)
        ball = jnp.where(out, restart_ball, ball)
        new_owner = jnp.where(out, taker, new_owner)
        last_touch = jnp.where(out, getter_team, last_touch)

        # restarts: kick-off after a goal, the conceding team kicks off from GRF's kick-off
        # layout; it is in play at once (GRF's kick-off mode ends in the frame it starts)
        kick_team = jnp.where(left_goal, 1, 0)
        pos = jnp.where(goal, self.kickoff_pos[kick_team], pos)
        ball = jnp.where(goal, jnp.zeros(2), ball)
        new_owner = jnp.where(goal, kick_team * 11 + KICKOFF_PLAYER, new_owner)
        last_touch = jnp.where(goal, kick_team, last_touch)
        restart = goal | out
        ball_vel = jnp.where(restart, 0.0, ball_vel)
        ball_air = jnp.where(restart, 0, ball_air)
        pass_team = jnp.where(restart, -1, pass_team)
        kick_cool = jnp.where(restart, 0, kick_cool)
        # a set piece goes on until its taker kicks (or is forced to)
        goes_on = set_piece & ~kicked & ~restart
        game_mode = jnp.where(out, out_mode, jnp.where(goes_on, state.game_mode, NORMAL))
        mode_steps = jnp.where(goes_on, state.mode_steps + 1, 0)

        score = state.score + jnp.stack([left_goal, right_goal]).astype(jnp.int32)
        step = state.step + 1

        # reward: scoring, then GRF's checkpoints (CheckpointRewardWrapper): per controlled
        # player, paid while that player has the ball, for each of the 10 distance zones
        # of the ball to the opponent goal it has not collected this episode; a goal pays
        # every controlled player its zones left
        scoring = left_goal.astype(jnp.float32) - right_goal.astype(jnp.float32)
        d_opp_goal = jnp.sqrt((ball[0] - 1.0) ** 2 + ball[1] ** 2)
        reached = (d_opp_goal <= CHECKPOINT_THRESHOLDS).sum().astype(jnp.int32)
        on_ball = new_owner == jnp.asarray(self.controlled)  # [C]
        checkpoints = jnp.where(on_ball, jnp.maximum(state.checkpoints, reached), state.checkpoints)
        checkpoints = jnp.where(left_goal, NUM_CHECKPOINTS, checkpoints)
        reward = jnp.broadcast_to(scoring, checkpoints.shape)
        if self.checkpoint_reward:
            reward = reward + CHECKPOINT_REWARD * (checkpoints - state.checkpoints)

        stats = stats.at[S_GOALS_FOR].add(left_goal)
        stats = stats.at[S_GOALS_AGAINST].add(right_goal)
        stats = stats.at[S_POSSESSION].add((new_owner >= 0) & (new_owner < 11))
        stats = stats.at[S_STEPS].add(1.0)
        stats = stats.at[S_SPREAD].add(hull_area(pos[1:11]))

        done = step >= self.max_steps
        if self.scenario.end_on_possession_change:
            done = done | restart | (new_owner >= 11)
        next_state = FootballState(
            pos=pos,
            vel=vel,
            facing=facing,
            ball=ball,
            ball_vel=ball_vel,
            prev_ball=state.ball,
            ball_air=ball_air,
            owner=new_owner.astype(jnp.int32),
            last_touch=last_touch.astype(jnp.int32),
            kicker=kicker.astype(jnp.int32),
            kick_cool=kick_cool.astype(jnp.int32),
            pass_team=pass_team.astype(jnp.int32),
            sticky_dir=sticky,
            sprint=sprint_l,
            dribble=dribble_l,
            game_mode=game_mode.astype(jnp.int32),
            mode_steps=mode_steps.astype(jnp.int32),
            score=score,
            checkpoints=checkpoints.astype(jnp.int32),
            stats=stats,
            step=step,
        )
        rewards = {ag: reward[i] for i, ag in enumerate(self.agents)}
        dones = {ag: done for ag in self.agents} | {"__all__": done}
        info = {"episode_stats": stats, "won": self.won(next_state)}
        return self.get_obs(next_state), next_state, rewards, dones, info

    # ----- views --------------------------------------------------------------------------
    def shared_obs(self, state: FootballState) -> jax.Array:
        """The 104 floats of simple115_v2 shared by every left player (no active one-hot),
        in GRF's order with the 11-float active block removed."""
        owner_team = jnp.where(state.owner >= 0, 1 + state.owner // 11, 0)
        air = (state.ball_air > 0).astype(jnp.float32) * AIR_HEIGHT
        return jnp.concatenate(
            [
                state.pos[:11].ravel(),
                state.vel[:11].ravel(),
                state.pos[11:].ravel(),
                state.vel[11:].ravel(),
                jnp.stack([state.ball[0], state.ball[1], air]),
                jnp.stack([state.ball_vel[0], state.ball_vel[1], 0.0]),
                jax.nn.one_hot(owner_team, 3),
                jax.nn.one_hot(state.game_mode, 7),
            ]
        ).astype(jnp.float32)

    def get_obs(self, state: FootballState) -> dict:
        shared = self.shared_obs(state)
        head, mode = shared[:97], shared[97:]
        return {
            ag: jnp.concatenate([head, jax.nn.one_hot(i, 11), mode])
            for ag, i in zip(self.agents, self.controlled.tolist(), strict=True)
        }

    def get_avail_actions(self, state: FootballState) -> dict:
        return {ag: jnp.ones((NUM_ACTIONS,), bool) for ag in self.agents}

    def world_state(self, state: FootballState) -> jax.Array:
        """Centralised state [107]: the shared simple115_v2 part, score difference, who
        owns the ball (player index / 22, -1/22 when free) and the fraction of time left."""
        extra = jnp.stack(
            [
                (state.score[0] - state.score[1]).astype(jnp.float32),
                state.owner.astype(jnp.float32) / 22.0,
                1.0 - state.step.astype(jnp.float32) / self.max_steps,
            ]
        )
        return jnp.concatenate([self.shared_obs(state), extra])

    def won(self, state: FootballState) -> jax.Array:
        return state.score[0] > state.score[1]

    def render(self, state: FootballState) -> jax.Array:
        """``[224, 224, 3]`` uint8 top view of ``state`` (``envs.football.render``)."""
        from envs.football.render import render

        return render(state)


def episode_stats(state: FootballState) -> dict:
    """Named episode statistics of a (terminal) state, for the paper's radar charts."""
    s = state.stats
    steps = jnp.maximum(s[S_STEPS], 1.0)
    return {
        "goals_scored": s[S_GOALS_FOR],
        "goals_conceded": s[S_GOALS_AGAINST],
        "shots": s[S_SHOTS],
        "shot_success": s[S_ON_TARGET] / jnp.maximum(s[S_SHOTS], 1.0),
        "passes": s[S_PASSES],
        "pass_success": s[S_PASSES_DONE] / jnp.maximum(s[S_PASSES], 1.0),
        "possession": s[S_POSSESSION] / steps,
        "spread": s[S_SPREAD] / steps,
        "win": state.score[0] > state.score[1],
        "draw": state.score[0] == state.score[1],
        "loss": state.score[0] < state.score[1],
    }

"""Pistonball (PettingZoo butterfly) with 5 pistons, in pure JAX (LCA paper, section 5).

A row of pistons sits between a left and a right wall with a ball on top; every piston
is an agent that moves its top down, keeps it, or moves it up (``Discrete(3)``: 0 down,
1 stay, 2 up, PettingZoo's discrete mapping). The ball starts resting at the right end
and the team must roll it to the left wall. Rewards follow the paper: every agent gets
``-0.1`` at every step and ``+1`` at the step the ball's left edge reaches the left wall
(which ends the episode, ``won``); otherwise the episode ends after ``max_steps`` (125,
PettingZoo's ``max_cycles``). The paper gives Pistonball no hand-crafted individual
rewards, so ``individual_reward`` raises ``NotImplementedError``.

Geometry (PettingZoo's pixel units, y up, x from the left wall): pistons 40 wide side by
side, so the track is ``40 * num_pistons`` wide (200 for 5 pistons); a piston's top moves
``4`` px per step between heights 0 and 64 (PettingZoo's 16 positions of 4 px: heights
``4 * k`` for ``k = 0..16``); the ball's radius is 40 (it spans two pistons); a ceiling
200 px above the lowest piston top. At reset every piston gets a random height from the
lower half of its travel (positions 0..7, as PettingZoo's random initial positions) and
the ball is put at rest on the pistons at ``x = W - 40 - U(0, 20)`` (the right end) and
``U(0, 4)`` px above its resting height.

Physics (branch-free, vmappable): one env step is ``step_seconds`` = 0.1 s split into
``substeps`` = 8 substeps. Each substep moves every piston top linearly from its old to
its new height (so a moving piston has vertical velocity ``dh / step_seconds``), applies
gravity (750 px/s^2, PettingZoo's) to the ball, moves it, then resolves contacts twice
(Gauss-Seidel, fixed order): each piston is an axis-aligned box from far below the floor
to its top (closest-point circle-vs-box contact: a flat top, a corner or a side), then
the left wall, the right wall and the ceiling. A contact pushes the ball out along its
normal, removes the ball's inward normal velocity relative to the surface (a rising
piston carries the ball up), with restitution 0.1 above 60 px/s of impact speed and
none below (PettingZoo's combined elasticity is 0), and applies Coulomb friction
(mu = 0.19 = ball 0.3 x piston 0.64, PettingZoo's combined value) at the contact point
of a spinning ball (a solid disc, I = m R^2 / 2), so the ball rolls rather than slides.
No damping (PettingZoo/pymunk has none). A final clamp keeps the ball inside the walls
and below the ceiling. Qualitatively as in PettingZoo: a ball on pistons forming a
downhill slope to the left rolls left, on an uphill slope rolls right, and at rest on
flat pistons stays put; a rising piston under the ball's right half pushes it left.
Not modelled: PettingZoo's rounded piston heads, its random initial spin, collision
bias and the ball's mass (irrelevant with kinematic pistons).

Cross-check against PettingZoo 1.27's ``pistonball_v6`` (``n_pistons=5``, discrete,
no random spin; pistons and ball placed as here, noop pistons): on the slope of heights
0, 16, 32, 48, 64 (left to right) a ball at rest at x = 150 reaches the left wall after
1.6 s here and 1.75 s there (x = 123 / 109 after 0.6 / 0.75 s); the mirrored slope
sends it to the right wall; on flat pistons it stays. PettingZoo advances 0.05 s per
piston move, i.e. 0.25 s per 5-piston cycle (pass ``step_seconds=0.25, substeps=16``
for that pace); the default 0.1 s gives finer control for the same piston speed per
step. Uniformly random pistons win 25% of episodes here (29.5% in PettingZoo without
spin, 41.5% with it), and the scripted policy "pistons right of the ball go up, the
others go down" wins every start in 12 to 36 steps (15.4 on average).

Observation of piston ``i`` (float32, ``9 + num_pistons``, roughly in [-1, 1]): own
height, left neighbour height and a flag set where there is none (height 0 then),
right neighbour height and flag (heights mapped to [-1, 1]), ball x minus the piston's
centre over the track width, ball y minus the piston's top over the ceiling height,
ball vx and vy over 300 px/s, and the piston's one-hot index. ``agent_features`` is the
same array (the ego piston's own quantities come first).

Ranking heuristic (``heuristic_potential``, the "human" teacher; the paper's dense
rewards "target only the piston directly responsible for the incorrect ball motion"):
a piston whose centre is within 1.5 piston widths of the ball's centre is *near* the
ball and gets ``phi_i = -W_PROGRESS * (ball x in piston widths) - |h_i - h*_i| / 64``
with ``h*_i = 64`` (up) for a piston whose centre is right of the ball's centre and
``h*_i = 0`` (down) for one at or left of it: the ball should roll down a slope to the
left, so a near piston that moves toward its target (or moves the ball left) gains
potential and one that moves away from it (or pushes the ball right) loses it. Every
other piston is *far* from the ball and gets the constant ``FAR_POTENTIAL`` (the
midpoint of the near range), so its rankings are ties whatever it does.
"""

from __future__ import annotations

from functools import partial

import chex
import jax
import jax.numpy as jnp
import numpy as np
from flax import struct
from jaxmarl.environments.multi_agent_env import MultiAgentEnv
from jaxmarl.environments.spaces import Box, Discrete

from envs.capabilities import RankingHeuristic, Renderer, StateDescriber, provides
from envs.registry import EnvSpec, register

__all__ = ["Pistonball", "PistonballState"]

# ----- constants (PettingZoo pixel units, y up) --------------------------------------------
PISTON_WIDTH = 40.0
BALL_RADIUS = 40.0
PIXELS_PER_POSITION = 4.0
NUM_POSITIONS = 16  # top heights 4 * k, k = 0..16
MAX_HEIGHT = PIXELS_PER_POSITION * NUM_POSITIONS  # 64
START_POSITIONS = 8  # reset heights from positions 0..7 (the lower half)
CEILING = 200.0  # above the lowest piston top
GRAVITY = 750.0
FRICTION = 0.3 * 0.64
RESTITUTION = 0.1
BOUNCE_THRESHOLD = 60.0  # impact speed (px/s) below which contacts are fully inelastic
STEP_SECONDS = 0.1
SUBSTEPS = 8
CONTACT_ITERATIONS = 2
WIN_TOLERANCE = 1.0  # the ball's left edge within this of the left wall wins
START_X_JITTER = 20.0
START_Y_JITTER = 4.0
VELOCITY_SCALE = 300.0
FLOOR_DEPTH = 1.0e4  # piston boxes reach this far below height 0
# heuristic
NEAR_WIDTHS = 1.5
W_PROGRESS = 1.0

NOOP = 1

# The disc's moment of inertia over its mass (R^2 / 2); the effective inverse mass of a
# tangential impulse at the rim is 1 + R^2 / (R^2 / 2) = 3.
_INERTIA_PER_MASS = 0.5 * BALL_RADIUS**2
_TANGENT_INV_MASS = 1.0 + BALL_RADIUS**2 / _INERTIA_PER_MASS


@struct.dataclass
class PistonballState:
    piston_pos: jax.Array  # [N] int32 in 0..NUM_POSITIONS; top height = 4 * pos
    ball_pos: jax.Array  # [2] float32 (x from the left wall, y above the lowest top)
    ball_vel: jax.Array  # [2] float32 px/s
    ball_angvel: jax.Array  # [] float32 rad/s (counter-clockwise positive)
    won: jax.Array  # [] bool: the ball reached the left wall during the last step
    done: jax.Array  # [] bool
    step: jax.Array  # [] int32


# ----- physics ---------------------------------------------------------------------------------
def _resolve(ball, nx, ny, pen, uy):
    """One contact (normal ``n`` toward the ball centre, penetration ``pen``, surface
    velocity ``(0, uy)``): push out, remove the inward normal velocity, apply friction."""
    px, py, vx, vy, w = ball
    active = pen > 0.0
    push = jnp.where(active, pen, 0.0)
    px = px + push * nx
    py = py + push * ny
    # velocity of the ball's contact point (r = -R n) relative to the surface
    rvx = vx + w * BALL_RADIUS * ny
    rvy = vy - w * BALL_RADIUS * nx - uy
    vn = rvx * nx + rvy * ny
    e = jnp.where(vn < -BOUNCE_THRESHOLD, RESTITUTION, 0.0)
    jn = jnp.where(active & (vn < 0.0), -(1.0 + e) * vn, 0.0)
    vx = vx + jn * nx
    vy = vy + jn * ny
    # Coulomb friction along t = (-ny, nx); the normal impulse leaves this unchanged
    vt = -rvx * ny + rvy * nx
    jt = jnp.clip(-vt / _TANGENT_INV_MASS, -FRICTION * jn, FRICTION * jn)
    vx = vx - jt * ny
    vy = vy + jt * nx
    w = w - jt * BALL_RADIUS / _INERTIA_PER_MASS  # (r x t) = -R
    return px, py, vx, vy, w


def _piston_contact(px, py, x0, x1, top):
    """Closest-point contact of the ball with the box ``[x0, x1] x [-inf, top]``."""
    cx = jnp.clip(px, x0, x1)
    cy = jnp.clip(py, top - FLOOR_DEPTH, top)
    dx, dy = px - cx, py - cy
    dist = jnp.sqrt(dx * dx + dy * dy)
    inside = dist < 1e-6
    safe = jnp.where(inside, 1.0, dist)
    nx = jnp.where(inside, 0.0, dx / safe)
    ny = jnp.where(inside, 1.0, dy / safe)
    pen = jnp.where(inside, BALL_RADIUS + top - py, BALL_RADIUS - dist)
    return nx, ny, pen


def _simulate(h_old, h_new, ball_pos, ball_vel, ball_angvel, width, step_seconds, substeps):
    """Advance the ball one env step while the pistons move from ``h_old`` to ``h_new``.

    Returns the new ``(pos [2], vel [2], angvel [])`` and the smallest gap between the
    ball's left edge and the left wall seen at the end of any substep.
    """
    n = h_old.shape[-1]
    dt = step_seconds / substeps
    vp = (h_new - h_old) / step_seconds  # [N]
    x0s = jnp.arange(n, dtype=jnp.float32) * PISTON_WIDTH

    def body(k, carry):
        ball, gap = carry
        frac = (k + 1).astype(jnp.float32) / substeps
        h = h_old + (h_new - h_old) * frac
        px, py, vx, vy, w = ball
        vy = vy - GRAVITY * dt
        px = px + vx * dt
        py = py + vy * dt
        ball = (px, py, vx, vy, w)

        def piston(ball, xs):
            x0, top, uy = xs
            nx, ny, pen = _piston_contact(ball[0], ball[1], x0, x0 + PISTON_WIDTH, top)
            return _resolve(ball, nx, ny, pen, uy), None

        def contact_pass(_, ball):
            ball, _ = jax.lax.scan(piston, ball, (x0s, h, vp))
            ball = _resolve(ball, 1.0, 0.0, BALL_RADIUS - ball[0], 0.0)  # left wall
            ball = _resolve(ball, -1.0, 0.0, ball[0] + BALL_RADIUS - width, 0.0)  # right
            return _resolve(ball, 0.0, -1.0, ball[1] + BALL_RADIUS - CEILING, 0.0)  # ceiling

        ball = jax.lax.fori_loop(0, CONTACT_ITERATIONS, contact_pass, ball)
        px, py, vx, vy, w = ball
        px = jnp.clip(px, BALL_RADIUS, width - BALL_RADIUS)
        py = jnp.minimum(py, CEILING - BALL_RADIUS)
        gap = jnp.minimum(gap, px - BALL_RADIUS)
        return (px, py, vx, vy, w), gap

    ball = (ball_pos[0], ball_pos[1], ball_vel[0], ball_vel[1], ball_angvel)
    gap0 = jnp.asarray(jnp.inf, jnp.float32)
    (px, py, vx, vy, w), gap = jax.lax.fori_loop(0, substeps, body, (ball, gap0))
    return jnp.stack([px, py]), jnp.stack([vx, vy]), w, gap


def _rest_height(heights, bx):
    """Height of the ball's centre resting on the pistons at ``x = bx`` (no penetration)."""
    n = heights.shape[-1]
    x0 = jnp.arange(n, dtype=jnp.float32) * PISTON_WIDTH
    dx = jnp.maximum(jnp.maximum(x0 - bx, bx - (x0 + PISTON_WIDTH)), 0.0)
    lift = jnp.sqrt(jnp.maximum(BALL_RADIUS**2 - dx * dx, 0.0))
    return jnp.max(jnp.where(dx < BALL_RADIUS, heights + lift, -jnp.inf))


# ----- the environment ---------------------------------------------------------------------
class Pistonball(MultiAgentEnv):
    """Cooperative Pistonball; see the module docstring.

    Args:
        num_pistons: number of piston agents (the paper uses 5).
        max_steps: episode limit (PettingZoo's ``max_cycles``, 125).
        step_penalty: reward every agent gets at every step (``-0.1``).
        success_reward: extra reward every agent gets when the ball reaches the left wall.
        random_drop: randomise the start (piston heights and the ball's x/y offsets, as
            PettingZoo's ``random_drop``); False gives a fixed start for every key.
        step_seconds, substeps: simulated time per env step and its physics substeps.
    """

    noop_action = NOOP

    def __init__(
        self,
        num_pistons: int = 5,
        max_steps: int = 125,
        step_penalty: float = -0.1,
        success_reward: float = 1.0,
        random_drop: bool = True,
        step_seconds: float = STEP_SECONDS,
        substeps: int = SUBSTEPS,
    ):
        if num_pistons < 3:
            raise ValueError(
                f"num_pistons must be at least 3 (the ball spans 2), got {num_pistons}"
            )
        if max_steps < 1 or substeps < 1 or step_seconds <= 0:
            raise ValueError("max_steps and substeps must be >= 1 and step_seconds > 0")
        super().__init__(num_pistons)
        n = num_pistons
        self.agents = [f"piston_{i}" for i in range(n)]
        self.roles = ("piston",) * n
        self.max_steps = int(max_steps)
        self.step_penalty = float(step_penalty)
        self.success_reward = float(success_reward)
        self.random_drop = bool(random_drop)
        self.step_seconds = float(step_seconds)
        self.substeps = int(substeps)
        self.width = PISTON_WIDTH * n
        self.centres = (np.arange(n, dtype=np.float32) + 0.5) * PISTON_WIDTH
        self.obs_dim = 9 + n
        self.observation_spaces = {a: Box(-jnp.inf, jnp.inf, (self.obs_dim,)) for a in self.agents}
        self.action_spaces = {a: Discrete(3) for a in self.agents}
        # heuristic: the far pistons' constant is the middle of the near pistons' range
        # (ball x from 1 to n - 1 piston widths, deviation from 0 to 1)
        self.far_potential = float(-W_PROGRESS * n / 2.0 - 0.5)

    @property
    def agent_classes(self) -> dict:
        return {"piston": list(self.agents)}

    # ----- helpers ----------------------------------------------------------------------
    def heights(self, state: PistonballState) -> jax.Array:
        return state.piston_pos.astype(jnp.float32) * PIXELS_PER_POSITION

    def _to_dict(self, x: jax.Array) -> dict:
        return {a: x[i] for i, a in enumerate(self.agents)}

    def _state(self, piston_pos, ball_pos, ball_vel, ball_angvel, won, done, step):
        return PistonballState(
            piston_pos=jnp.asarray(piston_pos, jnp.int32),
            ball_pos=jnp.asarray(ball_pos, jnp.float32),
            ball_vel=jnp.asarray(ball_vel, jnp.float32),
            ball_angvel=jnp.asarray(ball_angvel, jnp.float32),
            won=jnp.asarray(won, bool),
            done=jnp.asarray(done, bool),
            step=jnp.asarray(step, jnp.int32),
        )

    def resting_state(
        self, piston_pos, ball_x, ball_vel=(0.0, 0.0), lift: float = 0.0, step: int = 0
    ) -> PistonballState:
        """A state with the given piston positions (0..16) and the ball at ``x = ball_x``
        resting on the pistons (``lift`` px above), for scripted scenarios and tests."""
        pos = jnp.clip(jnp.asarray(piston_pos, jnp.int32), 0, NUM_POSITIONS)
        bx = jnp.clip(jnp.asarray(ball_x, jnp.float32), BALL_RADIUS, self.width - BALL_RADIUS)
        by = _rest_height(pos.astype(jnp.float32) * PIXELS_PER_POSITION, bx) + lift
        won = bx - BALL_RADIUS <= WIN_TOLERANCE
        return self._state(pos, jnp.stack([bx, by]), ball_vel, 0.0, won, won, step)

    # ----- the API ----------------------------------------------------------------------
    @partial(jax.jit, static_argnums=(0,))
    def reset(self, key: chex.PRNGKey) -> tuple[dict, PistonballState]:
        n = self.num_agents
        if self.random_drop:
            # one draw for everything (each threefry call is costly to compile on CPU)
            u = jax.random.uniform(key, (n + 2,))
            pos = jnp.minimum(jnp.floor(u[:n] * START_POSITIONS), START_POSITIONS - 1)
            pos = pos.astype(jnp.int32)
            dx = u[n] * START_X_JITTER
            dy = u[n + 1] * START_Y_JITTER
        else:
            pos = jnp.zeros((n,), jnp.int32)
            dx = dy = jnp.zeros((), jnp.float32)
        bx = self.width - BALL_RADIUS - dx
        by = _rest_height(pos.astype(jnp.float32) * PIXELS_PER_POSITION, bx) + dy
        state = self._state(
            pos, jnp.stack([bx, by]), jnp.zeros(2), 0.0, False, False, jnp.zeros((), jnp.int32)
        )
        return self.get_obs(state), state

    @partial(jax.jit, static_argnums=(0,))
    def step_env(self, key: chex.PRNGKey, state: PistonballState, actions: dict):
        act = jnp.stack([jnp.reshape(actions[a], ()) for a in self.agents]).astype(jnp.int32)
        state, reward = self.transition(state, act)
        obs = self.get_obs(state)
        rewards = {a: reward for a in self.agents}
        dones = {a: state.done for a in self.agents} | {"__all__": state.done}
        return obs, state, rewards, dones, {}

    def transition(self, state: PistonballState, act: jax.Array):
        """Array step: actions ``[N]`` int -> ``(next_state, team reward [])``."""
        new_pos = jnp.clip(state.piston_pos + act - 1, 0, NUM_POSITIONS).astype(jnp.int32)
        h_old = state.piston_pos.astype(jnp.float32) * PIXELS_PER_POSITION
        h_new = new_pos.astype(jnp.float32) * PIXELS_PER_POSITION
        pos, vel, w, gap = _simulate(
            h_old,
            h_new,
            state.ball_pos,
            state.ball_vel,
            state.ball_angvel,
            self.width,
            self.step_seconds,
            self.substeps,
        )
        won = gap <= WIN_TOLERANCE
        step = state.step + 1
        done = won | (step >= self.max_steps)
        reward = jnp.float32(self.step_penalty) + jnp.where(won, self.success_reward, 0.0)
        next_state = self._state(new_pos, pos, vel, w, won, done, step)
        return next_state, reward.astype(jnp.float32)

    def observations(self, state: PistonballState) -> jax.Array:
        """``[N, 9 + N]`` float32 observations (rows in ``agents`` order)."""
        n = self.num_agents
        h = self.heights(state)
        hn = 2.0 * h / MAX_HEIGHT - 1.0
        zero = jnp.zeros((1,), jnp.float32)
        left = jnp.concatenate([zero, hn[:-1]])
        right = jnp.concatenate([hn[1:], zero])
        left_edge = jnp.asarray(np.arange(n) == 0, jnp.float32)
        right_edge = jnp.asarray(np.arange(n) == n - 1, jnp.float32)
        bx, by = state.ball_pos[0], state.ball_pos[1]
        ball_dx = (bx - jnp.asarray(self.centres)) / self.width
        ball_dy = (by - h) / CEILING
        vel = jnp.broadcast_to(state.ball_vel / VELOCITY_SCALE, (n, 2))
        cols = jnp.stack([hn, left, left_edge, right, right_edge, ball_dx, ball_dy], axis=1)
        return jnp.concatenate([cols, vel, jnp.eye(n, dtype=jnp.float32)], axis=1).astype(
            jnp.float32
        )

    def get_obs(self, state: PistonballState) -> dict:
        return self._to_dict(self.observations(state))

    # ----- CreditAssignmentEnv ------------------------------------------------------------
    def agent_features(self, state: PistonballState) -> jax.Array:
        return self.observations(state)

    def heuristic_potential(self, state: PistonballState) -> jax.Array:
        """``[N]``: see the module docstring (near pistons: progress plus slope shape;
        far pistons: a constant)."""
        h = self.heights(state)
        bx = state.ball_pos[0]
        centres = jnp.asarray(self.centres)
        near = jnp.abs(centres - bx) <= NEAR_WIDTHS * PISTON_WIDTH
        target = jnp.where(centres > bx, MAX_HEIGHT, 0.0)
        phi_near = -W_PROGRESS * bx / PISTON_WIDTH - jnp.abs(h - target) / MAX_HEIGHT
        return jnp.where(near, phi_near, self.far_potential).astype(jnp.float32)

    def individual_reward(self, state, actions, next_state) -> jax.Array:
        raise NotImplementedError(
            "Pistonball has no simple hand-crafted individual rewards (LCA paper, section "
            "5.1): the team-reward-plus-individual-reward baseline does not exist for it"
        )

    def won(self, state: PistonballState) -> jax.Array:
        return state.won

    def random_state(self, key: chex.PRNGKey) -> PistonballState:
        """Random heights, the ball anywhere on the track resting on the pistons or up to
        10 px above, a small random velocity and a random step before ``max_steps``."""
        n = self.num_agents
        u = jax.random.uniform(key, (n + 6,))  # one draw (see reset)
        pos = jnp.minimum(jnp.floor(u[:n] * (NUM_POSITIONS + 1)), NUM_POSITIONS)
        pos = pos.astype(jnp.int32)
        bx = BALL_RADIUS + u[n] * (self.width - 2.0 * BALL_RADIUS)
        h = pos.astype(jnp.float32) * PIXELS_PER_POSITION
        by = _rest_height(h, bx) + u[n + 1] * 10.0
        vel = (u[n + 2 : n + 4] * 2.0 - 1.0) * 30.0
        w = (u[n + 4] * 2.0 - 1.0) * 0.5
        step = jnp.minimum(jnp.floor(u[n + 5] * self.max_steps), self.max_steps - 1)
        won = bx - BALL_RADIUS <= WIN_TOLERANCE
        return self._state(pos, jnp.stack([bx, by]), vel, w, won, won, step)

    def render(self, state: PistonballState, units_per_pixel: float = 2.0) -> jax.Array:
        """``[H, W, 3]`` uint8: white background, grey pistons (darker heads), a blue ball,
        dark walls and ceiling. One pixel is ``units_per_pixel`` px of the world."""
        margin = 20.0
        x_lo, x_hi = -margin, self.width + margin
        y_lo, y_hi = -margin, CEILING + margin
        w_px = int(round((x_hi - x_lo) / units_per_pixel))
        h_px = int(round((y_hi - y_lo) / units_per_pixel))
        xs = x_lo + (np.arange(w_px, dtype=np.float32) + 0.5) * units_per_pixel
        ys = y_hi - (np.arange(h_px, dtype=np.float32) + 0.5) * units_per_pixel  # row 0 on top
        x = jnp.asarray(xs)[None, :]
        y = jnp.asarray(ys)[:, None]
        h = self.heights(state)
        idx = np.clip(np.floor(xs / PISTON_WIDTH), 0, self.num_agents - 1).astype(np.int32)
        top = h[jnp.asarray(idx)][None, :]  # static index pattern
        wall = (x < 0.0) | (x > self.width) | (y > CEILING)
        piston = ~wall & (y <= top)
        head = piston & (y > top - 6.0)
        bx, by = state.ball_pos[0], state.ball_pos[1]
        ball = (x - bx) ** 2 + (y - by) ** 2 <= BALL_RADIUS**2
        img = jnp.full((h_px, w_px, 3), 255, jnp.uint8)

        def paint(img, mask, colour):
            return jnp.where(mask[..., None], jnp.asarray(colour, jnp.uint8), img)

        img = paint(img, jnp.broadcast_to(piston, (h_px, w_px)), (160, 160, 160))
        img = paint(img, jnp.broadcast_to(head, (h_px, w_px)), (90, 90, 90))
        img = paint(img, ball & ~wall, (65, 159, 221))
        img = paint(img, jnp.broadcast_to(wall, (h_px, w_px)), (60, 60, 60))
        return img

    # ----- text (host side) ---------------------------------------------------------------
    def _host(self, state: PistonballState):
        s = jax.device_get(state)
        pos = np.asarray(s.piston_pos).reshape(-1)
        return (
            pos,
            pos.astype(np.float64) * PIXELS_PER_POSITION,
            np.asarray(s.ball_pos, np.float64).reshape(-1),
            np.asarray(s.ball_vel, np.float64).reshape(-1),
            bool(np.asarray(s.won)),
        )

    def describe(self, state: PistonballState, agent: int) -> str:
        n = self.num_agents
        agent = int(agent)
        pos, h, ball, vel, won = self._host(state)
        bx, by = float(ball[0]), float(ball[1])
        under = int(np.clip(bx // PISTON_WIDTH, 0, n - 1))
        mates = "; ".join(
            f"piston {j + 1} ({self._side(j, agent)}) at height {h[j]:.0f} px"
            for j in range(n)
            if j != agent
        )
        edge_widths = (bx - BALL_RADIUS) / PISTON_WIDTH
        rel = bx - float(self.centres[agent])
        if under == agent:
            where = "you, the ego piston"
        else:
            side = "right" if rel > 0 else "left"
            where = (
                f"teammate piston {under + 1}, {abs(rel) / PISTON_WIDTH:.1f} piston widths "
                f"to your {side}"
            )
        vx, vy = float(vel[0]), float(vel[1])
        if abs(vx) < 5.0:
            motion = "not moving sideways"
        else:
            motion = f"moving {'left' if vx < 0 else 'right'} at {abs(vx):.0f} px/s"
        vert = ""
        if abs(vy) >= 5.0:
            vert = f" and {'up' if vy > 0 else 'down'} at {abs(vy):.0f} px/s"
        lift = by - BALL_RADIUS - h[under]
        text = (
            f"You are the ego piston (piston {agent + 1} of {n}, counting from the left) at "
            f"height {h[agent]:.0f} px (range 0 to {MAX_HEIGHT:.0f}). "
            f"Teammate pistons: {mates}. "
            f"The ball (radius {BALL_RADIUS:.0f} px, about two pistons wide) has its centre at "
            f"x = {bx:.0f} px; its left edge is {edge_widths:.2f} piston widths from the left "
            f"wall (the goal). It is above {where}, with its bottom {lift:.0f} px above "
            f"that piston's top, {motion}{vert}."
        )
        if won:
            text += " The ball has reached the left wall: the task is done."
        return text

    @staticmethod
    def _side(j: int, agent: int) -> str:
        return f"{abs(j - agent)} to your {'left' if j < agent else 'right'}"

    def prompt_context(self, state: PistonballState, agent: int) -> dict[str, str]:
        n = self.num_agents
        agent = int(agent)
        return {
            "task_description": (
                f"{n} pistons stand side by side under a ball; each piston moves its top up, "
                "down or keeps it still at every step, and together they must push the ball "
                "to the left wall in as few steps as possible."
            ),
            "team_target": "the ball's left edge reaches the left wall",
            "key_steps": (
                "the ball moves left (it rolls down toward lower pistons), then reaches the "
                "left wall"
            ),
            "dependency": (
                "Assuming the teammate pistons take the best action, each piston only shapes "
                "the surface right under the ball: a ball rolls toward lower pistons, so "
                "pistons under the right side of the ball should rise and those under its "
                "left side should drop; pistons far from the ball do not affect it."
            ),
            "ego_role": f"piston {agent + 1} of {n}, counting from the left",
        }


register(
    EnvSpec(
        "pistonball",
        Pistonball,
        "Pistonball (PettingZoo butterfly) in JAX: 5 pistons roll a ball from the right end "
        "to the left wall; every agent gets -0.1 per step and +1 when the ball arrives",
        won_fn=lambda env, s: env.won(s),
        return_reduction="mean",
        capabilities=provides(RankingHeuristic, StateDescriber, Renderer),
    )
)

"""Pistonball (``envs.pistonball``): physics, rewards, the credit-assignment protocol.

The physics checks are the qualitative PettingZoo behaviours: a ball rolls down a slope
of pistons (left when it falls to the left, right when it falls to the right), stays
put at rest on flat pistons, rides a rising piston, never sinks into a piston and
never leaves the box; the scripted slope policy wins. The conformance suite runs from
``test_conformance.py``.
"""

import functools

import chex
import jax
import jax.numpy as jnp
import numpy as np
import pytest
from jaxmarl.environments.spaces import Discrete

import envs
from envs.capabilities import RankingHeuristic
from envs.pistonball import (
    BALL_RADIUS,
    CEILING,
    MAX_HEIGHT,
    PISTON_WIDTH,
    Pistonball,
    PistonballState,
)

N = 5
ENV = envs.make("pistonball")
WIDTH = N * PISTON_WIDTH
DOWN, STAY, UP = 0, 1, 2
PENALTY = np.float32(-0.1)

_step = jax.jit(ENV.transition)
_phi = jax.jit(ENV.heuristic_potential)


def _actions(*a) -> jax.Array:
    return jnp.asarray(a if len(a) == N else a * N, jnp.int32)


def _run(state, actions, steps: int):
    """Host loop of ``steps`` steps with fixed actions; ball positions ``[steps + 1, 2]``."""
    xs = [np.asarray(state.ball_pos)]
    for _ in range(steps):
        state, _ = _step(state, actions)
        xs.append(np.asarray(state.ball_pos))
    return state, np.stack(xs)


def _slope_actions(state) -> jax.Array:
    """Scripted policy: pistons right of the ball's centre go up, the others go down."""
    centres = (jnp.arange(N) + 0.5) * PISTON_WIDTH
    return jnp.where(centres > state.ball_pos[0], UP, DOWN).astype(jnp.int32)


def _penetration(piston_pos, ball_pos) -> np.ndarray:
    """Depth of the ball inside each piston box (negative: apart), numpy, ``[..., N]``."""
    h = np.asarray(piston_pos, np.float64) * 4.0
    bx, by = np.asarray(ball_pos[..., :1], np.float64), np.asarray(ball_pos[..., 1:], np.float64)
    x0 = np.arange(N) * PISTON_WIDTH
    cx = np.clip(bx, x0, x0 + PISTON_WIDTH)
    cy = np.minimum(by, h)
    dist = np.hypot(bx - cx, by - cy)
    return np.where(dist > 0, BALL_RADIUS - dist, BALL_RADIUS + h - by)


# ----- API ---------------------------------------------------------------------------------------
def test_api_and_protocol():
    assert isinstance(ENV, Pistonball) and envs.capability(ENV, RankingHeuristic) is ENV
    assert ENV.agents == [f"piston_{i}" for i in range(N)]
    assert ENV.roles == ("piston",) * N and ENV.noop_action == STAY
    for a in ENV.agents:
        assert isinstance(ENV.action_space(a), Discrete) and ENV.action_space(a).n == 3
        assert ENV.observation_space(a).shape == (14,)
    assert envs.make("pistonball", max_steps=8).max_steps == 8
    assert ENV.max_steps == 125
    assert envs.spec("pistonball").return_reduction == "mean"
    with pytest.raises(NotImplementedError, match="no simple hand-crafted individual"):
        ENV.individual_reward(None, None, None)


def test_observation_layout():
    obs, state = ENV.reset(jax.random.PRNGKey(0))
    o = np.stack([np.asarray(obs[a]) for a in ENV.agents])
    chex.assert_shape(o, (N, 14))
    assert o.dtype == np.float32 and np.all(np.abs(o) <= 1.0)
    np.testing.assert_array_equal(o, np.asarray(ENV.agent_features(state)))
    np.testing.assert_array_equal(o[:, -N:], np.eye(N))
    np.testing.assert_array_equal(o[:, 2], [1, 0, 0, 0, 0])  # no left neighbour
    np.testing.assert_array_equal(o[:, 4], [0, 0, 0, 0, 1])  # no right neighbour
    h = np.asarray(state.piston_pos) * 4.0 / MAX_HEIGHT * 2 - 1
    np.testing.assert_allclose(o[:, 0], h, atol=1e-6)
    np.testing.assert_allclose(o[1:, 1], h[:-1], atol=1e-6)  # left neighbour's height
    np.testing.assert_allclose(o[:-1, 3], h[1:], atol=1e-6)
    # the ball starts at the right end: right of every piston centre but the last
    assert np.all(o[:-1, 5] > 0)


def test_reset_uses_key_and_starts_at_rest_on_the_right():
    states = [ENV.reset(jax.random.PRNGKey(seed))[1] for seed in range(16)]
    pos = np.stack([np.asarray(s.piston_pos) for s in states])
    ball = np.stack([np.asarray(s.ball_pos) for s in states])
    assert len(np.unique(ball[:, 0])) == 16 and len(np.unique(pos, axis=0)) > 1
    assert np.all(ball[:, 0] >= WIDTH - BALL_RADIUS - 20.0)
    assert np.all(ball[:, 0] <= WIDTH - BALL_RADIUS)
    assert pos.min() >= 0 and pos.max() < 8  # the lower half, as PettingZoo's
    pen = _penetration(pos, ball).max(-1)
    assert np.all(pen <= 1e-3) and np.all(pen >= -4.01)  # touching or just above
    assert not any(bool(s.won) or bool(s.done) or int(s.step) for s in states)
    fixed = Pistonball(random_drop=False)
    k0, k1 = jax.random.PRNGKey(0), jax.random.PRNGKey(1)
    chex.assert_trees_all_equal(fixed.reset(k0)[1], fixed.reset(k1)[1])


# ----- physics -----------------------------------------------------------------------------------
def test_downhill_slope_rolls_left():
    state = ENV.resting_state([0, 4, 8, 12, 16], 150.0)
    state, xs = _run(state, _actions(STAY), 20)
    assert xs[-1, 0] < 60.0, xs[:, 0]
    assert np.all(np.diff(xs[:, 0]) < 0.5)  # never moves right on the way (but bounces)
    assert bool(state.won)


def test_uphill_slope_rolls_right():
    state = ENV.resting_state([16, 12, 8, 4, 0], 50.0)
    _, xs = _run(state, _actions(STAY), 20)
    assert xs[-1, 0] > WIDTH - 60.0, xs[:, 0]
    assert np.all(np.diff(xs[:, 0]) > -0.5)


@pytest.mark.parametrize("bx", [100.0, 150.0])
def test_flat_pistons_keep_a_resting_ball_still(bx):
    state = ENV.resting_state([5, 5, 5, 5, 5], bx)
    _, xs = _run(state, _actions(STAY), 30)
    np.testing.assert_allclose(xs, np.broadcast_to(xs[0], xs.shape), atol=0.1)


def test_rising_pistons_lift_the_ball_and_a_rising_right_piston_pushes_it_left():
    state = ENV.resting_state([4, 4, 4, 4, 4], 100.0)
    lifted, xs = _run(state, _actions(UP), 5)
    np.testing.assert_allclose(xs[-1, 1] - xs[0, 1], 20.0, atol=1.5)
    np.testing.assert_allclose(xs[:, 0], 100.0, atol=0.1)
    # ball centre over piston 2 (x = 110); piston 3 under its right half rises
    state = ENV.resting_state([4, 4, 4, 4, 4], 110.0)
    _, xs = _run(state, _actions(STAY, STAY, STAY, UP, STAY), 6)
    assert xs[-1, 0] < 100.0, xs[:, 0]
    # ... and piston 2 rising under its left half pushes it right
    state = ENV.resting_state([4, 4, 4, 4, 4], 130.0)
    _, xs = _run(state, _actions(STAY, STAY, UP, STAY, STAY), 6)
    assert xs[-1, 0] > 140.0, xs[:, 0]


def test_walls_and_ceiling_contain_a_fast_ball():
    r = BALL_RADIUS
    for vel in ((900.0, 0.0), (-900.0, 0.0), (0.0, 1500.0), (700.0, 900.0)):
        state = ENV.resting_state([8] * N, 100.0, ball_vel=vel)
        _, xs = _run(state, _actions(STAY), 15)
        assert np.all(xs[:, 0] >= r - 1e-3) and np.all(xs[:, 0] <= WIDTH - r + 1e-3), vel
        assert np.all(xs[:, 1] <= CEILING - r + 1e-3), vel


@functools.cache
def _random_states(batch: int = 64) -> PistonballState:
    return jax.jit(jax.vmap(ENV.random_state))(jax.random.split(jax.random.PRNGKey(3), batch))


@functools.cache
def _random_rollouts(steps: int = 80):
    """Random-action rollouts (no auto-reset) from random states and start-like states."""
    start = _random_states()
    batch = start.piston_pos.shape[0]
    rng = np.random.default_rng(0)
    # half of them start like a reset: the ball at rest on the right end
    ball_x = np.where(np.arange(batch) % 2 == 0, 150.0, np.asarray(start.ball_pos[:, 0]))
    actions = jnp.asarray(rng.integers(0, 3, (batch, steps, N)), jnp.int32)

    def one(pos, bx, acts):
        def body(s, a):
            s2, _ = ENV.transition(s, a)
            return s2, (s2.piston_pos, s2.ball_pos, s2.ball_vel)

        return jax.lax.scan(body, ENV.resting_state(pos, bx), acts)[1]

    out = jax.jit(jax.vmap(one))(start.piston_pos, jnp.asarray(ball_x, jnp.float32), actions)
    return jax.tree.map(np.asarray, out)


def test_random_play_never_sinks_into_pistons_or_leaves_the_box():
    pos, ball, vel = _random_rollouts()
    assert np.isfinite(ball).all() and np.isfinite(vel).all()
    assert _penetration(pos, ball).max() < 0.25
    assert ball[..., 0].min() >= BALL_RADIUS - 1e-3
    assert ball[..., 0].max() <= WIDTH - BALL_RADIUS + 1e-3
    assert ball[..., 1].max() <= CEILING - BALL_RADIUS + 1e-3
    assert ball[..., 0].std() > 5.0  # the ball does move around


# ----- rewards and episodes ----------------------------------------------------------------------
def test_slope_policy_reaches_the_left_wall():
    won_fn = envs.spec("pistonball").won_fn
    lengths = []
    for seed in range(4):
        _, state = ENV.reset(jax.random.PRNGKey(seed))
        rewards = []
        while not bool(state.done):
            state, reward = _step(state, _slope_actions(state))
            rewards.append(np.asarray(reward))
        n = len(rewards)
        assert bool(won_fn(ENV, state)) and n < ENV.max_steps, (seed, n)
        assert np.all(np.asarray(rewards[:-1]) == PENALTY)
        assert rewards[-1] == PENALTY + np.float32(1.0)
        np.testing.assert_allclose(np.sum(rewards, dtype=np.float64), 1.0 - 0.1 * n, atol=1e-5)
        lengths.append(n)
    assert max(lengths) <= 40, lengths


def test_step_penalty_time_limit_and_success_reward_are_exact():
    # flat pistons, the ball at rest: nothing happens until the time limit
    state = ENV.resting_state([0] * N, 150.0, step=ENV.max_steps - 8)
    for t in range(8):
        state, reward = _step(state, _actions(STAY))
        assert np.asarray(reward) == PENALTY
        assert bool(state.done) == (t == 7) and not bool(ENV.won(state))
    # the dict API gives every agent the team reward
    step_env = jax.jit(ENV.step_env)
    _, state = ENV.reset(jax.random.PRNGKey(0))
    _, _, rew, dones, _ = step_env(jax.random.PRNGKey(0), state, dict.fromkeys(ENV.agents, 1))
    assert set(rew) == set(ENV.agents) and all(np.asarray(r) == PENALTY for r in rew.values())
    assert set(dones) == {*ENV.agents, "__all__"}
    # a ball rolling into the left wall wins at once
    state = ENV.resting_state([0] * N, 50.0, ball_vel=(-150.0, 0.0))
    state, reward = _step(state, _actions(STAY))
    assert bool(state.won) and bool(state.done) and bool(ENV.won(state))
    assert np.asarray(reward) == PENALTY + np.float32(1.0)


# ----- heuristic ---------------------------------------------------------------------------------
def _phi_after(state, agent: int, action: int) -> np.ndarray:
    a = np.full(N, STAY)
    a[agent] = action
    nxt, _ = _step(state, jnp.asarray(a, jnp.int32))
    return np.asarray(_phi(nxt))


def test_heuristic_rewards_the_piston_that_shapes_the_slope():
    # ball centre at 130 over pistons 2 and 3; near pistons: 2 (left), 3 and 4 (right)
    state = ENV.resting_state([8] * N, 130.0)
    for agent, good, bad in ((2, DOWN, UP), (3, UP, DOWN), (4, UP, DOWN)):
        up, stay, down = (_phi_after(state, agent, a)[agent] for a in (UP, STAY, DOWN))
        best, mid, worst = {UP: up, STAY: stay, DOWN: down}[good], stay, {UP: up, DOWN: down}[bad]
        assert best > mid > worst, (agent, up, stay, down)
    # a piston pushing the ball right: piston 2 (left of the ball) rises under it
    state = ENV.resting_state([4, 4, 4, 4, 4], 110.0)
    before = np.asarray(_phi(state))
    after = _phi_after(state, 2, UP)
    assert after[2] < before[2]
    # ... and the opposite move on the other side pushes it left and gains potential
    after = _phi_after(state, 3, UP)
    assert after[3] > before[3]


def test_heuristic_far_pistons_are_ties():
    state = ENV.resting_state([8] * N, 150.0)  # near: pistons 2, 3, 4; far: 0, 1
    phis = np.stack([_phi_after(state, agent, a) for agent in (0, 1) for a in (UP, STAY, DOWN)])
    np.testing.assert_array_equal(phis[:, :2], np.full((6, 2), ENV.far_potential, np.float32))
    near = np.asarray(_phi(state))[2:]
    assert np.all(near != ENV.far_potential)
    # progress: the same slope further left scores higher for the near pistons
    left = np.asarray(_phi(ENV.resting_state([8] * N, 110.0)))
    assert left[2] > np.asarray(_phi(ENV.resting_state([8] * N, 150.0)))[2]


# ----- random states, render, text ---------------------------------------------------------------
def test_random_state_is_jittable_vmappable_and_valid():
    states = _random_states()
    assert isinstance(states, PistonballState)
    chex.assert_shape(states.piston_pos, (64, N))
    pos, ball = np.asarray(states.piston_pos), np.asarray(states.ball_pos)
    assert pos.min() >= 0 and pos.max() <= 16 and len(np.unique(pos)) > 10
    assert ball[:, 0].min() >= BALL_RADIUS and ball[:, 0].max() <= WIDTH - BALL_RADIUS
    assert np.ptp(ball[:, 0]) > 60.0
    pen = _penetration(pos, ball).max(-1)
    assert np.all(pen <= 1e-3) and np.all(pen >= -10.01)
    steps = np.asarray(states.step)
    assert steps.min() >= 0 and steps.max() < ENV.max_steps and len(np.unique(steps)) > 10
    # same avals (weak types included) as a reset state, so the two can be mixed
    avals = lambda t: jax.tree.map(lambda x: (x.shape, x.dtype, x.weak_type), t)
    key = jax.random.PRNGKey(0)
    assert avals(jax.eval_shape(ENV.random_state, key)) == avals(
        jax.eval_shape(lambda k: ENV.reset(k)[1], key)
    )
    feats = jax.eval_shape(jax.vmap(ENV.agent_features), states)
    assert feats.shape == (64, N, 14) and feats.dtype == jnp.float32
    assert jax.eval_shape(jax.vmap(ENV.heuristic_potential), states).shape == (64, N)


def test_render_is_uint8_and_shows_the_ball():
    render = jax.jit(ENV.render)
    a = ENV.resting_state([4] * N, 60.0)
    b = ENV.resting_state([4] * N, 140.0)
    img_a, img_b = np.asarray(render(a)), np.asarray(render(b))
    assert img_a.dtype == np.uint8 and img_a.ndim == 3 and img_a.shape[-1] == 3
    assert img_a.shape == img_b.shape and not np.array_equal(img_a, img_b)
    batch = jax.eval_shape(jax.vmap(ENV.render), jax.tree.map(lambda x, y: jnp.stack([x, y]), a, b))
    assert batch.shape == (2, *img_a.shape) and batch.dtype == jnp.uint8
    c = ENV.resting_state([12] * N, 60.0)
    assert not np.array_equal(np.asarray(render(c)), img_a)  # pistons show too


def test_describe_and_prompt_context():
    _, state = ENV.reset(jax.random.PRNGKey(0))
    state = jax.device_get(state)
    for agent in range(N):
        text = ENV.describe(state, agent)
        assert "ego" in text and "teammate" in text.lower()
        assert f"piston {agent + 1} of {N}" in text
        assert "ball" in text
        ctx = ENV.prompt_context(state, agent)
        assert set(ctx) == {
            "task_description",
            "team_target",
            "key_steps",
            "dependency",
            "ego_role",
        }
        assert all(isinstance(v, str) and v for v in ctx.values())
        assert "teammate" in ctx["dependency"] and ctx["ego_role"].startswith(f"piston {agent + 1}")
    moving = ENV.resting_state([0] * N, 100.0, ball_vel=(-80.0, 0.0))
    assert "moving left" in ENV.describe(moving, 0)
    assert "above you, the ego piston" in ENV.describe(ENV.resting_state([0] * N, 100.0), 2)

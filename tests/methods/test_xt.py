"""MAPPO-xT: the xT iteration, football events, the potential, grid files and a run."""

import json

import chex
import jax
import jax.numpy as jnp
import numpy as np
import pytest

import envs
from envs.football.env import KICK_SHORT, KICK_SHOT, NO_KICK, NORMAL
from jaxmarl_llm.config import ConfigError, build_config
from jaxmarl_llm.methods.xt import (
    DEFAULT_GRID,
    OpponentRule,
    XTConfig,
    XTCounts,
    action_model,
    events,
    load_grid,
    potential,
    solve_xt,
    xt_shaper,
)
from jaxmarl_llm.methods.xt.events import PASS, Pending, add_events
from jaxmarl_llm.methods.xt.grid import NX, NY, expected_threat, zone_index
from jaxmarl_llm.transitions import TransitionBatch

COUNTER = "football:academy_counterattack_easy"


def _two_zone_counts():
    """Zone A: 4 moves, 3 of them reach B. Zone B: 2 shots (1 goal), 2 moves back to A.
    xT_A = 0.75 xT_B, xT_B = 0.5 * 0.5 + 0.5 xT_A  ->  xT_B = 0.4, xT_A = 0.3."""
    return XTCounts(
        moves=jnp.array([4.0, 2.0]),
        success=jnp.array([[0.0, 3.0], [2.0, 0.0]]),
        shots=jnp.array([0.0, 2.0]),
        goals=jnp.array([0.0, 1.0]),
    )


@pytest.mark.parametrize("jit", [False, True], ids=["eager", "jit"])
def test_xt_iteration_solves_a_two_zone_chain(jit):
    s, m, g, t = action_model(_two_zone_counts())
    np.testing.assert_allclose(s, [0.0, 0.5])
    np.testing.assert_allclose(m, [1.0, 0.5])
    np.testing.assert_allclose(g, [0.0, 0.5])
    np.testing.assert_allclose(t, [[0.0, 0.75], [1.0, 0.0]])
    solve = jax.jit(solve_xt, static_argnames=("tol", "max_iterations")) if jit else solve_xt
    xt, iterations = solve(s, m, g, t, tol=1e-7, max_iterations=1000)
    np.testing.assert_allclose(xt, [0.3, 0.4], atol=1e-6)
    assert 5 < int(iterations) < 40  # contracts by 0.375 per iteration
    # iteration n: the chance of scoring within n actions
    np.testing.assert_allclose(solve(s, m, g, t, tol=0.0, max_iterations=1)[0], [0.0, 0.25])
    np.testing.assert_allclose(solve(s, m, g, t, tol=0.0, max_iterations=2)[0], [0.1875, 0.25])


def test_zones_without_actions_have_no_threat_and_the_grid_is_y_by_x():
    counts = XTCounts.zeros()
    goal_zone = int(zone_index(jnp.array([0.95, 0.0])))
    counts = counts.replace(shots=counts.shots.at[goal_zone].set(4.0))
    counts = counts.replace(goals=counts.goals.at[goal_zone].set(1.0))
    grid, iterations = expected_threat(counts)
    chex.assert_shape(grid, (NY, NX))
    assert float(grid[NY // 2, NX - 1]) == pytest.approx(0.25) and float(grid.sum()) == 0.25
    assert int(zone_index(jnp.array([-1.0, -0.42]))) == 0
    assert int(zone_index(jnp.array([1.05, 0.47]))) == NX * NY - 1  # off the lines: edge


def _counter_state():
    env = envs.make(COUNTER)
    return env, env.reset(jax.random.PRNGKey(0))[1]


def test_a_completed_pass_and_a_right_team_goal_are_counted_in_attacking_frames():
    step_events = jax.jit(events.step_events)
    _, s = _counter_state()
    kick = jnp.full((22,), NO_KICK, jnp.int32)
    # left CM (6) on the ball at (0.3, 0) passes; the ball is free, then player 9 takes it
    s0 = s.replace(owner=jnp.int32(6), ball=jnp.array([0.3, 0.0]))
    s1 = s0.replace(owner=jnp.int32(-1), ball=jnp.array([0.32, 0.02]))
    s2 = s1.replace(owner=jnp.int32(9), ball=jnp.array([0.5, 0.1]))
    pend, ev = step_events(Pending.none(), s0, kick.at[6].set(KICK_SHORT), s1)
    assert int(pend.kind) == PASS and not bool(ev.move)
    pend, ev = step_events(pend, s1, kick, s2)
    assert bool(ev.move) and bool(ev.move_ok) and int(pend.kind) == 0
    assert int(ev.move_from) == int(zone_index(jnp.array([0.3, 0.0])))
    assert int(ev.move_to) == int(zone_index(jnp.array([0.5, 0.1])))
    # right player 12 shoots from (-0.8, 0.1) (its frame: (0.8, -0.1)) and scores
    r0 = s.replace(owner=jnp.int32(12), ball=jnp.array([-0.8, 0.1]))
    r1 = r0.replace(owner=jnp.int32(-1), ball=jnp.array([-0.9, 0.1]))
    r2 = r1.replace(owner=jnp.int32(10), score=jnp.array([0, 1]), game_mode=jnp.int32(1))
    pend, ev = step_events(Pending.none(), r0, kick.at[12].set(KICK_SHOT), r1)
    shot_zone = int(zone_index(jnp.array([0.8, -0.1])))
    assert bool(ev.shot) and int(ev.shot_zone) == shot_zone
    pend, ev = step_events(pend, r1, kick, r2)
    assert bool(ev.goal) and int(ev.goal_zone) == shot_zone and not bool(ev.move)
    counts = add_events(XTCounts.zeros(), jax.tree.map(lambda x: x[None], ev))
    assert float(counts.goals.sum()) == 1.0 and float(counts.moves.sum()) == 0.0
    # a tackle is a failed move from the carrier's zone
    t1 = s0.replace(owner=jnp.int32(13), game_mode=jnp.int32(NORMAL))
    _, ev = step_events(Pending.none(), s0, kick, t1)
    assert bool(ev.move) and not bool(ev.move_ok)


@pytest.mark.parametrize("jit", [False, True], ids=["eager", "jit"])
def test_the_potential_rises_toward_the_opponent_goal_and_flips_for_the_opponent(jit):
    _, s = _counter_state()
    grid = jnp.asarray(load_grid())
    phi = lambda st, rule: potential(grid, st, rule)
    phi = jax.jit(phi, static_argnums=1) if jit else phi
    mirror, zero = OpponentRule.mirror, OpponentRule.zero
    near = s.replace(owner=jnp.int32(9), ball=jnp.array([0.85, 0.0]))
    own_half = s.replace(owner=jnp.int32(2), ball=jnp.array([-0.5, 0.0]))
    assert float(phi(near, mirror)) > 0.3 > float(phi(own_half, mirror)) >= 0.0
    # the right team at our goal: minus its threat (mirror) or nothing (zero)
    against = s.replace(owner=jnp.int32(19), ball=jnp.array([-0.85, 0.0]))
    assert float(phi(against, mirror)) == pytest.approx(-float(phi(near, mirror)))
    assert float(phi(against, zero)) == 0.0
    # a free ball belongs to the team that touched it last
    free = near.replace(owner=jnp.int32(-1), last_touch=jnp.int32(0))
    assert float(phi(free, mirror)) == float(phi(near, mirror))
    lost = against.replace(owner=jnp.int32(-1), last_touch=jnp.int32(1))
    assert float(phi(lost, mirror)) == float(phi(against, mirror))
    assert float(phi(lost, zero)) == 0.0


def _trajectory(steps: int):
    """States s_0..s_T with random ball positions, owners (free balls included) and
    last touches: the telescoping is a property of F, not of the dynamics."""
    env, s = _counter_state()
    k_ball, k_owner, k_touch = jax.random.split(jax.random.PRNGKey(1), 3)
    ball = jax.random.uniform(k_ball, (steps + 1, 2), minval=-1.0, maxval=1.0)
    ball = ball * jnp.array([1.0, 0.42])
    owner = jax.random.randint(k_owner, (steps + 1,), -1, 22)
    touch = jax.random.randint(k_touch, (steps + 1,), 0, 2)
    stacked = jax.tree.map(lambda x: jnp.stack([x] * (steps + 1)), s)
    return env, stacked.replace(ball=ball, owner=owner, last_touch=touch)


def test_the_shaping_telescopes_to_the_discounted_potential_difference():
    gamma, steps = 0.9, 12
    env, traj = _trajectory(steps)
    shaper = xt_shaper(env, XTConfig(gamma=gamma))
    first = jax.tree.map(lambda x: x[:-1], traj)
    after = jax.tree.map(lambda x: x[1:], traj)
    reward = jnp.zeros((steps, env.num_agents))
    batch = lambda done: TransitionBatch(None, None, None, reward, done, first, after)
    phi = potential(shaper.params, traj, OpponentRule.mirror)
    assert float(jnp.abs(phi).max()) > 0  # the ball passes zones with threat
    disc = gamma ** jnp.arange(steps)
    open_end = shaper.apply(shaper.params, batch(jnp.zeros(steps, bool)))
    chex.assert_shape(open_end, (steps, env.num_agents))
    np.testing.assert_allclose(open_end, open_end[:, :1].repeat(env.num_agents, 1))
    total = (disc * open_end[:, 0]).sum()
    np.testing.assert_allclose(total, gamma**steps * phi[-1] - phi[0], atol=1e-6)
    # phi = 0 at the terminal step: the discounted sum is -phi(s_0)
    ended = shaper.apply(shaper.params, batch(jnp.arange(steps) == steps - 1))
    np.testing.assert_allclose((disc * ended[:, 0]).sum(), -phi[0], atol=1e-6)


def test_grid_files_are_read_in_either_orientation_and_bad_ones_name_the_problem(tmp_path):
    grid = load_grid()
    chex.assert_shape(grid, (NY, NX))
    record = json.loads(DEFAULT_GRID.read_text())
    assert record["counts"]["shots"] > 0 and record["iterations"] > 0
    np.save(tmp_path / "xy.npy", grid.T)  # [21, 15] = [x, y]
    np.testing.assert_array_equal(load_grid(tmp_path / "xy.npy"), grid)
    (tmp_path / "bare.json").write_text(json.dumps(grid.tolist()))
    np.testing.assert_allclose(load_grid(tmp_path / "bare.json"), grid)
    np.save(tmp_path / "singh.npy", np.zeros((8, 12)))
    with pytest.raises(ConfigError, match=r"shaping.kwargs.grid.*shape \[8, 12\]"):
        load_grid(tmp_path / "singh.npy")
    with pytest.raises(ConfigError, match="no xT grid file"):
        load_grid(tmp_path / "missing.json")
    (tmp_path / "other.json").write_text('{"values": [1, 2]}')
    with pytest.raises(ConfigError, match="cannot read an xT grid"):
        load_grid(tmp_path / "other.json")


@pytest.mark.parametrize(
    "kwargs, match",
    [
        ({"grid": "/nonexistent/xt.json"}, "no xT grid file"),
        ({"gamma": 1.5}, "gamma must be in"),
        ({"opponent": "ignore"}, "opponent"),
        ({"rho": 0.02}, "rho"),
    ],
)
def test_bad_xt_kwargs_are_config_errors(kwargs, match):
    raw = {"name": "x", "env": {"name": COUNTER}, "algo": {"name": "mappo"},
           "shaping": {"name": "xt", "kwargs": kwargs}}  # fmt: skip
    with pytest.raises(ConfigError, match=match):
        build_config(raw)


def test_the_xt_shaper_refuses_a_non_football_env():
    match = r"^shaping.name=xt .* needs an env with football match states .*\(FootballMatch\); "
    with pytest.raises(ConfigError, match=match + r"'mpe:simple_spread_3' .* lacks it"):
        xt_shaper(envs.make_array_env("mpe:simple_spread_3"), XTConfig())


def test_a_rollout_carrying_the_potential_pays_what_apply_pays():
    """IPPO/MAPPO carry phi(s') of each step to the next (one potential per env step);
    the rewards equal ``apply``'s ``gamma * phi(s') - phi(s)`` on every step, across
    episode ends (counterattacks end within the 64 steps here)."""
    from jaxmarl_llm.learners.ppo import PPO, PPOConfig

    env = envs.make_array_env(COUNTER)
    shaper = xt_shaper(env, XTConfig(gamma=0.9), coef=0.5)
    cfg = PPOConfig(name="mappo", num_envs=4, num_steps=64, hidden_sizes=[8])

    def rewards(shaper):
        learner = PPO(cfg, env, shaper)
        s = learner.init(jax.random.PRNGKey(0))
        _, _, traj, done, _ = jax.jit(learner.rollout)(s)
        return np.asarray(traj.reward), np.asarray(done)

    carried, done = rewards(shaper)
    applied, _ = rewards(shaper.replace(potential=None))
    assert done.any()
    np.testing.assert_allclose(carried, applied, rtol=1e-6, atol=1e-6)
    # the env pays only on a goal's step; the shaping pays on most steps
    assert (np.abs(carried) > 1e-6).mean() > 0.5

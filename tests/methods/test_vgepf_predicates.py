"""V-GEPF's skill predicates on hand-built football states, eager and jitted/vmapped."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from envs.football import scenarios
from envs.football.env import NUM_STATS, FootballState
from jaxmarl_llm.methods.vgepf import predicates as P
from jaxmarl_llm.methods.vgepf.skills import SKILL_NAMES, skill_index

# blue on its 4-3-3 home spots (GK, LB, CB, CB, RB, LM, CM, CM, RM, CF, holding CM)
FORMATION = np.asarray(scenarios.FORMATION, np.float32)


def make_state(ball=(0.0, 0.0), owner=-1, pass_team=-1, ball_vel=(0.0, 0.0), **players):
    """Blue on its home spots, red mirrored through the centre spot, everyone still; ``players``
    overrides positions (``p9=(x, y)``) and velocities (``v9=(dx, dy)``) by index."""
    pos = np.concatenate([FORMATION, -FORMATION]).astype(np.float32)
    vel = np.zeros((22, 2), np.float32)
    for name, xy in players.items():
        (pos if name[0] == "p" else vel)[int(name[1:])] = xy
    i32 = lambda v: jnp.asarray(v, jnp.int32)  # noqa: E731
    return FootballState(
        pos=jnp.asarray(pos),
        vel=jnp.asarray(vel),
        facing=jnp.tile(jnp.array([[1.0, 0.0]]), (22, 1)),
        ball=jnp.asarray(ball, jnp.float32),
        ball_vel=jnp.asarray(ball_vel, jnp.float32),
        prev_ball=jnp.asarray(ball, jnp.float32),
        ball_air=i32(0),
        owner=i32(owner),
        last_touch=i32(0),
        kicker=i32(-1),
        kick_cool=i32(0),
        pass_team=i32(pass_team),
        sticky_dir=jnp.zeros((11,), jnp.int32),
        sprint=jnp.zeros((11,), bool),
        dribble=jnp.zeros((11,), bool),
        game_mode=i32(0),
        mode_steps=i32(0),
        score=jnp.zeros((2,), jnp.int32),
        checkpoints=jnp.zeros((4,), jnp.int32),
        stats=jnp.zeros((NUM_STATS,), jnp.float32),
        step=i32(0),
    )


# (skill, state, holds, score or None); states far from the others' conditions
RED_BACK = {f"p{i}": (-0.2, -0.3 + 0.07 * (i - 12)) for i in range(12, 20)}  # 8 red behind
CASES = [
    # blue on its home spots, player 10 on the ball and still
    ("correct formation", make_state(owner=10), True, 1.0),
    ("has advantage", make_state(owner=10), False, 0.0),
    ("encourage dribbling", make_state(owner=10), False, 0.0),
    ("encourage attack", make_state(owner=10), False, 0.0),
    # CM 6 0.14 ahead of the holding CM 10: its line is 0.14 deep, 0.02 over LINE_DEPTH
    ("correct formation", make_state(p6=(-0.26, -0.12)), False, 1 - 0.02 / 0.15),
    # the front three bunched within 0.15 in y: 0.05 short of a three-player line's 0.2
    ("correct formation", make_state(p5=(-0.15, -0.05), p8=(-0.15, 0.1)), False, 1 - 0.05 / 0.15),
    # the central three dropped to x -0.5: 0.085 ahead of the back four's mean, 0.015 short
    # of LINE_GAP
    (
        "correct formation",
        make_state(p6=(-0.5, -0.12), p7=(-0.5, 0.12), p10=(-0.5, 0.0)),
        False,
        1 - 0.015 / 0.15,
    ),
    # all ten outfield players on one vertical line: no gaps between the lines
    (
        "correct formation",
        make_state(**{f"p{i}": (-0.3, -0.36 + 0.08 * i) for i in range(1, 11)}),
        False,
        1 - 0.1 / 0.15,
    ),
    # 4 blue ahead of the ball at x 0.3 against 2 red goal-side: margin 2
    (
        "has advantage",
        make_state(
            ball=(0.3, 0.0),
            p5=(0.5, -0.2),
            p8=(0.5, 0.2),
            p9=(0.6, -0.05),
            p10=(0.7, 0.05),
            p20=(0.8, -0.1),
            p21=(0.8, 0.1),
            **RED_BACK,
        ),
        True,
        2 / 3,
    ),
    # CBs 2, 3 and CMs 6, 7 against no red within 0.2 of the ball: margin 4 - 1 = 3
    ("has advantage", make_state(ball=(-0.45, 0.0)), True, 1.0),
    # CB 3, RB 4, CM 7, RM 8 against three red moved next to the ball: margin 1 - 1 = 0
    (
        "has advantage",
        make_state(ball=(-0.45, 0.15), p19=(-0.5, 0.15), p20=(-0.4, 0.1), p21=(-0.45, 0.2)),
        False,
        0.0,
    ),
    ("ball location", make_state(ball=(0.8, 0.1)), True, 1 - np.hypot(0.2, 0.1) / 0.5),
    ("ball location", make_state(ball=(0.55, 0.0)), False, 0.0),  # x <= 0.6
    ("ball location", make_state(ball=(0.7, 0.41)), False, 0.0),  # 0.51 from goal
    ("encourage dribbling", make_state(owner=9, v9=(0.01, 0.0)), True, 1.0),
    ("encourage dribbling", make_state(owner=9, v9=(0.0, 0.006)), True, 0.6),
    ("encourage dribbling", make_state(owner=9, v9=(0.002, 0.0)), False, 0.0),  # too slow
    ("encourage dribbling", make_state(owner=12, v12=(-0.01, 0.0)), False, 0.0),  # red
    # CM 6 on the ball at x 0.3, CFs 9 and 10 ahead and near: 2 supporters
    (
        "encourage attack",
        make_state(ball=(0.3, 0.0), owner=6, p6=(0.29, 0.0), p9=(0.5, -0.1), p10=(0.4, 0.2)),
        True,
        2 / 3,
    ),
    # the same with a blue pass in flight to CF 9
    (
        "encourage attack",
        make_state(ball=(0.3, 0.0), pass_team=0, p6=(0.0, 0), p9=(0.5, -0.1), p10=(0.4, 0.2)),
        True,
        2 / 3,
    ),
    # only one supporter
    (
        "encourage attack",
        make_state(ball=(0.3, 0.0), owner=6, p6=(0.29, 0.0), p9=(0.5, -0.1)),
        False,
        0.0,
    ),
    # red on the ball
    (
        "encourage attack",
        make_state(ball=(0.3, 0.0), owner=12, p12=(0.31, 0.0), p9=(0.5, -0.1), p10=(0.4, 0.2)),
        False,
        0.0,
    ),
    # ball 0.2 from blue's goal, CBs 2 and 3 between it and the goal
    (
        "encourage defense",
        make_state(ball=(-0.8, 0.0), p2=(-0.9, -0.05), p3=(-0.9, 0.05)),
        True,
        (1 - 0.2 / 0.5) * 2 / 3,
    ),
    ("encourage defense", make_state(ball=(-0.8, 0.0)), False, 0.0),  # nobody goal-side
    (
        "encourage defense",  # a third defender goal-side but outside the lane
        make_state(ball=(-0.8, 0.0), p2=(-0.9, -0.05), p4=(-0.9, 0.35)),
        False,
        0.0,
    ),
    ("encourage passing", make_state(pass_team=0, ball_vel=(0.02, 0.0)), True, 1.0),
    ("encourage passing", make_state(pass_team=1, ball_vel=(0.02, 0.0)), False, 0.0),
    ("encourage passing", make_state(pass_team=-1, ball_vel=(0.02, 0.0)), False, 0.0),  # shot
    ("encourage passing", make_state(pass_team=0, ball_vel=(0.003, 0.0)), False, 0.0),
    ("encourage passing", make_state(owner=9, pass_team=0, ball_vel=(0.02, 0)), False, 0.0),
]


@pytest.mark.parametrize("jit", [False, True], ids=["eager", "jit"])
def test_hand_built_states(jit):
    fns = [jax.jit(f) if jit else f for f in P.PREDICATES]
    for i, (name, state, holds, score) in enumerate(CASES):
        h, s = fns[skill_index(name)](state)
        assert h.dtype == jnp.bool_ and h.shape == () and s.dtype == jnp.float32
        assert bool(h) == holds, (i, name)
        np.testing.assert_allclose(float(s), score, atol=1e-5, err_msg=f"case {i} {name}")


def test_all_predicates_jit_vmap_equal_eager():
    states = [c[1] for c in CASES]
    batch = jax.tree.map(lambda *xs: jnp.stack(xs), *states)
    h, s = jax.jit(jax.vmap(P.skill_predicates))(batch)
    assert h.shape == (len(states), len(SKILL_NAMES)) and s.shape == h.shape
    for i, st in enumerate(states):
        he, se = P.skill_predicates(st)
        np.testing.assert_array_equal(h[i], he)
        np.testing.assert_allclose(s[i], se, atol=1e-6)
    # the hand-built cases agree with skill_predicates' ordering
    for i, (name, _, holds, _) in enumerate(CASES):
        assert bool(h[i, skill_index(name)]) == holds


def test_scores_in_unit_interval_and_positive_exactly_where_true():
    rng = np.random.default_rng(0)
    n = 512
    pos = rng.uniform([-1, -0.42], [1, 0.42], (n, 22, 2)).astype(np.float32)
    ball = rng.uniform([-1, -0.42], [1, 0.42], (n, 2)).astype(np.float32)
    owner = rng.integers(-1, 22, n)
    base = make_state()
    batch = jax.tree.map(lambda x: jnp.broadcast_to(x, (n, *x.shape)), base).replace(
        pos=jnp.asarray(pos),
        vel=jnp.asarray(rng.normal(0, 0.008, (n, 22, 2)), jnp.float32),
        ball=jnp.asarray(ball),
        ball_vel=jnp.asarray(rng.normal(0, 0.01, (n, 2)), jnp.float32),
        owner=jnp.asarray(owner, jnp.int32),
        pass_team=jnp.asarray(rng.integers(-1, 2, n), jnp.int32),
    )
    h, s = map(np.asarray, jax.jit(jax.vmap(P.skill_predicates))(batch))
    assert ((s >= 0) & (s <= 1)).all()
    f = skill_index("correct formation")
    others = np.arange(len(SKILL_NAMES)) != f
    np.testing.assert_array_equal(h[:, others], s[:, others] > 0)
    np.testing.assert_array_equal(h[:, f], s[:, f] == 1.0)
    # random states exercise both outcomes of most predicates
    assert h.any(0).sum() >= 5 and (~h).any(0).all()

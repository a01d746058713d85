"""envs/football/render.py (V-GEPF's frames) and experiments/render_match.py."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from PIL import Image
from scipy.spatial import ConvexHull
from scripts import load_script

import envs
from envs.capabilities import Renderer
from envs.football import render as fr

SIZE = 224
PX = 2.2 / SIZE  # world units per pixel: the view is 2.2 wide


@pytest.fixture(scope="module")
def env():
    return envs.make("football:11_vs_11_easy_stochastic")


@pytest.fixture(scope="module")
def kickoff(env):
    """The kick-off without the reset's random jitter: players on their formation spots."""
    _, state = env.reset(jax.random.PRNGKey(0))
    return state.replace(pos=env.start_pos, ball=jnp.zeros(2, jnp.float32))


@pytest.fixture(scope="module")
def draw():
    return jax.jit(fr.render, static_argnums=1)


def pixel(x, y):
    """(row, col) of world point (x, y) at SIZE, from the view's extent x, y in +-1.1."""
    return int(round((y + 1.1) / 2.2 * SIZE - 0.5)), int(round((x + 1.1) / 2.2 * SIZE - 0.5))


def with_player(state, i, xy):
    return state.replace(pos=state.pos.at[i].set(jnp.asarray(xy, jnp.float32)))


def blend(colour, alpha=fr.HULL_ALPHA, under=fr.GREEN):
    return (1 - alpha) * np.asarray(under, float) + alpha * np.asarray(colour, float)


def test_capability_shape_and_jit_equals_eager(env, kickoff, draw):
    assert envs.capability(env, Renderer) is env
    eager = env.render(kickoff)
    assert eager.shape == (SIZE, SIZE, 3) and eager.dtype == jnp.uint8
    np.testing.assert_array_equal(np.asarray(eager), np.asarray(draw(kickoff, SIZE)))
    assert pixel(0.0, 0.0) == (112, 112) and fr.world_to_pixel((0.0, 0.0)) == (111.5, 111.5)


def test_vmap_equals_each(env, draw):
    states = [env.reset(k)[1] for k in jax.random.split(jax.random.PRNGKey(1), 4)]
    batch = jax.tree.map(lambda *xs: jnp.stack(xs), *states)
    frames = np.asarray(jax.jit(jax.vmap(lambda s: fr.render(s, 64)))(batch))
    assert frames.shape == (4, 64, 64, 3) and frames.dtype == np.uint8
    for frame, s in zip(frames, states, strict=True):
        np.testing.assert_array_equal(frame, np.asarray(draw(s, 64)))
    assert not (frames[0] == frames[1]).all()  # the stochastic resets differ


def test_players_ball_lines_and_background(kickoff, draw):
    state = with_player(kickoff, 5, (0.5, 0.2))  # a left midfielder, in the right half
    state = with_player(state, 15, (0.6, -0.3))  # a right-team player
    state = state.replace(ball=jnp.asarray([0.3, -0.15], jnp.float32))
    img = np.asarray(draw(state, SIZE))
    assert tuple(img[pixel(0.5, 0.2)]) == fr.LEFT_COLOUR
    assert tuple(img[pixel(0.6, -0.3)]) == fr.RIGHT_COLOUR
    assert tuple(img[pixel(0.3, -0.15)]) == fr.WHITE
    row, col = pixel(0.3, -0.15)
    across = img[row, col - 4 : col + 5]  # the ball's white centre has a black rim
    assert (across[:4] == fr.BLACK).all(-1).any() and (across[5:] == fr.BLACK).all(-1).any()
    assert tuple(img[pixel(-0.5, -0.42)]) == fr.WHITE  # touch line
    assert tuple(img[pixel(0.0, 0.3)]) == fr.WHITE  # halfway line
    assert tuple(img[pixel(-0.8, 0.35)]) == fr.GREEN  # in the pitch, far from everything
    assert tuple(img[0, 0]) == (0, 0, 0)  # letterbox


def test_hull_tint_inside_green_outside(kickoff, draw):
    img = np.asarray(draw(kickoff, SIZE)).astype(float)
    # between the left defenders (x ~ -0.6) and midfielders (x ~ -0.33) at kick-off
    np.testing.assert_allclose(img[pixel(-0.46, 0.0)], blend(fr.LEFT_COLOUR), atol=1)
    np.testing.assert_allclose(img[pixel(0.46, 0.0)], blend(fr.RIGHT_COLOUR), atol=1)
    # behind the left defence but in front of the keeper: outside the outfield hull
    assert tuple(img[pixel(-0.8, 0.0)]) == fr.GREEN


def test_hull_vertices_match_scipy():
    rng = np.random.default_rng(0)
    for _ in range(5):
        pts = rng.uniform([-1, -0.42], [1, 0.42], (10, 2)).astype(np.float32)
        verts = np.asarray(fr.hull_vertices(jnp.asarray(pts)))
        assert verts.shape == (11, 2)
        got = {tuple(v) for v in verts}
        assert got == {tuple(pts[i]) for i in ConvexHull(pts).vertices}
        assert (verts[0] == verts[-1]).all()  # closed


def test_moving_the_keeper_changes_only_near_its_two_positions(kickoff, draw):
    old, new = np.array([-0.99, 0.0]), np.array([-0.85, 0.2])
    before = np.asarray(draw(kickoff, SIZE))
    after = np.asarray(draw(with_player(kickoff, 0, new), SIZE))
    rows, cols = np.nonzero((before != after).any(-1))
    assert len(rows) > 0
    xy = np.stack([(cols + 0.5) * PX - 1.1, (rows + 0.5) * PX - 1.1], -1)
    reach = fr.PLAYER_RADIUS + PX
    near_old = np.linalg.norm(xy - old, axis=-1) <= reach
    near_new = np.linalg.norm(xy - new, axis=-1) <= reach
    assert (near_old | near_new).all() and near_old.any() and near_new.any()
    assert tuple(after[pixel(*new)]) == fr.LEFT_COLOUR


def test_moving_an_outfield_player_changes_only_its_team_region(kickoff, draw):
    # the left forward 9 moves toward the top touch line: its disc, its team's hull and
    # forward line change, all within the box around the left outfield players' old and
    # new positions
    new = np.array([-0.1, -0.38])
    moved = with_player(kickoff, 9, new)
    before, after = np.asarray(draw(kickoff, SIZE)), np.asarray(draw(moved, SIZE))
    rows, cols = np.nonzero((before != after).any(-1))
    xy = np.stack([(cols + 0.5) * PX - 1.1, (rows + 0.5) * PX - 1.1], -1)
    team = np.concatenate([np.asarray(kickoff.pos[1:11]), new[None]])
    lo, hi = team.min(0) - fr.PLAYER_RADIUS - PX, team.max(0) + fr.PLAYER_RADIUS + PX
    assert ((xy >= lo) & (xy <= hi)).all()
    assert tuple(after[pixel(*new)]) == fr.LEFT_COLOUR
    assert tuple(before[pixel(*new)]) != fr.LEFT_COLOUR
    # the hull now reaches up toward the forward: a pixel outside the old hull is tinted
    assert tuple(before[pixel(-0.12, -0.3)]) == fr.GREEN
    np.testing.assert_allclose(
        after[pixel(-0.12, -0.3)].astype(float), blend(fr.LEFT_COLOUR), atol=1
    )


def test_render_match_script_writes_a_gif(tmp_path, capsys):
    script = load_script("experiments/render_match.py")
    out = tmp_path / "tmp.gif"
    argv = ["--env", "football:academy_counterattack_easy", "--steps", "5", "--out", str(out)]
    assert script.main(argv) == 0
    with Image.open(out) as gif:
        assert gif.size == (SIZE, SIZE) and gif.n_frames in (5, 6)
    assert script.main(["--env", "matrix:penalty", "--steps", "2"]) == 2
    assert "Renderer" in capsys.readouterr().err


def _rollout_states(env, n: int, steps: int, seed: int):
    """``n`` states [n, ...] after ``steps`` random-action steps, one env each (episodes
    that end restart, so the batch mixes kick-offs, attacks and resets)."""
    k_reset, k_run = jax.random.split(jax.random.PRNGKey(seed))
    _, state = jax.vmap(env.reset)(jax.random.split(k_reset, n))
    n_act = env.action_space(env.agents[0]).n

    def body(state, key):
        k_act, k_step = jax.random.split(key)
        acts = jax.random.randint(k_act, (n, len(env.agents)), 0, n_act)
        actions = {a: acts[:, i] for i, a in enumerate(env.agents)}
        _, state, *_ = jax.vmap(env.step)(jax.random.split(k_step, n), state, actions)
        return state, None

    return jax.lax.scan(body, state, jax.random.split(k_run, steps))[0]


def _scattered(states, seed: int):
    """The same states with players and ball drawn uniformly over the whole view (off the
    pitch too) and some players stacked on one spot (degenerate hulls, zero-length
    formation segments)."""
    rng = np.random.default_rng(seed)
    n = states.pos.shape[0]
    pos = rng.uniform([-1.15, -0.56], [1.15, 0.56], (n, 22, 2)).astype(np.float32)
    pos[: n // 4, 1:8] = pos[: n // 4, 1:2]  # seven left outfield players on one spot
    pos[n // 4 : n // 2, 12:22] = pos[n // 4 : n // 2, 12:13]  # the right outfield, all
    ball = rng.uniform([-1.15, -0.56], [1.15, 0.56], (n, 2)).astype(np.float32)
    return states.replace(pos=jnp.asarray(pos), ball=jnp.asarray(ball))


COUNTER, FULL = "football:academy_counterattack_easy", "football:11_vs_11_easy_stochastic"


# each scenario and each size in the suite; the other two pairs with the slow tests
@pytest.mark.parametrize(
    "scenario, size",
    [
        (COUNTER, 224),
        (FULL, 96),
        pytest.param(COUNTER, 96, marks=pytest.mark.slow),
        pytest.param(FULL, 224, marks=pytest.mark.slow),
    ],
)
def test_renderer_is_pixel_identical_to_the_frozen_reference(scenario, size):
    """The football CLIP was trained on the frozen renderer's frames: every pixel of 64
    states (32 from random play, 32 scattered) must stay the same, jitted and vmapped as
    the potential calls it."""
    from football_render_frozen import render as frozen

    env = envs.make(scenario)
    played = _rollout_states(env, 32, 25, seed=size)
    states = jax.tree.map(
        lambda a, b: jnp.concatenate([a, b]), played, _scattered(played, seed=size)
    )
    new = jax.jit(jax.vmap(lambda s: fr.render(s, size)))(states)
    old = jax.jit(jax.vmap(lambda s: frozen(s, size)))(states)
    np.testing.assert_array_equal(np.asarray(new), np.asarray(old))

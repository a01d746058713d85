"""Top-view frames of a football state (V-GEPF's CLIP input, the paper's Figure 8).

``render(state, size)`` draws a ``[size, size, 3]`` uint8 picture: the pitch (touch and
goal lines, halfway line, centre circle and spot, penalty boxes, goals) on green, each
team's convex hull of its outfield players as a translucent polygon and its formation
lines (the 4-3-3's back four, central three and front three; each line
joined in order of y) in the team colour, the players as discs (left team blue, right
team red) and the ball as a white disc with a black rim on top. The pitch keeps its
aspect ratio and is letterboxed (black bars above and below).

Everything is array math over the pixel grid (distance fields and masks per primitive),
so it jits and vmaps over batches of states. Coordinates are GRF's as stored in the
state (both teams in left-team coordinates): x in [-1, 1] left to right, y in
[-0.42, 0.42] top to bottom.
"""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np

from envs.football.scenarios import FORMATION_LINES

# visible world: the pitch plus a margin on every side (goals stick out behind the lines)
VIEW_HALF_WIDTH = 1.1
VIEW_HALF_HEIGHT = 0.52
PITCH_HALF_HEIGHT = 0.42

PLAYER_RADIUS = 0.028
BALL_RADIUS = 0.016
BALL_RIM = 0.006
HULL_ALPHA = 0.35
LINE_HALF_WIDTH = 0.007  # pitch lines, about 1.5 px at size 224
FORMATION_HALF_WIDTH = 0.005

GREEN = (40, 140, 60)
WHITE = (255, 255, 255)
BLACK = (0, 0, 0)
LEFT_COLOUR = (30, 80, 230)
RIGHT_COLOUR = (220, 30, 30)
LEFT_LINE_COLOUR = (120, 170, 255)
RIGHT_LINE_COLOUR = (255, 140, 140)

# pitch markings as segments [S, 2, 2] (x, y end points)
_BOX_X, _BOX_Y = 0.70, 0.24  # penalty box: from the goal line to |x| = 0.70, |y| < 0.24
_GOAL_Y, _GOAL_DEPTH = 0.044, 0.04


def _pitch_segments() -> np.ndarray:
    h = PITCH_HALF_HEIGHT
    segs = [
        ((-1, -h), (1, -h)),  # touch lines
        ((-1, h), (1, h)),
        ((-1, -h), (-1, h)),  # goal lines
        ((1, -h), (1, h)),
        ((0, -h), (0, h)),  # halfway line
    ]
    for s in (-1.0, 1.0):
        segs += [
            ((s, -_BOX_Y), (s * _BOX_X, -_BOX_Y)),
            ((s * _BOX_X, -_BOX_Y), (s * _BOX_X, _BOX_Y)),
            ((s * _BOX_X, _BOX_Y), (s, _BOX_Y)),
            ((s, -_GOAL_Y), (s * (1 + _GOAL_DEPTH), -_GOAL_Y)),
            ((s * (1 + _GOAL_DEPTH), -_GOAL_Y), (s * (1 + _GOAL_DEPTH), _GOAL_Y)),
            ((s * (1 + _GOAL_DEPTH), _GOAL_Y), (s, _GOAL_Y)),
        ]
    return np.asarray(segs, np.float32)


PITCH_SEGMENTS = _pitch_segments()  # [17, 2, 2]
CENTRE_CIRCLE_RADIUS = 0.17


def scale(size: int) -> float:
    """Pixels per world unit in a ``size`` frame."""
    return size / (2.0 * VIEW_HALF_WIDTH)


def world_to_pixel(xy, size: int = 224):
    """(row, col) float pixel coordinates of world points ``xy`` [..., 2] (pixel centres
    are at integers)."""
    xy = np.asarray(xy, np.float32)
    s = scale(size)
    return xy[..., 1] * s + size / 2 - 0.5, xy[..., 0] * s + size / 2 - 0.5


def _centres(size: int) -> jax.Array:
    """World coordinate of each pixel column's centre (x), the same for rows (y). [size]"""
    return (jnp.arange(size, dtype=jnp.float32) + 0.5 - size / 2) / scale(size)


def _grid(size: int) -> jax.Array:
    """World coordinates of every pixel centre. [size, size, 2] (x, y)"""
    centres = _centres(size)
    x, y = jnp.meshgrid(centres, centres)  # x varies along columns, y along rows
    return jnp.stack([x, y], -1)


def _segment_distance(xs: jax.Array, ys: jax.Array, a: jax.Array, b: jax.Array) -> jax.Array:
    """Distance of the pixel centres (columns at x = ``xs`` [W], rows at y = ``ys`` [H]) to
    segments a->b [S, 2]. -> [S, H, W]

    Per coordinate on [S, 1, W] and [S, H, 1] operands that broadcast, never a stacked
    [S, H, W, 2] difference: the same float operations in the same order per pixel, so
    the same bits, at a fraction of the cost on a CPU."""
    abx, aby = (b - a)[:, 0, None, None], (b - a)[:, 1, None, None]  # [S, 1, 1]
    apx = xs[None, None, :] - a[:, 0, None, None]  # [S, 1, W]
    apy = ys[None, :, None] - a[:, 1, None, None]  # [S, H, 1]
    t = (apx * abx + apy * aby) / jnp.maximum(abx**2 + aby**2, 1e-12)
    t = jnp.clip(t, 0.0, 1.0)
    return jnp.sqrt((apx - t * abx) ** 2 + (apy - t * aby) ** 2)


def _disc_distance(xs: jax.Array, ys: jax.Array, centres: jax.Array) -> jax.Array:
    """Distance of the pixel centres (as in ``_segment_distance``) to points ``centres``
    [P, 2]: dx^2 over columns plus dy^2 over rows, broadcast. -> [P, H, W]"""
    dx2 = (xs[None, :] - centres[:, 0, None]) ** 2  # [P, W]
    dy2 = (ys[None, :] - centres[:, 1, None]) ** 2  # [P, H]
    return jnp.sqrt(dx2[:, None, :] + dy2[:, :, None])


def hull_vertices(points: jax.Array) -> jax.Array:
    """Convex hull of ``points`` [P, 2] as a closed, padded vertex list [P + 1, 2].

    Gift wrapping in P fixed steps (as ``env.hull_area``): from the lowest-x point, each
    step moves to the candidate with no point strictly to its right (the farthest on
    ties); once back at the start it stays there, so the list ends in repeats of the start
    (zero-length edges). Vertex ``k`` to ``k + 1`` are the hull's edges, all turning the
    same way."""
    p_count = points.shape[0]
    start = jnp.argmin(points[:, 0] * 1e3 + points[:, 1])

    def step(carry, _):
        cur, closed = carry
        d = points - points[cur]  # [P, 2]
        cross = d[:, None, 0] * d[None, :, 1] - d[:, None, 1] * d[None, :, 0]  # [P, P]
        dist = (d**2).sum(-1)
        ok = ~(cross < -1e-9).any(-1) & (dist > 1e-12)
        nxt = jnp.argmax(jnp.where(ok, dist, -1.0))
        nxt = jnp.where(closed | ~ok.any(), cur, nxt)
        return (nxt, closed | (nxt == start)), nxt

    _, idx = jax.lax.scan(step, (start, jnp.zeros((), bool)), None, length=p_count)
    return points[jnp.concatenate([start[None], idx])]


def _inside_convex(xs: jax.Array, ys: jax.Array, verts: jax.Array) -> jax.Array:
    """Pixel centres (as in ``_segment_distance``) inside the closed convex polygon
    ``verts`` [V, 2] (zero-length edges allowed). -> [H, W] bool"""
    a, b = verts[:-1], verts[1:]  # [E, 2]
    e = b - a
    # orientation of the polygon (sign of its shoelace area); edges all turn this way
    orient = jnp.sign((a[:, 0] * b[:, 1] - b[:, 0] * a[:, 1]).sum())
    apx = xs[None, None, :] - a[:, 0, None, None]  # [E, 1, W]
    apy = ys[None, :, None] - a[:, 1, None, None]  # [E, H, 1]
    cross = e[:, 0, None, None] * apy - e[:, 1, None, None] * apx  # [E, H, W]
    return (orient != 0) & (cross * orient >= -1e-9).all(0)


def _formation_segments(team: jax.Array) -> tuple[jax.Array, jax.Array]:
    """Segments joining neighbours (in y) of each formation line of one team [11, 2].
    -> a, b [7, 2]"""
    a, b = [], []
    for line in FORMATION_LINES:  # consecutive players of a line, in order of y, joined
        pts = team[jnp.asarray(line)]  # [L, 2]
        pts = pts[jnp.argsort(pts[:, 1])]
        a.append(pts[:-1])
        b.append(pts[1:])
    return jnp.concatenate(a), jnp.concatenate(b)


def _paint(img: jax.Array, mask: jax.Array, colour, alpha=1.0) -> jax.Array:
    """Blend ``colour`` over ``img`` [H, W, 3] float where ``mask`` [H, W]."""
    c = jnp.asarray(colour, jnp.float32)
    return jnp.where(mask[..., None], (1.0 - alpha) * img + alpha * c, img)


def render(state, size: int = 224) -> jax.Array:
    """``[size, size, 3]`` uint8 top view of a ``FootballState`` (see the module doc)."""
    p = _grid(size)  # [H, W, 2]
    xs = ys = _centres(size)  # x of each column, y of each row
    px = 1.0 / scale(size)  # one pixel in world units
    pos = state.pos.astype(jnp.float32)  # [22, 2]
    teams = (pos[:11], pos[11:])

    on_view = jnp.abs(p[..., 1]) <= VIEW_HALF_HEIGHT
    img = jnp.where(on_view[..., None], jnp.asarray(GREEN, jnp.float32), 0.0)  # [H, W, 3]

    segs = jnp.asarray(PITCH_SEGMENTS)
    lw = jnp.maximum(LINE_HALF_WIDTH, 0.5 * px)
    on_line = (_segment_distance(xs, ys, segs[:, 0], segs[:, 1]) <= lw).any(0)
    r = jnp.sqrt((p**2).sum(-1))
    on_line |= jnp.abs(r - CENTRE_CIRCLE_RADIUS) <= lw
    on_line |= r <= 2.0 * lw  # centre spot
    img = _paint(img, on_line, WHITE)

    for team, colour in zip(teams, (LEFT_COLOUR, RIGHT_COLOUR), strict=True):
        inside = _inside_convex(xs, ys, hull_vertices(team[1:]))
        img = _paint(img, inside, colour, HULL_ALPHA)

    fw = jnp.maximum(FORMATION_HALF_WIDTH, 0.5 * px)
    for team, colour in zip(teams, (LEFT_LINE_COLOUR, RIGHT_LINE_COLOUR), strict=True):
        a, b = _formation_segments(team)
        img = _paint(img, (_segment_distance(xs, ys, a, b) <= fw).any(0), colour)

    pr = jnp.maximum(PLAYER_RADIUS, 0.5 * px)
    # one distance field per team: XLA would store a [22, H, W] field that two masks slice
    for team, colour in zip(teams, (LEFT_COLOUR, RIGHT_COLOUR), strict=True):
        img = _paint(img, (_disc_distance(xs, ys, team) <= pr).any(0), colour)

    br = jnp.maximum(BALL_RADIUS, 0.5 * px)
    d_ball = _disc_distance(xs, ys, state.ball.astype(jnp.float32)[None])[0]  # [H, W]
    img = _paint(img, d_ball <= br + BALL_RIM, BLACK)
    img = _paint(img, d_ball <= br, WHITE)
    return jnp.clip(jnp.round(img), 0, 255).astype(jnp.uint8)

"""GRF-like football: shots, passes, restarts, observations, rewards and the difficulty
knob, against hand-built states and short scripted matches."""

import functools

import jax
import jax.numpy as jnp
import numpy as np
import pytest

import envs
from envs.football import episode_stats, hull_area
from envs.football.env import (
    CORNER,
    GOAL_KICK,
    HIGH_PASS,
    IDLE,
    LONG_PASS,
    NORMAL,
    NUM_STATS,
    RELEASE_DIRECTION,
    RIGHT,
    S_ON_TARGET,
    S_PASSES,
    S_PASSES_DONE,
    S_SHOTS,
    SET_PIECE_WAIT,
    SHORT_PASS,
    SHOT,
    SLIDING,
    SPRINT,
    THROW_IN,
)
from envs.football.scenarios import KICKOFF_LAYOUT, KICKOFF_PLAYER, RECEIVING_LAYOUT

ELEVEN = "football:11_vs_11_easy_stochastic"
HARD_SCENARIO = "11_vs_11_hard_stochastic"  # a scenario name, as Football takes it
FAR_RIGHT = jnp.stack([jnp.full(11, -0.9), jnp.linspace(-0.4, 0.4, 11)], -1)  # [11, 2]


@functools.cache
def _env(name=ELEVEN, **kwargs):
    env = envs.make(name, **kwargs)
    return env, jax.jit(env.step_env)


def _run(name, state, first_actions: dict, steps: int, key=0, **kwargs):
    """Step ``state`` with ``first_actions`` (player index -> action) once, then idle."""
    env, step = _env(name, **kwargs)
    states, rewards = [], []
    for t in range(steps):
        acts = {a: jnp.int32(IDLE) for a in env.agents}
        if t == 0:
            acts |= {f"player_{i}": jnp.int32(v) for i, v in first_actions.items()}
        _, state, r, d, info = step(jax.random.PRNGKey(key * 1000 + t), state, acts)
        states.append(state)
        rewards.append(float(r[env.agents[0]]))
    return states, rewards


def _open_play(env, left, owner, facing=(1.0, 0.0), right=FAR_RIGHT):
    """A reset state with the left team at ``left`` [11, 2], the right team far away and
    ``owner`` holding the ball."""
    _, s = env.reset(jax.random.PRNGKey(0))
    pos = jnp.concatenate([jnp.asarray(left, jnp.float32), right])
    face = s.facing.at[owner].set(jnp.asarray(facing))
    ball = pos[owner] + face[owner] * 0.012
    return s.replace(pos=pos, facing=face, ball=ball, prev_ball=ball, owner=jnp.int32(owner))


def _spread_left(x0=-0.6):
    """Left players spread out on a column far from the action. [11, 2]"""
    return np.stack([np.full(11, x0), np.linspace(-0.4, 0.4, 11)], -1).astype(np.float32)


def test_shot_from_the_penalty_spot_scores_on_an_empty_goal():
    env, _ = _env()
    left = _spread_left()
    left[9] = [0.88, 0.0]
    for key in range(3):
        s = _open_play(env, left, owner=9)
        states, rewards = _run(ELEVEN, s, {9: SHOT}, steps=5, key=key)
        scored = [int(x.score[0]) for x in states]
        assert scored[-1] == 1 and scored[0] == 0, scored  # the ball needs a step or two
        assert sum(rewards) == pytest.approx(1.0)
        st = states[-1].stats
        assert st[S_SHOTS] == 1 and st[S_ON_TARGET] == 1
        # kick-off by the conceding right team after the goal, from GRF's kick-off layout
        after = states[scored.index(1)]
        assert int(after.owner) == 11 + KICKOFF_PLAYER and int(after.game_mode) == NORMAL
        np.testing.assert_allclose(np.asarray(after.ball), 0.0, atol=0.02)
        np.testing.assert_allclose(np.asarray(after.pos[11:]), -KICKOFF_LAYOUT, atol=1e-6)


def test_a_long_shot_is_less_accurate_than_a_penalty():
    env, step = _env()
    left = _spread_left()
    acts = {a: jnp.int32(IDLE) for a in env.agents} | {"player_9": jnp.int32(SHOT)}

    def on_target(x):
        left[9] = [x, 0.0]
        s = _open_play(env, left, owner=9)
        hits = [step(jax.random.PRNGKey(k), s, acts)[1].stats[S_ON_TARGET] for k in range(30)]
        return float(np.mean(hits))

    assert on_target(0.88) > 0.9
    assert on_target(0.3) < 0.6


def test_short_pass_reaches_the_teammate_in_the_facing_direction():
    env, _ = _env()
    left = _spread_left()
    left[6] = [0.0, 0.0]
    left[7] = [0.2, 0.02]  # ahead of the passer
    left[5] = [-0.2, 0.0]  # behind it: not a candidate for a pass facing +x
    s = _open_play(env, left, owner=6)
    states, _ = _run(ELEVEN, s, {6: SHORT_PASS}, steps=15)
    owners = [int(x.owner) for x in states]
    assert owners[0] == -1  # the ball is in flight
    assert 7 in owners, owners
    assert states[-1].stats[S_PASSES] == 1 and states[-1].stats[S_PASSES_DONE] == 1
    # the same pass facing backwards goes to player 5
    s = _open_play(env, left, owner=6, facing=(-1.0, 0.0))
    states, _ = _run(ELEVEN, s, {6: SHORT_PASS}, steps=15)
    assert 5 in [int(x.owner) for x in states]


def test_pass_types_differ_in_speed_and_flight():
    env, step = _env()
    left = _spread_left()
    left[6] = [0.0, 0.0]
    left[7] = [0.6, 0.0]
    s = _open_play(env, left, owner=6)
    speeds, air = {}, {}
    for kind in (SHORT_PASS, LONG_PASS, HIGH_PASS):
        acts = {a: jnp.int32(IDLE) for a in env.agents} | {"player_6": jnp.int32(kind)}
        n = step(jax.random.PRNGKey(0), s, acts)[1]
        speeds[kind] = float(jnp.linalg.norm(n.ball_vel))
        air[kind] = int(n.ball_air)
    assert speeds[SHORT_PASS] < speeds[LONG_PASS]  # short passes reach at most 0.45
    assert air[HIGH_PASS] > 0 and air[LONG_PASS] == 0 and air[SHORT_PASS] == 0


def test_moves_are_sticky_and_sprint_is_faster():
    env, step = _env()
    _, s = env.reset(jax.random.PRNGKey(0))
    s = s.replace(owner=jnp.int32(-1), ball=jnp.array([0.0, 0.4]), prev_ball=jnp.array([0.0, 0.4]))
    idle = {a: jnp.int32(IDLE) for a in env.agents}
    x0 = float(s.pos[2, 0])
    s1 = step(jax.random.PRNGKey(0), s, idle | {"player_2": jnp.int32(RIGHT)})[1]
    s2 = step(jax.random.PRNGKey(1), s1, idle)[1]  # idle keeps the direction
    run = float(s2.pos[2, 0] - s1.pos[2, 0])
    assert float(s1.pos[2, 0]) > x0 and run > 0
    s3 = step(jax.random.PRNGKey(2), s2, idle | {"player_2": jnp.int32(SPRINT)})[1]
    assert float(s3.pos[2, 0] - s2.pos[2, 0]) > run * 1.2
    s4 = step(jax.random.PRNGKey(3), s3, idle | {"player_2": jnp.int32(RELEASE_DIRECTION)})[1]
    assert float(s4.pos[2, 0]) == float(s3.pos[2, 0])


def test_out_of_play_gives_a_throw_in_to_the_other_team():
    env, step = _env()
    _, s = env.reset(jax.random.PRNGKey(0))
    idle = {a: jnp.int32(IDLE) for a in env.agents}
    free = dict(owner=jnp.int32(-1), last_touch=jnp.int32(0), ball_air=jnp.int32(0))
    # over the side line, last touched by the left team
    s1 = s.replace(ball=jnp.array([0.3, 0.41]), ball_vel=jnp.array([0.0, 0.03]), **free)
    n = step(jax.random.PRNGKey(0), s1, idle)[1]
    assert int(n.game_mode) == THROW_IN and int(n.owner) >= 11
    assert abs(float(n.ball[1])) <= 0.42 and abs(float(n.ball[0] - 0.3)) < 0.02
    # over the right team's goal line: goal kick to its keeper; over the left's: corner
    s2 = s.replace(ball=jnp.array([0.99, 0.2]), ball_vel=jnp.array([0.03, 0.0]), **free)
    n = step(jax.random.PRNGKey(0), s2, idle)[1]
    assert int(n.game_mode) == GOAL_KICK and int(n.owner) == 11
    s3 = s2.replace(ball=jnp.array([-0.99, 0.2]), ball_vel=jnp.array([-0.03, 0.0]))
    n = step(jax.random.PRNGKey(0), s3, idle)[1]
    assert int(n.game_mode) == CORNER and int(n.owner) >= 11
    np.testing.assert_allclose(np.asarray(n.ball), [-0.99, 0.415], atol=1e-3)


def _rollout(env, steps, batch, policy):
    """Episodes of ``policy`` ('idle' or 'random'); returns final states and ball path."""

    def run(key):
        _, s = env.reset(key)

        def body(s, k):
            k1, k2 = jax.random.split(k)
            rand = jax.random.randint(k1, (env.num_agents,), 0, 19)
            acts = rand if policy == "random" else jnp.zeros_like(rand)
            _, s, _, _, _ = env.step_env(k2, s, {a: acts[i] for i, a in enumerate(env.agents)})
            return s, (s.ball, s.game_mode)

        return jax.lax.scan(body, s, jax.random.split(key, steps))

    return jax.jit(jax.vmap(run))(jax.random.split(jax.random.PRNGKey(1), batch))


def test_random_play_keeps_the_ball_on_the_pitch():
    env = envs.make(ELEVEN, max_steps=300)
    final, (ball, mode) = _rollout(env, 300, 8, "random")
    ball = np.asarray(ball)  # [B, T, 2]
    assert (np.abs(ball[..., 0]) <= 1.0).all() and (np.abs(ball[..., 1]) <= 0.42).all()
    assert np.isin(np.asarray(mode), [GOAL_KICK, CORNER, THROW_IN]).any()  # restarts happened
    stats = jax.vmap(episode_stats)(final)
    assert (np.asarray(stats["possession"]) <= 1).all() and np.asarray(stats["spread"]).min() > 0


def test_difficulty_makes_the_opponent_score_more():
    conceded = {}
    for level in ("easy", "hard"):
        env = envs.make(f"football:11_vs_11_{level}_stochastic", max_steps=300)
        final, _ = _rollout(env, 300, 8, "idle")
        conceded[level] = int(np.asarray(final.score[:, 1]).sum())
    assert conceded["hard"] > conceded["easy"] + 4, conceded


def test_simple115_layout():
    env, _ = _env()
    obs, s = env.reset(jax.random.PRNGKey(3))
    assert len(env.agents) == 11
    o = np.asarray(obs["player_4"])
    assert o.shape == (115,)
    np.testing.assert_allclose(o[:22], np.asarray(s.pos[:11]).ravel())
    np.testing.assert_allclose(o[44:66], np.asarray(s.pos[11:]).ravel())
    np.testing.assert_allclose(o[88:90], np.asarray(s.ball))
    kicking = int(s.owner) // 11  # the kick-off team, drawn at reset
    assert o[94:97].tolist() == [0, 1 - kicking, kicking]
    assert o[97:108].argmax() == 4 and o[97:108].sum() == 1
    assert o[108:].argmax() == 0 and o[108:].sum() == 1  # GRF's kick-off is in play at once
    keeper_scripted = envs.make(ELEVEN, scripted_keeper=True)
    assert keeper_scripted.agents[0] == "player_1" and len(keeper_scripted.agents) == 10
    aenv = envs.make_array_env(ELEVEN)
    assert aenv.world_state_dim == 107


def _grf_checkpoint_rewards(env, states, scoring):
    """GRF's ``CheckpointRewardWrapper.reward``, transcribed: per controlled player (its
    reward index), from each step's resulting state and scoring reward. [T, C]"""
    collected = [0] * len(env.agents)
    out = []
    for state, r in zip(states, scoring, strict=True):
        row = []
        for i, player in enumerate(env.controlled.tolist()):
            reward = r
            if r == 1:
                reward += 0.1 * (10 - collected[i])
                collected[i] = 10
            elif int(state.owner) == player:
                ball = np.asarray(state.ball, np.float64)
                d = ((ball[0] - 1) ** 2 + ball[1] ** 2) ** 0.5
                while collected[i] < 10:
                    if d > 0.99 - 0.8 / 9 * collected[i]:
                        break
                    reward += 0.1
                    collected[i] += 1
            row.append(reward)
        out.append(row)
    return np.array(out)


@pytest.mark.parametrize("name", [ELEVEN, "football:academy_counterattack_easy"])
def test_checkpoint_reward_follows_grf_per_controlled_player(name):
    """Random play of the controlled players, step by step against GRF's wrapper."""
    env, step = _env(name, rewards="scoring,checkpoints")
    rng = np.random.default_rng(0)
    paid = set()
    for episode in range(4):
        _, s = env.reset(jax.random.PRNGKey(episode))
        states, scoring, got = [], [], []
        for t in range(120):
            acts = {a: jnp.int32(rng.integers(0, 19)) for a in env.agents}
            _, s2, r, d, _ = step(jax.random.PRNGKey(100 * episode + t), s, acts)
            goals = np.asarray(s2.score) - np.asarray(s.score)
            states.append(s2)
            scoring.append(float(goals[0] - goals[1]))
            got.append([float(r[a]) for a in env.agents])
            s = s2
            if bool(d["__all__"]):
                break
        want = _grf_checkpoint_rewards(env, states, scoring)
        np.testing.assert_allclose(np.array(got), want, atol=1e-5)
        paid |= set(np.flatnonzero((want > 0).any(0)).tolist())
    assert paid  # some player was paid checkpoints


def test_checkpoint_reward_is_the_carriers_and_a_goal_pays_every_player_the_rest():
    name = ELEVEN
    env, step = _env(name, rewards="scoring,checkpoints")
    idle = {a: jnp.int32(IDLE) for a in env.agents}
    left = _spread_left()
    left[9] = [0.5, 0.0]
    s = _open_play(env, left, owner=9)
    _, s1, r, _, _ = step(jax.random.PRNGKey(0), s, idle)
    # ball at distance ~0.49 from (1, 0): thresholds 0.99 - 0.8 k / 9 >= d for k = 0..5,
    # paid to player 9, the carrier, alone
    assert float(r["player_9"]) == pytest.approx(0.6, abs=1e-5)
    assert all(float(r[a]) == 0.0 for a in env.agents if a != "player_9")
    np.testing.assert_array_equal(s1.checkpoints, np.eye(11, dtype=int)[9] * 6)
    # a goal from the penalty spot: the carrier gets its 10 zones less those collected,
    # every other controlled player all 10
    left[9] = [0.88, 0.0]
    s = _open_play(env, left, owner=9)
    total = np.zeros(11)
    for t in range(4):
        acts = idle | ({"player_9": jnp.int32(SHOT)} if t == 0 else {})
        _, s, r, _, _ = step(jax.random.PRNGKey(t), s, acts)
        total += [float(r[a]) for a in env.agents]
    assert int(s.score[0]) == 1
    np.testing.assert_array_equal(s.checkpoints, 10)
    np.testing.assert_allclose(total, 2.0, atol=1e-5)  # 1 for the goal + 10 x 0.1 each


def test_counterattack_start_is_the_scenario_files():
    """GRF's academy_counterattack_easy / _hard files (right team mirrored through the
    centre spot), slot by role; the four attackers are controlled, the LM on the ball."""
    left = {  # slot: the file's (x, y)
        0: (-1.0, 0.0), 1: (-0.672, -0.19576), 2: (-0.75, -0.06356), 3: (-0.75, 0.063559),
        4: (-0.672, 0.19576), 6: (-0.434, -0.10568), 7: (-0.434, 0.10568),
        10: (0.5, -0.3161), 5: (0.25, -0.1), 8: (0.25, 0.1), 9: (0.35, 0.316102),
    }  # fmt: skip
    right = {
        0: (-1.0, 0.0), 1: (0.128, -0.19576), 3: (-0.4, 0.063559), 4: (0.128, -0.19576),
        6: (0.365, -0.10568), 10: (0.282, 0.0), 7: (0.365, 0.10568), 5: (0.54, -0.3161),
        8: (0.51, 0.0), 9: (0.54, 0.316102),
    }  # fmt: skip
    for name, cb in (("easy", (0.4, -0.06356)), ("hard", (-0.4, -0.06356))):
        env = envs.make(f"football:academy_counterattack_{name}")
        assert env.agents == ["player_5", "player_8", "player_9", "player_10"]
        assert env.max_steps == 400 and env.difficulty == 0.6  # the files set none
        _, s = env.reset(jax.random.PRNGKey(7))
        want = np.zeros((22, 2), np.float32)
        for slot, xy in left.items():
            want[slot] = xy
        for slot, xy in (right | {2: cb}).items():
            want[11 + slot] = -np.asarray(xy)
        np.testing.assert_allclose(np.asarray(s.pos), want, atol=1e-6)
        np.testing.assert_allclose(np.asarray(s.ball), [0.26, -0.11])
        assert int(s.owner) == 5 and int(s.game_mode) == NORMAL
        # outfield defenders between the ball and the goal: one on easy, two on hard
        behind = (np.asarray(s.pos[12:, 0]) > 0.26).sum()
        assert behind == (1 if name == "easy" else 2)
    # the episode ends when the right team wins the ball
    easy, step = _env("football:academy_counterattack_easy")
    _, se = easy.reset(jax.random.PRNGKey(0))
    stolen = se.replace(owner=jnp.int32(12), ball=se.pos[12], prev_ball=se.pos[12])
    idle = {a: jnp.int32(IDLE) for a in easy.agents}
    assert bool(step(jax.random.PRNGKey(0), stolen, idle)[3]["__all__"])
    assert not bool(step(jax.random.PRNGKey(0), se, idle)[3]["__all__"])


def test_eleven_kick_off_team_is_drawn_at_reset_from_grfs_layouts():
    env, _ = _env()
    teams = []
    for k in range(16):
        _, s = env.reset(jax.random.PRNGKey(k))
        kicking = int(s.owner) // 11
        teams.append(kicking)
        assert int(s.owner) == 11 * kicking + KICKOFF_PLAYER
        layout = np.concatenate([KICKOFF_LAYOUT, -RECEIVING_LAYOUT])
        if kicking:
            layout = np.concatenate([RECEIVING_LAYOUT, -KICKOFF_LAYOUT])
        np.testing.assert_allclose(np.asarray(s.pos), layout, atol=0.0100001)
    assert 0 < sum(teams) < 16


def test_hull_area_and_stats_shape():
    square = jnp.array([[0, 0], [1, 0], [1, 1], [0, 1], [0.5, 0.5], [0.2, 0.7]], jnp.float32)
    assert float(hull_area(square)) == pytest.approx(1.0)
    tri = jnp.array([[0, 0], [2, 0], [0, 2], [0.5, 0.5], [1, 1], [0.1, 0.1]], jnp.float32)
    assert float(hull_area(tri)) == pytest.approx(2.0)
    env, _ = _env()
    _, s = env.reset(jax.random.PRNGKey(0))
    assert s.stats.shape == (NUM_STATS,)


def test_dribble_slows_the_carrier_and_sliding_wins_the_ball():
    env, step = _env()
    left = _spread_left()
    left[6] = [0.0, 0.0]
    s = _open_play(env, left, owner=6)
    idle = {a: jnp.int32(IDLE) for a in env.agents}
    moved = step(jax.random.PRNGKey(0), s, idle | {"player_6": jnp.int32(RIGHT)})[1]
    run = float(moved.pos[6, 0])
    dribbling = s.replace(dribble=s.dribble.at[6].set(True))
    slow = float(
        step(jax.random.PRNGKey(0), dribbling, idle | {"player_6": jnp.int32(RIGHT)})[1].pos[6, 0]
    )
    assert 0 < slow < run
    assert int(moved.owner) == 6  # the ball goes with the carrier
    # a right-team carrier 0.04 from left player 3: out of standing-tackle reach, so only
    # sliding can win the ball
    right = FAR_RIGHT.at[5].set(jnp.array([0.04, 0.0]))
    left[3] = [0.0, 0.0]
    carried = _open_play(env, left, owner=16, facing=(-1.0, 0.0), right=right)
    won = {}
    for act in (IDLE, SLIDING):
        acts = idle | {"player_3": jnp.int32(act)}
        won[act] = np.mean(
            [int(step(jax.random.PRNGKey(k), carried, acts)[1].owner) == 3 for k in range(20)]
        )
    assert won[IDLE] == 0 and won[SLIDING] > 0.3, won


def test_episode_stats_reach_the_array_env_at_the_end():
    aenv = envs.make_array_env(ELEVEN, max_steps=3)
    obs, state = aenv.reset(jax.random.PRNGKey(0))
    step = jax.jit(aenv.step)
    for t in range(3):
        res = step(jax.random.PRNGKey(t), state, jnp.zeros((aenv.num_agents,), jnp.int32))
        state = res.state
    assert bool(res.done)
    stats = episode_stats(res.terminal_env_state)
    assert float(res.terminal_env_state.stats[7]) == 3.0  # steps
    assert bool(stats["win"]) == bool(res.info["won"]) and bool(stats["draw"])
    # the registry's stats_fn puts the same statistics in the step info for the learners
    assert set(res.info["stats"]) == set(stats)
    np.testing.assert_allclose(res.info["stats"]["possession"], stats["possession"])


@functools.cache
def _behaviour():
    from tests.scripts import load_script

    return load_script("experiments/football_behaviour.py")


@pytest.mark.parametrize("level", ["easy", "hard"])
def test_a_team_holding_the_ball_still_loses_it_within_a_bounded_time(level):
    """The scripted opponents keep contesting the ball at every difficulty: an idle team
    with its CF on the ball loses it in every match, sooner on hard."""
    res = _behaviour().possession_loss(f"11_vs_11_{level}_stochastic", 32, 300, seed=0)
    assert res["lost_within_horizon"] == 1.0
    assert res["max_steps"] < 300
    assert res["median_steps"] < (40 if level == "easy" else 20)


def test_a_keeper_on_its_line_saves_some_close_shots_and_fewer_off_it():
    """On hard (how the save rate grows with difficulty: ``football_behaviour.py``)."""
    behaviour = _behaviour()
    res = behaviour.keeper_saves(HARD_SCENARIO, behaviour.KEEPER_SPOTS, 64, seed=0)
    on, off = res["on_line"], res["off_line"]
    assert 0.0 < on["saved"] < 1.0 and off["saved"] < on["saved"]
    assert on["saved"] + on["scored"] == pytest.approx(1.0)


def test_a_set_piece_lasts_until_the_taker_kicks():
    """A throw-in: the taker may not walk and nobody tackles it until it passes; after
    SET_PIECE_WAIT idle steps GRF's env passes for it."""
    env, step = _env()
    s = _open_play(env, _spread_left(), owner=9)
    ball = jnp.array([0.0, 0.40])  # rolling over the side line, the left team touched last
    s = s.replace(ball=ball, prev_ball=ball, ball_vel=jnp.array([0.0, 0.1]))
    s = s.replace(owner=jnp.int32(-1), last_touch=jnp.int32(0))
    idle = {a: jnp.int32(IDLE) for a in env.agents}
    _, s, *_ = step(jax.random.PRNGKey(0), s, idle)
    assert int(s.game_mode) == THROW_IN and int(s.owner) >= 11  # the right team throws in
    taker, spot = int(s.owner), np.asarray(s.pos[int(s.owner)])
    modes = []
    for t in range(SET_PIECE_WAIT + 3):
        _, s, *_ = step(jax.random.PRNGKey(t + 1), s, idle)
        modes.append(int(s.game_mode))
        if int(s.game_mode) == THROW_IN:
            assert int(s.owner) == taker
            np.testing.assert_allclose(np.asarray(s.pos[taker]), spot)
    # the scripted right taker passes at once; the mode ends with that kick
    assert modes[0] == 0 and int(s.owner) != taker


def test_a_controlled_set_piece_taker_is_made_to_pass_after_waiting():
    """Nobody tackles the waiting taker (a hard-difficulty opponent kept on the ball would
    win it within 20 steps with probability 0.91 in open play)."""
    name = "football:11_vs_11_hard_stochastic"
    env, step = _env(name)
    left = _spread_left()
    left[9] = [0.0, 0.41]
    s = _open_play(env, left, owner=9, facing=(1.0, 0.0))
    s = s.replace(game_mode=jnp.int32(THROW_IN), mode_steps=jnp.int32(0))
    idle = {a: jnp.int32(IDLE) for a in env.agents}
    for t in range(SET_PIECE_WAIT):
        s = s.replace(pos=s.pos.at[12].set(s.ball))
        _, s, *_ = step(jax.random.PRNGKey(t), s, idle)
        assert int(s.game_mode) == THROW_IN and int(s.owner) == 9
    _, s, *_ = step(jax.random.PRNGKey(99), s, idle)
    assert int(s.game_mode) == 0 and int(s.owner) != 9 and int(s.stats[S_PASSES]) == 1

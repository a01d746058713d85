"""The LCA grid worlds (``two_switch``, ``victim_rubble``) and their shared core.

Conformance (shapes, auto-reset, determinism) is ``test_conformance.py``; here: task
rules, rewards, the credit-assignment protocol (heuristics, features, rendering, text)
and a scripted BFS policy that solves both tasks.
"""

import functools

import chex
import jax
import jax.numpy as jnp
import numpy as np
import pytest

import envs
from envs.capabilities import RankingHeuristic, StateDescriber
from envs.gridworld import (
    DIRECTIONS,
    DOWN,
    INTERACT,
    LEFT,
    RIGHT,
    STAY,
    UNREACHABLE,
    UP,
    distance_table,
    flood_fill,
    parse_layout,
)
from envs.victim_rubble import LONG_CORRIDOR_LAYOUT

NAMES = ("two_switch", "victim_rubble")
OPTIMAL_EVENTS = {"two_switch": 5.0, "victim_rubble": 7.0}


@functools.cache
def env_of(name, **kwargs):
    return envs.make(name, **kwargs)


@functools.cache
def stepper(name):
    """jit((state, actions[N]) -> (next, team reward[N], done, individual[N], phi[N]))."""
    env = env_of(name)

    def step(state, actions):
        _, nxt, rew, dones, _ = env.step_env(
            jax.random.PRNGKey(0), state, {a: actions[i] for i, a in enumerate(env.agents)}
        )
        team = jnp.stack([rew[a] for a in env.agents])
        ind = env.individual_reward(state, actions, nxt)
        return nxt, team, dones["__all__"], ind, env.heuristic_potential(nxt)

    return jax.jit(step)


@functools.cache
def potential(name):
    return jax.jit(env_of(name).heuristic_potential)


@functools.cache
def random_states(name):
    """512 random states (one compiled batch per env, shared by several tests)."""
    keys = jax.random.split(jax.random.PRNGKey(5), 512)
    return jax.jit(jax.vmap(env_of(name).random_state))(keys)


def first(states, i=0):
    return jax.tree.map(lambda x: x[i], states)


@functools.cache
def renderer(name):
    return jax.jit(env_of(name).render)


@functools.cache
def features(name):
    env = env_of(name)
    return jax.jit(lambda s: (env.agent_features(s), env._obs(s)))


def state(env, agents, flags=(), step=0):
    """State with agents ``[((x, y), facing name), ...]`` and the named flags set."""
    pos = [env.cell(x, y) for (x, y), _ in agents]
    facing = [DIRECTIONS.index(d) for _, d in agents]
    names = [o.name for o in env.objects]
    f = np.zeros(env.num_flags, bool)
    for n in flags:
        f[names.index(n)] = True
    return env.make_state(pos, facing, f, step)


def do(name, s, a0, a1):
    nxt, team, done, ind, phi = stepper(name)(s, jnp.array([a0, a1], jnp.int32))
    return nxt, np.asarray(team), bool(done), np.asarray(ind), np.asarray(phi)


def flag(env, s, obj_name):
    return bool(s.flags[[o.name for o in env.objects].index(obj_name)])


def xy(env, s, i):
    return env.xy(int(s.pos[i]))


# ----- registry and protocol ------------------------------------------------------------------
def test_registered_with_protocol():
    ts, vr = env_of("two_switch"), env_of("victim_rubble")
    for env in (ts, vr):
        assert envs.capability(env, RankingHeuristic) is env
        assert envs.capability(env, StateDescriber) is env
        assert env.noop_action == STAY == 0
        assert env.num_agents == 2
    assert ts.roles == ("agent", "agent") and vr.roles == ("green", "orange")
    assert ts.max_steps == 50 and vr.max_steps == 80
    assert envs.make("two_switch", max_steps=8).max_steps == 8
    assert envs.make_array_env("two_switch").num_groups == 1
    assert envs.make_array_env("victim_rubble").agent_groups.tolist() == [0, 1]
    assert envs.spec("two_switch").won_fn is not None
    # per agent: one-hot cell, facing, x, y, (dx, dy) to each object and the arrival cell
    assert ts.obs_dim == 2 * (81 + 6 + 2 * 4) + 4 + 1
    assert vr.obs_dim == 2 * (98 + 6 + 2 * 6) + 6 + 2 + 1  # the paper's 14 x 7 map


def test_distance_table_counts_turns():
    grid = parse_layout("#####\n#..T#\n#####")
    free = (grid == ".").reshape(1, -1)
    d = distance_table(free, [(8, "face"), (6, "stand")], grid.shape[1])
    right, left = DIRECTIONS.index("right"), DIRECTIONS.index("left")
    assert d[0, 0, 7, right] == 0  # next to T, facing it
    assert d[0, 0, 7, left] == 1  # one (blocked) move right turns it
    assert d[0, 0, 6, left] == 1  # moving right arrives facing T
    assert d[1, 0, 7, right] == 1 and d[1, 0, 6, 0] == 0
    assert d[0, 0, 0, 0] == UNREACHABLE  # a wall cell


# ----- scripted policy -----------------------------------------------------------------------
@functools.cache
def scripted_episodes(name, num, **env_kwargs):
    env = env_of(name, **env_kwargs)

    def episode(key):
        _, s = env.reset(key)

        def body(carry, _):
            s, ret, length, done = carry
            a = env.greedy_actions(s)
            _, nxt, rew, dones, _ = env.step_env(
                key, s, {ag: a[i] for i, ag in enumerate(env.agents)}
            )
            r = jnp.stack([rew[ag] for ag in env.agents])
            ret = ret + jnp.where(done, 0.0, r)
            length = length + jnp.where(done, 0, 1)
            s = jax.tree.map(lambda x, y: jnp.where(done, x, y), s, nxt)
            return (s, ret, length, done | dones["__all__"]), None

        init = (s, jnp.zeros(2), jnp.zeros((), jnp.int32), jnp.zeros((), bool))
        (s, ret, length, _), _ = jax.lax.scan(body, init, None, env.max_steps)
        return ret, length, env.won(s)

    keys = jax.random.split(jax.random.PRNGKey(7), num)
    return jax.tree.map(np.asarray, jax.jit(jax.vmap(episode))(keys))


@pytest.mark.parametrize("name,max_len", [("two_switch", 20), ("victim_rubble", 42)])
def test_scripted_policy_solves_task_with_optimal_return(name, max_len):
    env = env_of(name)
    ret, length, won = scripted_episodes(name, 128)
    assert won.all()
    assert length.max() <= max_len and length.min() >= 8
    np.testing.assert_allclose(ret[:, 0], ret[:, 1])
    expected = OPTIMAL_EVENTS[name] - length / env.max_steps
    np.testing.assert_allclose(ret[:, 0], expected, atol=1e-5)


def test_paper_rewards_drop_the_door_and_pay_the_penalty_per_step():
    env = env_of("two_switch", paper_rewards=True)
    ret, length, won = scripted_episodes("two_switch", 64, paper_rewards=True)
    assert won.all()
    np.testing.assert_allclose(ret[:, 0], 4.0 - length / env.max_steps, atol=1e-5)
    # the step that opens the door pays only for the switch; every step pays -1/50
    s = state(env, [((4, 4), "down"), ((7, 2), "right")], flags=["Switch1"])
    step = jax.jit(
        lambda s, a: env.step_env(
            jax.random.PRNGKey(0), s, {ag: a[i] for i, ag in enumerate(env.agents)}
        )
    )
    _, s1, rew, _, _ = step(s, jnp.array([DOWN, INTERACT]))
    assert flag(env, s1, "Door") and float(rew["agent_0"]) == pytest.approx(1.0 - 1 / 50)
    _, _, rew, _, _ = step(s1, jnp.array([STAY, STAY]))
    assert float(rew["agent_0"]) == pytest.approx(-1 / 50)
    # the default env pays the door and the penalty only at the end
    assert float(do("two_switch", s, DOWN, INTERACT)[1][0]) == 2.0


@pytest.mark.parametrize("name", NAMES)
def test_individual_return_stat_sums_the_individual_rewards(name):
    """The logged ``stat_individual_return`` equals the episode's summed
    ``individual_reward`` (mean over agents), on epsilon-scripted play."""
    arr = envs.make_array_env(name)
    raw = arr.env
    num_envs = 16

    def step(carry, k):
        state, acc = carry
        k_act, k_eps, k_env = jax.random.split(k, 3)
        avail = jax.vmap(arr.avail_actions)(state)
        rand = jax.vmap(arr.random_actions)(jax.random.split(k_act, num_envs), avail)
        greedy = jax.vmap(raw.greedy_actions)(state.env_state).astype(rand.dtype)
        acts = jnp.where(jax.random.uniform(k_eps, rand.shape) < 0.3, rand, greedy)
        res = jax.vmap(arr.step)(jax.random.split(k_env, num_envs), state, acts)
        ind = jax.vmap(raw.individual_reward)(state.env_state, acts, res.terminal_env_state)
        total = acc + ind.mean(-1)
        out = (res.done, total, res.info["stats"]["individual_return"])
        return (res.state, jnp.where(res.done, 0.0, total)), out

    _, state = jax.vmap(arr.reset)(jax.random.split(jax.random.PRNGKey(0), num_envs))
    init = (state, jnp.zeros(num_envs))
    keys = jax.random.split(jax.random.PRNGKey(1), 2 * raw.max_steps)
    _, (done, total, stat) = jax.jit(lambda c: jax.lax.scan(step, c, keys))(init)
    done = np.asarray(done)
    assert done.sum() >= num_envs
    np.testing.assert_allclose(np.asarray(stat)[done], np.asarray(total)[done])
    assert np.asarray(total)[done].max() >= 1.0  # episodes that earned something


def test_timeout_pays_minus_one():
    env = env_of("two_switch")
    s = state(env, [((2, 2), "up"), ((5, 3), "up")], step=48)
    s1, team, done, *_ = do("two_switch", s, STAY, STAY)
    assert not done and team.tolist() == [0.0, 0.0]
    s2, team, done, *_ = do("two_switch", s1, RIGHT, STAY)
    assert done and not bool(env.won(s2)) and int(s2.step) == 50
    assert team.tolist() == pytest.approx([-1.0, -1.0])


# ----- Two-Switch rules ----------------------------------------------------------------------
def test_switch_needs_facing_and_interact():
    env = env_of("two_switch")
    s = state(env, [((1, 2), "up"), ((6, 3), "up")])
    s1, team, done, ind, _ = do("two_switch", s, INTERACT, STAY)  # not facing it
    assert not flag(env, s1, "Switch1") and team.tolist() == [0, 0]
    s2, *_ = do("two_switch", s1, LEFT, STAY)  # blocked move: turns to face it
    assert xy(env, s2, 0) == (1, 2) and int(s2.facing[0]) == DIRECTIONS.index("left")
    assert not flag(env, s2, "Switch1")
    s3, team, done, ind, _ = do("two_switch", s2, INTERACT, STAY)
    assert flag(env, s3, "Switch1") and not flag(env, s3, "Door")
    assert team.tolist() == [1.0, 1.0] and ind.tolist() == [1.0, 0.0] and not done
    s4, team, *_ = do("two_switch", s3, INTERACT, STAY)  # already on: nothing more
    assert team.tolist() == [0, 0]
    # facing it from two cells away does nothing
    far = state(env, [((2, 2), "left"), ((6, 3), "up")])
    assert not flag(env, do("two_switch", far, INTERACT, STAY)[0], "Switch1")


def test_door_blocks_until_both_switches_on():
    env = env_of("two_switch")
    s = state(env, [((4, 4), "down"), ((7, 2), "right")], flags=["Switch1"])
    s1, team, *_ = do("two_switch", s, DOWN, STAY)
    assert xy(env, s1, 0) == (4, 4) and team.tolist() == [0, 0]
    # agent 1 turns Switch2 on; the door opens at the end of that step (agent 0 acted first)
    s2, team, done, ind, _ = do("two_switch", s1, DOWN, INTERACT)
    assert xy(env, s2, 0) == (4, 4)
    assert flag(env, s2, "Switch2") and flag(env, s2, "Door")
    assert team.tolist() == [2.0, 2.0] and ind.tolist() == [0.0, 1.0] and not done
    s3, *_ = do("two_switch", s2, DOWN, STAY)
    assert xy(env, s3, 0) == (4, 5)


def test_goal_completes_task_and_credits_arriver():
    env = env_of("two_switch")
    flags = ["Switch1", "Switch2", "Door"]
    s = state(env, [((3, 2), "up"), ((7, 6), "down")], flags=flags, step=19)
    s1, team, done, ind, phi = do("two_switch", s, STAY, DOWN)
    assert done and bool(env.won(s1))
    assert team.tolist() == pytest.approx([2 - 20 / 50] * 2)
    assert ind.tolist() == [0.0, 1.0]


def test_agents_block_each_other_in_index_order():
    env = env_of("two_switch")
    s = state(env, [((2, 2), "right"), ((3, 2), "left")])
    s1, *_ = do("two_switch", s, RIGHT, LEFT)  # head-on: neither moves, both turn
    assert (xy(env, s1, 0), xy(env, s1, 1)) == ((2, 2), (3, 2))
    s2, *_ = do("two_switch", s, LEFT, LEFT)  # agent 0 moves first, agent 1 follows
    assert (xy(env, s2, 0), xy(env, s2, 1)) == ((1, 2), (2, 2))
    s3, *_ = do("two_switch", s, RIGHT, RIGHT)  # agent 1 has not moved yet when 0 acts
    assert (xy(env, s3, 0), xy(env, s3, 1)) == ((2, 2), (4, 2))


def test_both_switches_in_one_step_pay_each_trigger():
    env = env_of("two_switch")
    s = state(env, [((1, 2), "left"), ((7, 2), "right")])
    s1, team, done, ind, _ = do("two_switch", s, INTERACT, INTERACT)
    assert flag(env, s1, "Door") and not done
    assert team.tolist() == [3.0, 3.0] and ind.tolist() == [1.0, 1.0]  # 2 switches + door


# ----- Victim-Rubble rules -------------------------------------------------------------------
def test_roles_rubble_and_victims():
    env = env_of("victim_rubble")
    vr = "victim_rubble"
    # green cannot remove rubble, orange can
    s = state(env, [((7, 1), "right"), ((5, 3), "up")])
    s1, team, *_ = do(vr, s, INTERACT, STAY)
    assert not flag(env, s1, "Rubble1") and team.tolist() == [0, 0]
    s = state(env, [((5, 3), "up"), ((7, 1), "right")])
    s1, team, done, ind, _ = do(vr, s, STAY, INTERACT)
    assert flag(env, s1, "Rubble1") and team.tolist() == [1, 1] and ind.tolist() == [0, 1]
    # rubble blocks, removed rubble does not
    s2, *_ = do(vr, s, STAY, RIGHT)
    assert xy(env, s2, 1) == (7, 1)
    s3, *_ = do(vr, s1, STAY, RIGHT)
    assert xy(env, s3, 1) == (8, 1)
    # orange cannot heal, green can; victims block either way
    s = state(env, [((5, 3), "up"), ((2, 1), "left")])
    s1, team, *_ = do(vr, s, STAY, INTERACT)
    assert not flag(env, s1, "Victim1") and team.tolist() == [0, 0]
    s = state(env, [((2, 1), "left"), ((5, 3), "up")])
    s1, team, done, ind, _ = do(vr, s, INTERACT, STAY)
    assert flag(env, s1, "Victim1") and team.tolist() == [1, 1] and ind.tolist() == [1, 0]
    s2, *_ = do(vr, s1, LEFT, STAY)
    assert xy(env, s2, 0) == (2, 1)


def test_home_counts_only_after_all_tasks():
    env = env_of("victim_rubble")
    vr = "victim_rubble"
    s = state(env, [((4, 4), "down"), ((6, 3), "up")], flags=["Victim1", "Rubble3"])
    s1, team, done, *_ = do(vr, s, DOWN, STAY)
    assert xy(env, s1, 0) == (4, 5) and not done and team.tolist() == [0, 0]
    everything = ["Victim1", "Victim2", "Rubble1", "Rubble2"]
    s = state(env, [((4, 4), "down"), ((6, 3), "up")], flags=everything, step=29)
    s1, team, done, ind, _ = do(vr, s, DOWN, INTERACT)  # last rubble and home in one step
    assert done and bool(env.won(s1))
    assert team.tolist() == pytest.approx([1 + 1 + 1 - 30 / 80] * 2)
    assert ind.tolist() == [1.0, 1.0]  # green arrived, orange removed Rubble3


# ----- heuristic potentials ------------------------------------------------------------------
def test_two_switch_potential_follows_assignment():
    env = env_of("two_switch")
    ts = "two_switch"
    s = state(env, [((3, 3), "up"), ((5, 3), "up")])  # agent 0 nearer Switch1
    phi = np.asarray(potential(ts)(s))
    assert do(ts, s, LEFT, STAY)[4][0] > phi[0]  # toward its switch
    assert do(ts, s, STAY, RIGHT)[4][1] > phi[1]
    assert do(ts, s, DOWN, STAY)[4][0] < phi[0]  # away
    assert do(ts, s, STAY, LEFT)[4][1] < phi[1]  # toward the teammate's switch
    # symmetric start: agent 0 takes Switch1 (ties by index)
    s = state(env, [((4, 1), "down"), ((4, 3), "down")])
    phi = np.asarray(potential(ts)(s))
    assert do(ts, s, LEFT, STAY)[4][0] > phi[0]
    # triggering its switch is worth far more than a step
    s = state(env, [((1, 2), "left"), ((6, 4), "up")])
    phi = np.asarray(potential(ts)(s))
    assert do(ts, s, INTERACT, STAY)[4][0] > phi[0] + 10
    # one switch on: the closer agent goes for the other, the other to the door
    s = state(env, [((2, 2), "up"), ((6, 2), "up")], flags=["Switch1"])
    phi = np.asarray(potential(ts)(s))
    assert do(ts, s, STAY, RIGHT)[4][1] > phi[1]
    assert do(ts, s, DOWN, STAY)[4][0] > phi[0] and do(ts, s, UP, STAY)[4][0] < phi[0]


def test_victim_rubble_potential_follows_priorities():
    env = env_of("victim_rubble")
    vr = "victim_rubble"
    # orange: Rubble1 first (up and round Rubble3 to the doorway at (7, 1))
    s = state(env, [((1, 2), "up"), ((5, 3), "up")])
    phi = np.asarray(potential(vr)(s))
    assert do(vr, s, STAY, UP)[4][1] > phi[1] and do(vr, s, STAY, LEFT)[4][1] < phi[1]
    s = state(env, [((1, 2), "up"), ((7, 1), "right")])
    phi = np.asarray(potential(vr)(s))
    assert do(vr, s, STAY, INTERACT)[4][1] > phi[1] + 10
    # green: the accessible victim first; moving around while only the blocked one is left
    # is neutral; healing raises green's potential
    s = state(env, [((3, 1), "left"), ((5, 3), "up")])
    phi = np.asarray(potential(vr)(s))
    assert do(vr, s, LEFT, STAY)[4][0] > phi[0] and do(vr, s, RIGHT, STAY)[4][0] < phi[0]
    s = state(env, [((2, 1), "left"), ((5, 3), "up")])
    phi = np.asarray(potential(vr)(s))
    assert do(vr, s, INTERACT, STAY)[4][0] > phi[0] + 10
    s = state(env, [((5, 2), "up"), ((1, 4), "up")], flags=["Victim1"])
    phi = np.asarray(potential(vr)(s))
    for a in (UP, DOWN, LEFT, RIGHT):
        assert do(vr, s, a, STAY)[4][0] == phi[0]
    # once the path is clear, approaching the victim in Chamber4 pays
    s = state(env, [((6, 1), "up"), ((1, 4), "up")], flags=["Victim1", "Rubble1", "Rubble2"])
    phi = np.asarray(potential(vr)(s))
    assert do(vr, s, RIGHT, STAY)[4][0] > phi[0] and do(vr, s, LEFT, STAY)[4][0] < phi[0]


@pytest.mark.parametrize("name", NAMES)
def test_potential_rises_with_progress_on_random_states(name):
    """Every single-agent action that approaches the agent's current target (other than
    Two-Switch's waiting cell) or activates one of its objects raises its potential."""
    env = env_of(name)

    cases = jnp.array([(i, a) for i in range(2) for a in range(6)], jnp.int32)

    def check(key, case):
        s = env.random_state(key)
        i, a = case[0], case[1]
        tid = env._policy_targets(s)[0][i]
        cfg = env._config_index(s.flags)
        acts = jnp.zeros(2, jnp.int32).at[i].set(a)
        n = env.transition(s, acts)
        dist = jnp.asarray(env.dist)
        d_old = dist[tid, cfg, s.pos[i], s.facing[i]]
        d_new = dist[tid, cfg, n.pos[i], n.facing[i]]
        gain = env.heuristic_potential(n)[i] - env.heuristic_potential(s)[i]
        own = env.individual_reward(s, acts, n)[i] > 0
        closer = (d_new < d_old) & (d_old < UNREACHABLE)
        if name == "two_switch":
            closer = closer & (tid != 2)  # T_WAIT
        return jnp.where(closer | own, gain > 0, True)

    check = jax.vmap(jax.vmap(check, (None, 0)), (0, None))
    ok = jax.jit(check)(jax.random.split(jax.random.PRNGKey(3), 512), cases)
    assert bool(jnp.all(ok))


# ----- features, rendering, text ----------------------------------------------------------------
@pytest.mark.parametrize("name", NAMES)
def test_agent_features_ego_first(name):
    env = env_of(name)
    s = first(random_states(name), 11)
    f, obs = map(np.asarray, features(name)(s))
    chex.assert_shape(f, (2, env.obs_dim - 1))
    np.testing.assert_array_equal(obs[:, :-1], f)
    np.testing.assert_allclose(obs[:, -1], int(s.step) / env.max_steps)
    hw, block = env.num_cells, env.agent_block
    assert f[0, int(s.pos[0])] == 1 and f[0, block + int(s.pos[1])] == 1
    assert f[1, int(s.pos[1])] == 1 and f[1, block + int(s.pos[0])] == 1
    assert f[0, :hw].sum() == 1 and f[0, block : block + hw].sum() == 1
    x0, y0 = env.xy(int(s.pos[0]))
    np.testing.assert_allclose(f[0, hw + 4 : hw + 6], [x0 / (env.width - 1), y0 / (env.height - 1)])
    np.testing.assert_allclose(f[1, block + hw + 4 : block + hw + 6], f[0, hw + 4 : hw + 6])
    # offsets to the landmarks (objects, then the arrival cell), zero for finished objects
    cells = [*env.obj_cell.tolist(), env.arrival_cell]
    pending = [*(~np.asarray(s.flags[: env.num_objects])).tolist(), True]
    expect = [
        [(lx - x0) / (env.width - 1), (ly - y0) / (env.height - 1)] if todo else [0.0, 0.0]
        for (lx, ly), todo in zip(map(env.xy, cells), pending, strict=True)
    ]
    np.testing.assert_allclose(f[0, hw + 6 : block].reshape(-1, 2), expect, atol=1e-6)
    assert np.asarray(s.flags[: env.num_objects]).any() or name == "two_switch"
    swapped = np.asarray(features(name)(s.replace(pos=s.pos[::-1], facing=s.facing[::-1]))[0])
    n_role = 2 if name == "victim_rubble" else 0
    body = slice(0, f.shape[1] - n_role)
    np.testing.assert_array_equal(swapped[0, body], f[1, body])
    np.testing.assert_array_equal(swapped[1, body], f[0, body])
    if n_role:
        np.testing.assert_array_equal(f[:, -2:], np.eye(2))
        np.testing.assert_array_equal(swapped[:, -2:], np.eye(2))


@pytest.mark.parametrize("name", NAMES)
def test_render(name):
    env = env_of(name)
    states = jax.tree.map(lambda x: x[:4], random_states(name))
    imgs = jax.vmap(renderer(name))(states)
    c = env.cell_px
    chex.assert_shape(imgs, (4, env.height * c, env.width * c, 3))
    assert imgs.dtype == jnp.uint8
    s0 = first(states)
    img = np.asarray(renderer(name)(s0))
    np.testing.assert_array_equal(img, np.asarray(imgs[0]))
    free = np.nonzero(env.free_cells(np.asarray(s0.flags[:-1])))[0]
    other = next(int(p) for p in free if p not in np.asarray(s0.pos).tolist())
    moved = np.asarray(renderer(name)(s0.replace(pos=s0.pos.at[0].set(other))))
    assert not np.array_equal(img, moved)
    turned = np.asarray(renderer(name)(s0.replace(facing=(s0.facing + 1) % 4)))
    assert not np.array_equal(img, turned)
    toggled = np.asarray(renderer(name)(s0.replace(flags=s0.flags.at[2].set(~s0.flags[2]))))
    assert not np.array_equal(img, toggled)  # door open/closed, rubble there or not
    y, x = divmod(int(s0.pos[0]), env.width)
    patch = img[y * c : (y + 1) * c, x * c : (x + 1) * c].reshape(-1, 3)
    assert (patch == (40, 200, 40)).all(-1).any()  # agent 0 is green


def test_two_switch_text():
    env = env_of("two_switch")
    s = state(env, [((2, 3), "left"), ((6, 1), "up")], flags=["Switch2"], step=4)
    d = env.describe(s, 0)
    assert "ego" in d and "teammate" in d
    assert "You are the ego agent at (2, 3) in the upper room, facing left" in d
    assert "teammate is at (6, 1)" in d
    assert "Switch1 at (0, 2)" in d and "is off" in d and "Switch2 at (8, 2)" in d
    assert "is on" in d and "closed" in d and "(7, 7)" in d and "step 4 of 50" in d
    assert "You are the ego agent at (6, 1)" in env.describe(s, 1)
    ctx = env.prompt_context(s, 1)
    assert set(ctx) == {"task_description", "team_target", "key_steps", "dependency", "ego_role"}
    assert '"teammate"' in ctx["dependency"] and '"ego"' in ctx["dependency"]
    assert "(6,1)" in ctx["ego_role"]


def test_victim_rubble_text():
    env = env_of("victim_rubble")
    # the paper's prompt (sec. 4.2.2): Rubble1 at (8,1), Rubble2 at (9,2), orange at (4,3)
    s = state(env, [((2, 2), "up"), ((4, 3), "right")], flags=["Rubble1"])
    d = env.describe(s, 1)
    assert "ego agent (the orange agent" in d and "at Chamber3 (4, 3), facing right" in d
    assert "teammate (the green agent" in d and "Chamber1 (2, 2)" in d
    assert "Rubble1 at Chamber5 (8, 1): removed" in d
    assert "Victim2 at Chamber4 (12, 2): not healed yet" in d
    ctx = env.prompt_context(s, 1)
    assert ctx["ego_role"] == "the orange agent at Chamber3 (4,3)"
    dep = ctx["dependency"]
    assert "The green agent always prioritizes rescuing victims whose path is free" in dep
    assert "Rubble2: Chamber5 (9,2), **blocking the only passage** reaching Chamber4" in dep
    assert "Rubble1:" not in dep  # removed: no longer a constraint
    s = state(env, [((2, 2), "up"), ((4, 3), "right")])
    dep = env.prompt_context(s, 0)["dependency"]
    assert "Rubble1: Chamber5 (8,1), **blocking the only passage** between Chamber5" in dep
    assert env.prompt_context(s, 0)["ego_role"] == "the green agent at Chamber1 (2,2)"
    # the reconstructed map keeps its own coordinates
    long = env_of("victim_rubble", layout="long_corridor")
    s = state(long, [((2, 2), "up"), ((5, 3), "right")])
    assert "Victim2 at Chamber4 (9, 1)" in long.describe(s, 1)
    assert "Rubble2: Chamber5 (9,4)" in long.prompt_context(s, 0)["dependency"]


def test_victim_rubble_layouts():
    paper, long = env_of("victim_rubble"), env_of("victim_rubble", layout="long_corridor")
    assert paper.layout == "paper" and (paper.width, paper.height) == (14, 7)
    assert long.layout == "long_corridor" and (long.width, long.height) == (11, 9)
    for env in (paper, long):
        names = [o.name for o in env.objects]
        for rubble in ("Rubble1", "Rubble2"):  # each blocks the only way to Victim2
            k = names.index(rubble)
            flags = np.ones(env.num_objects, bool)
            flags[names.index("Victim2")] = False
            open_ = env.free_cells(flags)
            flags[k] = False
            shut = env.free_cells(flags)
            victim2 = env.obj_cell[names.index("Victim2")]
            around = victim2 + env.delta
            home = env.arrival_cell
            assert flood_fill(open_, home, env.width)[around].any()
            assert not flood_fill(shut, home, env.width)[around].any()
    with pytest.raises(ValueError, match="unknown layout 'wide'"):
        envs.make("victim_rubble", layout="wide")
    with pytest.raises(ValueError, match="needs its room map"):
        envs.make("victim_rubble", layout=LONG_CORRIDOR_LAYOUT)


def test_waiting_agent_steps_out_of_the_way():
    """Green, done with the free victim and waiting for the path to the other, stands in
    Chamber1's doorway cell the orange agent needs: it steps aside, off orange's way."""
    env = env_of("victim_rubble")
    s = state(env, [((2, 1), "left"), ((2, 2), "up")], flags=["Victim1"])
    acts = np.asarray(env.greedy_actions(s))
    assert acts.tolist() == [RIGHT, UP]
    s = state(env, [((4, 1), "right"), ((3, 1), "right")], flags=["Victim1"])
    assert int(env.greedy_actions(s)[0]) == DOWN  # (4, 2): off the row orange walks


# ----- random and reset states ---------------------------------------------------------------
@pytest.mark.parametrize("name", NAMES)
def test_random_state_valid(name):
    env = env_of(name)
    states = random_states(name)
    _, reset_state = env.reset(jax.random.PRNGKey(0))
    avals = lambda t: jax.tree.map(lambda x: (x.shape, x.dtype, x.weak_type), t)
    one = first(states)
    assert avals(one) == avals(reset_state)
    pos, flags = np.asarray(states.pos), np.asarray(states.flags)
    step, facing = np.asarray(states.step), np.asarray(states.facing)
    assert (pos[:, 0] != pos[:, 1]).all()
    assert ((facing >= 0) & (facing < 4)).all()
    assert ((step >= 0) & (step < env.max_steps)).all() and len(np.unique(step)) > 10
    assert not flags[:, -1].any()
    for p, f in zip(pos, flags, strict=True):
        free = env.free_cells(f[:-1])
        assert free[p].all()
        # a Victim-Rubble agent may wait at home while work is left; never once all is done
        if name == "two_switch" or f[:-1].all():
            assert env.arrival_cell not in p
    if name == "two_switch":
        np.testing.assert_array_equal(flags[:, 2], flags[:, 0] & flags[:, 1])
        lower = pos // env.width > 5
        assert (~lower | flags[:, 2:3]).all() and lower.any()
    else:
        assert (~flags[:, 1] | (flags[:, 2] & flags[:, 3])).all()
        assert (pos == env.arrival_cell).any()
    assert len({tuple(f) for f in flags[:, :-1].tolist()}) >= (4 if name == "two_switch" else 10)
    # usable as a state: it steps and has potentials
    nxt, team, *_ = stepper(name)(one, jnp.zeros(2, jnp.int32))
    assert np.isfinite(np.asarray(team)).all()


@pytest.mark.parametrize("name", NAMES)
def test_reset_starts(name):
    env = env_of(name)
    keys = jax.random.split(jax.random.PRNGKey(1), 256)
    _, states = jax.jit(jax.vmap(env.reset))(keys)
    pos = np.asarray(states.pos)
    assert (pos[:, 0] != pos[:, 1]).all()
    assert not np.asarray(states.flags).any() and not np.asarray(states.step).any()
    assert len({tuple(p) for p in pos.tolist()}) > 100
    free = env.free_cells(np.zeros(env.num_objects, bool))
    assert free[pos].all()
    if name == "two_switch":
        assert (pos // env.width < 5).all()  # the upper room
    else:
        rooms = {env.room_of(p) for p in pos.reshape(-1)}
        assert rooms == {"Chamber1", "Chamber2", "Chamber3"}

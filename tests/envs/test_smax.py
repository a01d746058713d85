"""SMAX entries: maps, kwargs, win detection, groups, action masks, world state."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from conformance import rollout_harness
from jaxmarl.environments.smax import HeuristicEnemySMAX
from jaxmarl.environments.smax.smax_env import MAP_NAME_TO_SCENARIO

import envs
from envs.smax import smax_won
from envs.smax_unit_types import MARINE, STALKER, ZEALOT

# The map the conformance suite compiles; reusing its harness reuses its compilations.
MAP = "smax:2s3z"
SHORT = {"max_steps": 8}
STOP = 4  # SMAX ally actions: 0-3 move, 4 stop, 5 + j attack enemy j


@pytest.fixture(scope="module")
def aenv():
    return rollout_harness(MAP, 32, **SHORT).aenv


def _reset(aenv, seed=0):
    return aenv.reset(jax.random.PRNGKey(seed))


def _with_units(state, **fields):
    """ArrayEnv state with fields of the inner SMAX state replaced."""
    inner = state.env_state.state.replace(**fields)
    return state.replace(env_state=state.env_state.replace(state=inner))


def test_maps_registered():
    required = {
        "3m", "8m", "2s3z", "5m_vs_6m", "3s_vs_5z", "2m_vs_1z", "3s_vs_3z",
        "smacv2_5_units", "smacv2_10_units", "terran_5_vs_5", "protoss_5_vs_5", "zerg_5_vs_5",
    }  # fmt: skip
    names = set(envs.names())
    for m in required | set(MAP_NAME_TO_SCENARIO):
        assert f"smax:{m}" in names, m


def test_baseline_kwargs_and_overrides():
    env = envs.make("smax:3m")
    assert isinstance(env, HeuristicEnemySMAX)
    assert env.see_enemy_actions and env.walls_cause_death
    assert env.attack_mode == "closest"
    assert env.max_steps == 100 and env.num_allies == 3 and env.num_enemies == 3
    env = envs.make("smax:3m", max_steps=7, attack_mode="random")
    assert env.max_steps == 7 and env.attack_mode == "random"
    with pytest.raises(ValueError, match="bad kwargs"):
        envs.make("smax:3m", scenario=None)


@pytest.mark.parametrize(
    "name, allies, enemies",
    [
        ("smax:2m_vs_1z", [MARINE] * 2, [ZEALOT]),
        ("smax:3s_vs_3z", [STALKER] * 3, [ZEALOT] * 3),
    ],
)
def test_custom_maps_unit_types(name, allies, enemies):
    aenv = envs.make_array_env(name)
    env = aenv.env
    assert (env.num_allies, env.num_enemies) == (len(allies), len(enemies))
    assert aenv.agents == [f"ally_{i}" for i in range(len(allies))]
    assert aenv.num_actions == len(enemies) + 5
    _, state = jax.jit(aenv.reset)(jax.random.PRNGKey(0))
    inner = state.env_state.state
    np.testing.assert_array_equal(inner.unit_types, allies + enemies)
    np.testing.assert_allclose(inner.unit_health, env.unit_type_health[np.array(allies + enemies)])
    assert inner.unit_alive.all()


def test_smacv2_units_random_and_mirrored():
    aenv = envs.make_array_env("smax:smacv2_5_units")
    reset = jax.jit(jax.vmap(aenv.reset))
    _, state = reset(jax.random.split(jax.random.PRNGKey(0), 8))
    types = np.asarray(state.env_state.state.unit_types)  # [8, 10]
    assert len({tuple(t) for t in types[:, :5]}) > 1, "ally unit types do not vary over resets"
    np.testing.assert_array_equal(types[:, 5:], types[:, :5])  # enemies mirror the allies
    assert tuple(aenv.agent_groups) == (0,) * 5


@pytest.mark.parametrize(
    "name, groups",
    [
        ("smax:2s3z", (0, 0, 1, 1, 1)),
        ("smax:3s5z", (0, 0, 0, 1, 1, 1, 1, 1)),
        ("smax:3m", (0, 0, 0)),
        ("smax:6h_vs_8z", (0,) * 6),
        ("smax:2m_vs_1z", (0, 0)),
        ("smax:smacv2_10_units", (0,) * 10),
    ],
)
def test_groups(name, groups):
    s = envs.spec(name)
    assert s.groups_fn(envs.make(name)) == groups
    aenv = envs.make_array_env(name)
    assert tuple(aenv.agent_groups) == groups and aenv.num_groups == max(groups) + 1


def test_won_fn_on_constructed_states(aenv):
    _, state = _reset(aenv)
    n = aenv.env.num_allies
    alive = jnp.ones(2 * n, bool)
    cases = {
        "all alive": (alive, False),
        "enemies dead": (alive.at[n:].set(False), True),
        "one ally left, enemies dead": (alive.at[1:].set(False), True),
        "everyone dead (draw)": (jnp.zeros(2 * n, bool), False),
        "allies dead": (alive.at[:n].set(False), False),
    }
    for what, (units, won) in cases.items():
        s = _with_units(state, unit_alive=units)
        assert bool(smax_won(aenv.env, s.env_state)) == won, what
        assert bool(aenv.won(s.env_state)) == won, what


def test_win_through_array_env_step(aenv):
    _, state = _reset(aenv)
    n = aenv.env.num_allies
    inner = state.env_state.state
    state = _with_units(
        state,
        unit_health=inner.unit_health.at[n:].set(0.0),
        unit_alive=inner.unit_alive.at[n:].set(False),
    )
    r = aenv.step(jax.random.PRNGKey(1), state, jnp.full((n,), STOP, jnp.int32))
    assert bool(r.done) and bool(r.info["won"])
    assert bool(r.terminal_env_state.state.done)
    np.testing.assert_allclose(r.reward, 1.0)  # the win bonus; no damage dealt this step
    assert int(r.state.episode_length) == 0  # auto-reset
    assert r.state.env_state.state.unit_alive.all()


def test_timeout_is_not_a_win(aenv):
    _, state = _reset(aenv)
    n = aenv.env.num_allies
    # jaxmarl checks the limit before counting the step: the step at step == max_steps ends it.
    for step, done in ((SHORT["max_steps"] - 1, False), (SHORT["max_steps"], True)):
        s = _with_units(state, step=jnp.asarray(step, jnp.int32))
        r = aenv.step(jax.random.PRNGKey(2), s, jnp.full((n,), STOP, jnp.int32))
        assert bool(r.done) == done and not bool(r.info["won"])


def test_random_play_episode_lengths_and_wins():
    traj = rollout_harness(MAP, 32, **SHORT).run()[1]
    lengths = traj["info"]["episode_length"][traj["done"]]
    assert lengths.size > 0
    # Time-outs last max_steps + 1 steps (see envs/smax.py); a battle can end earlier.
    assert (lengths <= SHORT["max_steps"] + 1).all()
    won = traj["info"]["won"][traj["done"]]
    returns = traj["info"]["episode_return"][traj["done"]]
    assert (returns[won] >= 1.0).all() and (returns[~won] < 1.0 + 1e-6).all()


def test_avail_actions_mask_dead_and_out_of_range(aenv):
    _, state = _reset(aenv)
    n, m = aenv.env.num_allies, aenv.env.num_enemies
    centre = jnp.array([16.0, 16.0])
    # Everyone within 0.5 of the centre: every enemy is inside every ally's attack range.
    offsets = jnp.linspace(-0.5, 0.5, n + m)
    pos = jnp.stack([centre[0] + offsets, jnp.full(n + m, centre[1])], -1)
    state = _with_units(state, unit_positions=pos)
    avail = np.asarray(aenv.avail_actions(state))
    assert avail.shape == (n, m + 5) and avail.all()

    inner = state.env_state.state
    dead_enemy, far_enemy, dead_ally = 1, 3, 2
    state = _with_units(
        state,
        unit_alive=inner.unit_alive.at[n + dead_enemy].set(False).at[dead_ally].set(False),
        unit_health=inner.unit_health.at[n + dead_enemy].set(0.0).at[dead_ally].set(0.0),
        unit_positions=pos.at[n + far_enemy].set(jnp.array([30.0, 16.0])),
    )
    avail = np.asarray(aenv.avail_actions(state))
    alive_allies = [i for i in range(n) if i != dead_ally]
    assert not avail[:, 5 + dead_enemy].any(), "attack on a dead enemy is available"
    assert not avail[:, 5 + far_enemy].any(), "attack on an out-of-range enemy is available"
    others = [5 + j for j in range(m) if j not in (dead_enemy, far_enemy)]
    assert avail[np.ix_(alive_allies, others)].all()
    assert avail[alive_allies, :5].all()
    np.testing.assert_array_equal(avail[dead_ally], np.eye(m + 5, dtype=bool)[STOP])


def test_world_state_and_obs(aenv):
    env = aenv.env
    n, m = env.num_allies, env.num_enemies
    obs_dict, _ = env.reset(jax.random.PRNGKey(0))
    assert set(obs_dict) == set(aenv.agents) | {"world_state"}
    stacked = aenv.stack_obs(obs_dict)  # the extra "world_state" key is ignored
    np.testing.assert_array_equal(stacked, np.stack([obs_dict[a] for a in aenv.agents]))
    assert aenv.obs_dim == env.obs_size

    obs, state = _reset(aenv)
    ws = np.asarray(aenv.world_state(state, obs))
    assert aenv.world_state_dim == 12 * (n + m) == ws.shape[0]
    np.testing.assert_array_equal(ws, env.get_world_state(state.env_state))
    np.testing.assert_array_equal(ws[-2 * (n + m) : -(n + m)], [0] * n + [1] * m)  # teams
    np.testing.assert_array_equal(ws[-(n + m) :], [STALKER] * 2 + [ZEALOT] * 3 + [2, 2, 3, 3, 3])


@pytest.mark.parametrize("jit", [False, True])
def test_normalized_world_state_rescales_jaxmarls(jit):
    raw_env = envs.make_array_env("smax:2s3z")
    norm_env = envs.make_array_env("smax:2s3z", world_state="normalized")
    n_units = raw_env.env.num_allies + raw_env.env.num_enemies
    obs, state = raw_env.reset(jax.random.PRNGKey(3))
    # a dead unit, a hurt one and one mid-cooldown
    inner = state.env_state.state
    state = _with_units(
        state,
        unit_alive=inner.unit_alive.at[1].set(False),
        unit_health=inner.unit_health.at[0].multiply(0.5),
        unit_weapon_cooldowns=inner.unit_weapon_cooldowns.at[2].set(0.5),
    )
    world_state = jax.jit(norm_env.world_state) if jit else norm_env.world_state
    raw = np.asarray(raw_env.world_state(state, obs)).copy()
    norm = np.asarray(world_state(state, obs))
    assert norm.shape == raw.shape and norm.dtype == np.float32
    per_unit_raw = raw[: 10 * n_units].reshape(n_units, 10)
    per_unit = norm[: 10 * n_units].reshape(n_units, 10)
    alive = per_unit_raw.any(-1)
    assert not alive[1] and (per_unit[1] == 0).all()
    # health and type one-hots as jaxmarl has them, positions about the centre in [-1, 1]
    same = [0, *range(4, 10)]
    np.testing.assert_array_equal(per_unit[:, same], per_unit_raw[:, same])
    np.testing.assert_allclose(per_unit[alive, 1:3], per_unit_raw[alive, 1:3] / 16 - 1, rtol=1e-6)
    assert np.abs(per_unit[:, 1:4]).max() <= 1
    types = np.asarray(inner.unit_types)
    cooldowns = np.asarray(raw_env.env._env.unit_type_weapon_cooldowns)[types]
    np.testing.assert_allclose(per_unit[alive, 3], per_unit_raw[alive, 3] / cooldowns[alive])
    np.testing.assert_allclose(per_unit[2, 3], 0.5 / cooldowns[2])
    tail = 10 * n_units
    np.testing.assert_array_equal(norm[tail : tail + n_units], raw[tail : tail + n_units])  # teams
    np.testing.assert_allclose(norm[tail + n_units :], raw[tail + n_units :] / 5)
    with pytest.raises(ValueError, match="unknown SMAX world_state 'scaled'"):
        envs.make("smax:3m", world_state="scaled")


@pytest.mark.parametrize("jit", [False, True])
def test_state_last_action_appends_each_allys_last_action_one_hot(jit):
    """PyMARL's ``state_last_action``: rebuilt from the decoded move and attack SMAX keeps."""
    plain = envs.make_array_env("smax:3m")
    last = envs.make_array_env("smax:3m", state_last_action=True)
    n, k = 3, 3 + 5
    assert last.world_state_dim == plain.world_state_dim + n * k
    world_state = jax.jit(last.world_state) if jit else last.world_state
    obs, state = last.reset(jax.random.PRNGKey(0))
    np.testing.assert_array_equal(world_state(state, obs)[-n * k :], 0)  # at reset
    inner = state.env_state.state
    # moves, stop and attacks (taken or not: the action is what the state records)
    for actions in ([0, 1, 5 + 2], [2, STOP, 3], [STOP, 6, 1]):
        r = last.step(jax.random.PRNGKey(1), state, jnp.asarray(actions, jnp.int32))
        ws = np.asarray(world_state(r.state, r.obs))
        np.testing.assert_array_equal(
            ws[: plain.world_state_dim], plain.world_state(r.state, r.obs)
        )
        alive = np.asarray(r.state.env_state.state.unit_alive[:n])
        expected = np.eye(k)[actions] * alive[:, None]
        np.testing.assert_array_equal(ws[plain.world_state_dim :].reshape(n, k), expected)
    dead = _with_units(
        state,
        unit_alive=inner.unit_alive.at[1].set(False),
        unit_health=inner.unit_health.at[1].set(0),
    )
    r = last.step(jax.random.PRNGKey(1), dead, jnp.asarray([0, 1, 2], jnp.int32))
    ws = np.asarray(world_state(r.state, r.obs))[plain.world_state_dim :].reshape(n, k)
    np.testing.assert_array_equal(ws[1], 0)
    np.testing.assert_array_equal(ws[[0, 2]], np.eye(k)[[0, 2]])


EAST = 1


def _play(setting, steps=40, num_envs=8):
    """Rewards, alive flags before/after, wins and dones ``[steps * envs, ...]`` of 3m
    envs whose allies attack when they can and otherwise walk east, at the enemy."""
    aenv = envs.make_array_env("smax:3m", reward=setting, max_steps=30)

    def step(state, key):
        avail = aenv.avail_actions(state)
        attack = 5 + jnp.argmax(avail[:, 5:], -1)
        actions = jnp.where(avail[:, 5:].any(-1), attack, EAST).astype(jnp.int32)
        res = aenv.step(key, state, actions)
        before = state.env_state.state.unit_alive
        after = res.terminal_env_state.state.unit_alive
        return res.state, (res.reward, before, after, res.info["won"], res.done)

    def play(seed):
        _, state = aenv.reset(jax.random.PRNGKey(seed))
        keys = jax.random.split(jax.random.PRNGKey(seed + 100), steps)
        return jax.lax.scan(step, state, keys)[1]

    out = jax.jit(jax.vmap(play))(jnp.arange(num_envs))
    return jax.tree.map(lambda x: x.reshape(-1, *x.shape[2:]), out)


def test_reward_settings_follow_dpm_table_1():
    dense_r, before, after, won, done = (np.asarray(x) for x in _play("dense"))
    weak_r = np.asarray(_play("weak_sparse")[0])
    strong = _play("strong_sparse")
    strong_r = np.asarray(strong[0])
    # the setting changes the reward only: same key, same episodes
    np.testing.assert_array_equal(np.asarray(strong[1]), before)
    assert done.any() and won.any() and (before & ~after).any(), "a fight should happen"
    killed = (before[:, 3:] & ~after[:, 3:]).sum(-1)
    lost = (before[:, :3] & ~after[:, :3]).sum(-1)
    np.testing.assert_allclose(strong_r[:, 0], won * 1.0)
    np.testing.assert_allclose(weak_r[:, 0], won + 0.05 * killed - 0.025 * lost, atol=1e-6)
    for r in (dense_r, weak_r, strong_r):  # a team reward: every ally gets the same
        np.testing.assert_array_equal(r, np.repeat(r[:, :1], 3, axis=1))
    # dense rewards damage on non-winning steps; the sparse settings do not
    assert (dense_r[~won, 0] > 0).any() and (strong_r[~won] == 0).all()
    with pytest.raises(ValueError, match="unknown SMAX reward setting 'sparse'"):
        envs.make("smax:3m", reward="sparse")


@pytest.mark.parametrize(
    "name, unit", [("terran_5_vs_5", 0), ("protoss_5_vs_5", 2), ("zerg_5_vs_5", 5)]
)
def test_dpm_smacv2_maps_fix_the_unit_type_and_draw_start_positions(name, unit):
    aenv = envs.make_array_env(f"smax:{name}")
    assert aenv.num_agents == 5
    reset = jax.jit(aenv.reset)
    a = reset(jax.random.PRNGKey(0))[1].env_state.state
    b = reset(jax.random.PRNGKey(1))[1].env_state.state
    assert (np.asarray(a.unit_types) == unit).all() and (np.asarray(b.unit_types) == unit).all()
    assert not np.allclose(a.unit_positions, b.unit_positions)

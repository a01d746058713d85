"""QMIX / VDN / QPLEX: a game only a monotonic (or richer) mixer solves, masks, shaping
at sample time, no retracing, config checks."""

import dataclasses

import jax
import jax.numpy as jnp
import numpy as np
import pytest

import envs
from envs.array_env import ArrayEnv
from envs.matrix_game import MatrixGame
from jaxmarl_llm.config import build_config
from jaxmarl_llm.learners import qlearning
from jaxmarl_llm.learners.qlearning import QLearning, QLearningConfig, epsilon_schedule
from jaxmarl_llm.shaping import Shaper, constant_shaper, identity_shaper

EPISODE_KEYS = {"episode_return", "episode_length", "episodes"}
LEARN_KEYS = {"loss", "q_mean", "grad_norm", "epsilon"}


def small_cfg(**kw):
    base = dict(
        name="qmix", total_timesteps=16 * 8 * 150, num_envs=16, num_steps=8, buffer_size=512,
        batch_size=32, learning_starts=0, updates_per_rollout=2, lr=5e-3, eps_start=1.0,
        eps_finish=1.0, target_update_interval=5, hidden_dim=16, mixer_embed_dim=8,
        mixer_hypernet_dim=16,
    )  # fmt: skip
    base.update(kw)
    return QLearningConfig(**base)


def greedy_episode(q: QLearning, params, steps: int, key):
    """Team return of one greedy episode of ``steps`` steps from a reset."""
    env = q.env
    obs, s = jax.vmap(env.reset)(key[None])
    hidden = jnp.zeros((1, env.num_agents, q.hidden_dim))
    first, ret = jnp.ones((1,), bool), 0.0
    for _ in range(steps):
        hidden, a, _ = q.act(params, hidden, obs, jax.vmap(env.avail_actions)(s), first, key, 0.0)
        res = jax.vmap(env.step)(key[None], s, a)
        ret = ret + res.reward.sum()
        obs, s, first = res.obs, res.state, res.done
    return ret


# ----- the two-step game of the QMIX paper ---------------------------------------------
@pytest.fixture(scope="module")
def two_step():
    """QMIX and VDN trained on the two-step game (uniform exploration, as in the paper),
    two seeds each, vmapped; the greedy team return per seed and the metrics."""
    env = envs.make_array_env("matrix:two_step")
    out = {}
    for name in ("qmix", "vdn", "qplex"):
        q = QLearning(small_cfg(name=name), env, identity_shaper())
        state, metrics = jax.jit(jax.vmap(q.learner().train))(
            jax.random.split(jax.random.PRNGKey(0), 2)
        )
        evaluate = jax.vmap(lambda p, q=q: greedy_episode(q, p, 2, jax.random.PRNGKey(1)))
        returns = jax.jit(evaluate)(state.params)
        out[name] = (np.asarray(returns), jax.tree.map(np.asarray, metrics))
    return out


@pytest.mark.slow
def test_qmix_finds_the_optimum_vdn_does_not(two_step):
    # VDN's additive fit of stage 2B peaks at 6.5 < 7, so it settles for stage 2A.
    np.testing.assert_array_equal(two_step["vdn"][0], 7.0)
    np.testing.assert_array_equal(two_step["qmix"][0], 8.0)
    np.testing.assert_array_equal(two_step["qplex"][0], 8.0)  # as expressive as QMIX here


@pytest.mark.slow
def test_metrics(two_step):
    _, m = two_step["qmix"]
    assert set(m) == EPISODE_KEYS | LEARN_KEYS
    assert all(v.shape == (2, 150) for v in m.values())
    # 16 items < batch_size 32 after the first update: no gradient step yet, NaN metrics
    assert np.isnan(m["loss"][:, 0]).all() and np.isnan(m["grad_norm"][:, 0]).all()
    assert np.isfinite(m["loss"][:, 1:]).all() and np.isfinite(m["q_mean"][:, 1:]).all()
    assert (m["loss"][:, -10:].mean(-1) < 0.1 * m["loss"][:, 1:11].mean(-1)).all()
    np.testing.assert_array_equal(m["episode_length"], 2.0)
    np.testing.assert_array_equal(m["episodes"], 16 * 8 / 2)
    np.testing.assert_array_equal(m["epsilon"], 1.0)


# ----- one compiled update: no retracing, masks, shaping at sample time ---------------------
MASKED_PAYOFF = [[1.0, 0.0, 50.0], [0.0, 2.0, 50.0], [50.0, 50.0, 50.0]]  # action 2 illegal
MASK = [[True, True, False], [True, True, False]]
SHAPE_VALUE = 0.5


@pytest.fixture(scope="module")
def masked_run():
    """A learner on a one-step game whose best-paying action is illegal, with a constant
    shaper, and a jitted update that counts its traces; 12 updates, shaper params swapped
    for the last 2."""
    env = ArrayEnv(MatrixGame(MASKED_PAYOFF, avail_actions=MASK))
    cfg = small_cfg(
        name="vdn", total_timesteps=8 * 4 * 12, num_envs=8, num_steps=4, buffer_size=64,
        batch_size=8, learning_starts=8 * 4 * 3, eps_finish=0.0, eps_decay=0.5,
    )  # fmt: skip
    q = QLearning(cfg, env, constant_shaper(SHAPE_VALUE))
    traces = []

    def update(state):
        traces.append(1)
        return q.update(state)

    update_jit = jax.jit(update)
    state = jax.jit(q.init)(jax.random.PRNGKey(0))
    states, metrics = [state], []
    for i in range(12):
        if i == 10:  # what the host does between chunks
            state = state.replace(shaper_params=jnp.asarray(2.0, jnp.float32))
        state, m = update_jit(state)
        states.append(state)
        metrics.append(jax.tree.map(float, m))
    return q, update_jit, traces, states, metrics


def test_update_compiles_once(masked_run):
    _, update_jit, traces, _, _ = masked_run
    assert len(traces) == 1  # 12 calls, new shaper params included
    assert update_jit._cache_size() == 1


def test_metrics_nan_until_learning_starts(masked_run):
    *_, metrics = masked_run
    for i, m in enumerate(metrics):
        started = (i + 1) * 32 >= 96  # learning_starts = 96 env steps
        assert np.isfinite(m["loss"]) == started, (i, m["loss"])
        assert np.isfinite(m["grad_norm"]) == started
    assert metrics[0]["epsilon"] == 1.0 and metrics[-1]["epsilon"] == 0.0


def test_masked_actions_never_chosen(masked_run):
    q, _, _, states, _ = masked_run
    exp = states[-1].buffer.experience
    actions, avail = np.asarray(exp.actions), np.asarray(exp.avail)
    assert (actions != 2).all() and avail[..., 2].sum() == 0
    assert set(np.unique(actions)) == {0, 1}  # exploration did cover the legal actions
    # greedy and exploring actions from many inits are legal, although Q of the illegal
    # action is untrained and a third of unmasked argmaxes would land on it
    env = q.env
    obs, s = jax.vmap(env.reset)(jax.random.split(jax.random.PRNGKey(0), 256))
    avail = jax.vmap(env.avail_actions)(s)

    def act(key, eps):
        params = q.init_params(key)
        hidden = jnp.zeros((256, env.num_agents, q.hidden_dim))
        _, a, qv = q.act(params, hidden, obs, avail, jnp.ones((256,), bool), key, eps)
        return a, qv

    for eps in (0.0, 1.0):
        a, qv = jax.jit(act)(jax.random.PRNGKey(3), eps)
        assert (np.asarray(a) != 2).all()
    assert (np.asarray(qv).argmax(-1) == 2).any()  # the mask mattered


def test_shaping_happens_at_sample_time(masked_run):
    q, _, _, states, _ = masked_run
    n = q.env.num_agents
    before, after = states[10], states[11]  # shaper params 0.5 -> 2.0 at update 10
    # the buffer stores env rewards: every per-agent reward is a payoff / 2
    stored = np.asarray(after.buffer.experience.reward)
    assert np.isin(stored, np.array([0.0, 0.5, 1.0])).all()
    items = q.sample(before, jax.random.PRNGKey(5))
    env_team = np.asarray(items.reward).sum(-1)
    np.testing.assert_allclose(q.team_rewards(before.shaper_params, items), env_team + n * 0.5)
    swapped = before.replace(shaper_params=jnp.asarray(2.0, jnp.float32))
    np.testing.assert_allclose(q.team_rewards(swapped.shaper_params, items), env_team + n * 2.0)
    for a, b in zip(jax.tree.leaves(before.buffer), jax.tree.leaves(swapped.buffer), strict=True):
        assert a is b
    # the loss reads the train state's shaper params
    loss = jax.jit(q.loss)
    l_half = loss(before.params, before.target_params, items, before.shaper_params)[0]
    l_two = loss(before.params, before.target_params, items, swapped.shaper_params)[0]
    assert abs(float(l_half) - float(l_two)) > 1e-3
    assert float(after.shaper_params) == 2.0


# ----- stored GRU state -------------------------------------------------------------------
@pytest.fixture(scope="module")
def stored_run():
    """QMIX with ``stored_hidden`` on MPE spread (25-step episodes, 8-step items, so most
    items start mid-episode): the train state before each of 5 jitted updates."""
    env = envs.make_array_env("mpe:simple_spread_3")
    cfg = small_cfg(num_envs=4, num_steps=8, buffer_size=64, batch_size=8, hidden_dim=8,
                    stored_hidden=True)  # fmt: skip
    q = QLearning(cfg, env, identity_shaper())
    update = jax.jit(q.update)
    states = [jax.jit(q.init)(jax.random.PRNGKey(0))]
    for _ in range(5):
        states.append(update(states[-1])[0])
    return q, states


def test_stored_hidden_is_the_acting_carry_at_each_items_start(stored_run):
    q, states = stored_run
    stored = np.asarray(states[-1].buffer.experience.hidden0)[0]  # [buffer, N, H]
    assert stored.shape == (64, 3, 8)
    for k, before in enumerate(states[:-1]):  # update k added items 4k .. 4k+3
        first = np.asarray(before.first)[:, None, None]
        expected = np.where(first, 0.0, np.asarray(before.hidden))
        np.testing.assert_allclose(stored[4 * k : 4 * k + 4], expected, rtol=1e-6)
    assert not stored[:4].any()  # the first items start episodes: a zero carry
    assert np.abs(stored[4:20]).min(axis=(1, 2)).max() > 0  # later ones start mid-episode


def test_stored_hidden_changes_the_loss_only_through_the_carry(stored_run):
    q, states = stored_run
    plain = QLearning(dataclasses.replace(q.cfg, stored_hidden=False), q.env, identity_shaper())
    state = states[-1]
    items = q.sample(state, jax.random.PRNGKey(2))
    assert np.abs(np.asarray(items.hidden0)).sum() > 0
    args = (state.params, state.target_params)
    loss_stored = float(jax.jit(q.loss)(*args, items, state.shaper_params)[0])
    loss_plain = float(jax.jit(plain.loss)(*args, items, state.shaper_params)[0])
    cold = items.replace(hidden0=jnp.zeros_like(items.hidden0))
    loss_cold = float(q.loss(*args, cold, state.shaper_params)[0])  # without jit
    # a zero stored carry is the plain learner's cold start; the real one differs
    np.testing.assert_allclose(loss_cold, loss_plain, rtol=1e-5)
    assert abs(loss_stored - loss_plain) > 1e-6 * max(1.0, abs(loss_plain))


# ----- SMAX -------------------------------------------------------------------------------
@pytest.mark.skipif("smax:3m" not in envs.names(), reason="smax:3m is not registered")
def test_smax_masked_actions_never_chosen():
    env = envs.make_array_env("smax:3m")
    q = QLearning(small_cfg(num_envs=4, hidden_dim=8), env, identity_shaper())

    def rollout(key):
        k_init, k_reset, k_run = jax.random.split(key, 3)
        params = q.init_params(k_init)
        obs, s = jax.vmap(env.reset)(jax.random.split(k_reset, 4))
        hidden = jnp.zeros((4, env.num_agents, 8))
        carry = (obs, s, jax.vmap(env.avail_actions)(s), hidden, jnp.ones((4,), bool))

        def step(carry, inp):
            obs, s, avail, hidden, first = carry
            key, eps = inp
            hidden, a, _ = q.act(params, hidden, obs, avail, first, key, eps)
            legal = jnp.take_along_axis(avail, a[..., None], -1)[..., 0]
            res = jax.vmap(env.step)(jax.random.split(key, 4), s, a)
            return (res.obs, res.state, res.avail_actions, hidden, res.done), (legal, avail)

        eps = jnp.tile(jnp.array([1.0, 0.0]), 20)  # alternate exploring and greedy steps
        _, (legal, avail) = jax.lax.scan(step, carry, (jax.random.split(k_run, 40), eps))
        return legal, avail

    legal, avail = jax.jit(rollout)(jax.random.PRNGKey(0))
    assert bool(legal.all())
    assert not bool(avail.all())  # some actions were masked along the way


# ----- config ---------------------------------------------------------------------------------
def test_epsilon_schedule():
    cfg = small_cfg(eps_start=1.0, eps_finish=0.1, eps_decay=0.5, total_timesteps=1000)
    eps = epsilon_schedule(cfg)
    np.testing.assert_allclose(
        [float(eps(t)) for t in (0, 250, 500, 750, 10_000)], [1.0, 0.55, 0.1, 0.1, 0.1], rtol=1e-6
    )
    # an extended run keeps the schedule of the budget it started with
    extended = epsilon_schedule(
        dataclasses.replace(cfg, total_timesteps=4000, schedule_timesteps=1000)
    )
    np.testing.assert_allclose(
        [float(extended(t)) for t in (0, 250, 500, 3000)], [1.0, 0.55, 0.1, 0.1], rtol=1e-6
    )
    # a run shorter than the schedule's budget anneals over the same env steps
    shorter = epsilon_schedule(
        dataclasses.replace(cfg, total_timesteps=400, schedule_timesteps=1000)
    )
    np.testing.assert_allclose(
        [float(shorter(t)) for t in (0, 250, 400)], [1.0, 0.55, 0.28], rtol=1e-6
    )


@pytest.mark.parametrize(
    "kw, key",
    [
        ({"name": "qtran"}, "name"),
        ({"optimizer": "sgd"}, "optimizer"),
        ({"td_lambda": 1.5}, "td_lambda"),
        ({"tau": 0.0}, "tau"),
        ({"batch_size": 1024}, "batch_size"),
        ({"total_timesteps": 10}, "total_timesteps"),
        ({"eps_decay": 2.0}, "eps_decay"),
        ({"param_sharing": "per_team"}, "param_sharing"),
        # one rollout is num_envs items here, batch_size fits the buffer
        ({"num_envs": 24, "buffer_size": 20, "batch_size": 16}, "buffer_size"),
    ],
)
def test_bad_config_names_the_key(kw, key):
    with pytest.raises(ValueError, match=f"'algo.{key}'"):
        qlearning.check_config(small_cfg(**kw))


def test_omegaconf_config_and_learner_sizes():
    cfg = build_config(
        {
            "env": {"name": "matrix:two_step"},
            "algo": {"name": "vdn", "num_envs": 4, "num_steps": 16},
        }
    )
    learner = qlearning.make_learner(cfg.algo, envs.make_array_env(cfg.env.name), identity_shaper())
    assert learner.env_steps_per_update == 64
    assert learner.num_updates == 1_000_000 // 64


@pytest.mark.parametrize(
    "kw",
    [
        {"param_sharing": "per_agent", "td_lambda": 0.8, "optimizer": "rmsprop", "tau": 0.5},
        {"name": "vdn", "double_q": False, "agent_ids": False, "lr_linear_decay": True},
        {"name": "qplex", "stored_hidden": True},
    ],
    ids=["per-agent-lambda-rmsprop-polyak", "vdn-no-double-q-no-ids", "qplex-stored-hidden"],
)
def test_variants_trace(kw):
    """Variants trace to an update that maps the train state to itself (no compile)."""
    env = envs.make_array_env("matrix:two_step")
    fields = ("obs", "actions", "next_obs", "state", "next_state")
    shaper = Shaper(
        apply=lambda p, b: b.next_obs[..., 0] + b.next_state.stage[..., None], fields=fields
    )
    learner = qlearning.make_learner(small_cfg(**kw), env, shaper)
    state = jax.eval_shape(jax.vmap(learner.init), jax.random.split(jax.random.PRNGKey(0), 2))
    new_state, metrics = jax.eval_shape(jax.vmap(learner.update), state)
    assert jax.tree.structure(new_state) == jax.tree.structure(state)
    for a, b in zip(jax.tree.leaves(new_state), jax.tree.leaves(state), strict=True):
        assert a.shape == b.shape and a.dtype == b.dtype
    assert set(metrics) == EPISODE_KEYS | LEARN_KEYS
    assert state.buffer.experience.next_state.stage.shape == (2, 1, 512, 8)

"""HAPPO: the sequential factor, a matrix game with a known answer, the random update
order, and a run through config and runner."""

import csv
import json

import chex
import jax
import jax.numpy as jnp
import numpy as np
import pytest

import envs
from jaxmarl_llm.config import build_config
from jaxmarl_llm.errors import ConfigError
from jaxmarl_llm.learners import happo
from jaxmarl_llm.learners.base import TrainState
from jaxmarl_llm.learners.happo import HAPPOConfig
from jaxmarl_llm.runner import run_experiment
from jaxmarl_llm.shaping import identity_shaper

# A 3-agent, 2-action coordination game: the joint action (1, 0, 1) pays 6, the
# suboptimal equilibrium (0, 1, 0) pays 2, everything else 0. The agents must act
# differently, so parameters of their own (or agent ids) are needed.
OPTIMUM, TRAP = (1, 0, 1), (0, 1, 0)


def coordination_env():
    payoff = np.zeros((2, 2, 2), np.float32)
    payoff[OPTIMUM], payoff[TRAP] = 6.0, 2.0
    return envs.make_array_env("matrix:penalty", payoff=payoff, num_agents=3)


class SequentialFactorsTest(chex.TestCase):
    @chex.variants(with_jit=True, without_jit=True)
    def test_each_agent_gets_the_product_of_the_ratios_updated_before_it(self):
        ratios = np.array([[2.0, 0.5, 3.0, 0.25], [1.0, 4.0, 0.5, 2.0]], np.float32)
        order = np.array([2, 0, 3, 1], np.int32)
        factors = self.variant(happo.sequential_factors)(jnp.log(ratios), order)
        # agent 2 first: 1; agent 0: r2; agent 3: r2 * r0; agent 1: r2 * r0 * r3
        expected = np.array(
            [[3.0, 3.0 * 2.0 * 0.25, 1.0, 3.0 * 2.0], [0.5, 0.5 * 1.0 * 2.0, 1.0, 0.5 * 1.0]]
        )
        np.testing.assert_allclose(factors, expected, rtol=1e-6)

    @chex.variants(with_jit=True, without_jit=True)
    def test_ratios_of_agents_not_yet_updated_are_never_read(self):
        log_ratios = jnp.log(jnp.array([1.5, 7.0, 0.2]))
        order = jnp.array([1, 0, 2], jnp.int32)
        factors = self.variant(happo.sequential_factors)(log_ratios, order)
        np.testing.assert_allclose(factors, [7.0, 1.0, 7.0 * 1.5], rtol=1e-6)
        # agent 1 first: only its own ratio is known when agent 0 is updated
        partial = jnp.array([0.0, jnp.log(7.0), 0.0])
        known = self.variant(happo.sequential_factors)(partial, order)
        np.testing.assert_allclose(known[:2], [7.0, 1.0], rtol=1e-6)


@pytest.fixture(scope="module")
def coordination_run():
    """Four seeds of HAPPO on the coordination game, one update at a time; the keys of
    seeds 0 and 3 are the same. ``(learner, state, episode returns [updates, seeds],
    update orders [updates, seeds, N], the jitted init and update)``."""
    cfg = HAPPOConfig(
        total_timesteps=32 * 40, num_envs=32, num_steps=1, lr=1e-2, update_epochs=2,
        num_minibatches=1, hidden_sizes=[16],
    )  # fmt: skip
    learner = happo.HAPPO(cfg, coordination_env(), identity_shaper())
    init, update = jax.jit(jax.vmap(learner.init)), jax.jit(jax.vmap(learner.update))
    keys = jax.random.split(jax.random.PRNGKey(0), 3)
    state = init(jnp.concatenate([keys, keys[:1]]))
    returns, orders = [], []
    for _ in range(learner.num_updates):
        state, metrics = update(state)
        returns.append(np.asarray(metrics["episode_return"]))
        orders.append(np.asarray(state.agent_order))
    return learner, state, np.array(returns), np.array(orders), init, update


def test_finds_the_optimum_of_a_coordination_game(coordination_run):
    learner, state, returns, _, _, _ = coordination_run
    assert returns[0].mean() < 1.5, returns[0]  # uniform play expects 8 / 8
    np.testing.assert_allclose(returns[-3:], 6.0, atol=0.3)
    obs, avail = jnp.ones((1, 3, 1)), jnp.ones((1, 3, 2), bool)
    greedy = jax.vmap(lambda s: learner.greedy_act(s, None, obs, avail, None)[1])(state)
    np.testing.assert_array_equal(greedy, np.broadcast_to(OPTIMUM, (4, 1, 3)))
    # per-agent actors: stacked over the three agents, never shared
    assert all(x.shape[:2] == (4, 3) for x in jax.tree.leaves(state.params["actor"]))
    # collect (online feedback) samples the trained policy and leaves the state alone
    seed0 = jax.tree.map(lambda x: x[0], state)
    batch = jax.jit(learner.collect, static_argnums=2)(seed0, jax.random.PRNGKey(5), 2)
    assert batch.actions.shape == (2, 32, 3)
    assert (batch.actions == np.asarray(OPTIMUM)).all(-1).mean() > 0.9
    np.testing.assert_array_equal(seed0.agent_order, state.agent_order[0])


def test_the_update_order_is_redrawn_every_update_and_reproducible_from_the_seed(
    coordination_run,
):
    learner, _, _, orders, init, update = coordination_run  # orders [updates, seeds, N]
    assert (np.sort(orders, axis=-1) == np.arange(3)).all()  # permutations of the agents
    for seed in range(3):
        assert len({tuple(o) for o in orders[:, seed]}) >= 4  # of the 3! = 6 orders
    np.testing.assert_array_equal(orders[:, 0], orders[:, 3])  # same key, same orders
    assert not np.array_equal(orders[:, 0], orders[:, 1])
    # a fresh start from the same keys draws the same orders again
    keys = jax.random.split(jax.random.PRNGKey(0), 3)
    state = init(jnp.concatenate([keys, keys[:1]]))
    np.testing.assert_array_equal(state.agent_order, np.broadcast_to(np.arange(3), (4, 3)))
    for u in range(5):
        state, _ = update(state)
        np.testing.assert_array_equal(state.agent_order, orders[u])


def test_an_agent_updated_second_trains_on_the_advantage_times_the_first_agents_ratio(
    coordination_run,
):
    """Agent 1 after agent 0 ends where agent 1 first ends on advantages already multiplied
    by agent 0's ratio (one minibatch: no shuffle, so the keys do not matter)."""
    learner = coordination_run[0]

    @jax.jit
    def start(key):
        state = learner.init(key)
        after, _, traj, _, _ = learner.rollout(state)
        return state, traj, learner.advantages(after, traj)[1]

    state, traj, adv = start(jax.random.PRNGKey(3))
    update_actors = jax.jit(learner.update_actors)
    params, opt_state, key = state.params["actor"], state.opt_state["actor"], jax.random.PRNGKey(4)
    (params_a, _, log_ratios_a), _ = update_actors(
        params, opt_state, traj, adv, jnp.array([0, 1, 2]), key
    )
    first_ratio = jnp.exp(log_ratios_a[..., 0])
    assert float(jnp.abs(first_ratio - 1.0).max()) > 1e-3  # agent 0's update moved it
    adv_b = adv.at[..., 1].multiply(first_ratio)
    (params_b, _, log_ratios_b), _ = update_actors(
        params, opt_state, traj, adv_b, jnp.array([1, 0, 2]), key
    )
    agent_1 = lambda tree: jax.tree.map(lambda x: x[1], tree)
    chex.assert_trees_all_close(agent_1(params_a), agent_1(params_b), rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(log_ratios_a[..., 1], log_ratios_b[..., 1], rtol=1e-4, atol=1e-6)


# the HARL football settings (Table 1) that the football configs will set
TABLE_1 = [
    "algo.hidden_sizes=[256,128,64]", "algo.activation=relu", "algo.lr=5e-4",
    "algo.critic_lr=5e-4", "algo.gamma=0.995", "algo.gae_lambda=0.95", "algo.clip_eps=0.2",
    "algo.update_epochs=10",
]  # fmt: skip


def test_accepts_the_football_settings():
    cfg = build_config({"env": {"name": "matrix:penalty"}, "algo": {"name": "happo"}}, TABLE_1)
    assert cfg.algo.gamma == 0.995 and cfg.algo.update_epochs == 10
    learner = happo.HAPPO(cfg.algo, envs.make_array_env("matrix:penalty"), identity_shaper())
    params = jax.eval_shape(learner.init_params, jax.random.PRNGKey(0))
    actor_kernels = [p["kernel"].shape for p in params["actor"]["params"].values()]
    assert actor_kernels == [(2, 1, 256), (2, 256, 128), (2, 128, 64), (2, 64, 3)]
    critic_kernels = [p["kernel"].shape for p in params["critic"]["params"].values()]
    assert critic_kernels == [(2 + 2, 256), (256, 128), (128, 64), (64, 1)]  # state + id
    with pytest.raises(ConfigError, match="'algo.critic_lr': -1.0; must be > 0"):
        build_config({"algo": {"name": "happo"}}, ["algo.critic_lr=-1"])


def test_runs_end_to_end_through_config_and_runner_with_shaping(tmp_path):
    raw = {
        "name": "h",
        "env": {"name": "matrix:penalty"},
        "algo": {"name": "happo", "hidden_sizes": [8], "update_epochs": 2},
        "shaping": {"name": "constant", "kwargs": {"value": 0.5}},
    }
    cfg = build_config(
        raw,
        ["algo.total_timesteps=64", "algo.num_envs=8", "algo.num_steps=2", "num_seeds=2",
         "log_every=2", "progress=false", "plot=false", f"out_dir={tmp_path / 'run'}"],
    )  # fmt: skip
    result = run_experiment(cfg)
    summary = json.loads((result.run_dir / "summary.json").read_text())
    assert summary["algo"] == "happo" and summary["env_steps"] == 64
    assert isinstance(result.state, TrainState)
    assert result.state.agent_order.shape == (2, 2)  # [seeds, agents]
    with open(result.run_dir / "metrics.csv") as f:
        rows = list(csv.DictReader(f))
    assert len(rows) == 4
    for row in rows:  # every step ends an episode; each agent gets payoff / 2, plus 0.5
        assert float(row["reward_mean"]) == pytest.approx(float(row["episode_return"]) / 2 + 0.5)
        assert np.isfinite(float(row["value_loss"])) and np.isfinite(float(row["factor_std"]))

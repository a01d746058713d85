"""IPPO / MAPPO: learning with known answers, masks, variants, no retracing."""

import chex
import jax
import numpy as np
import pytest
from absl.testing import parameterized
from toy_envs import GuessTeammateBit, MaskedBandit

import envs
from envs.array_env import ArrayEnv
from jaxmarl_llm.learners import ppo
from jaxmarl_llm.learners.evaluation import make_evaluate
from jaxmarl_llm.learners.ppo import PPOConfig
from jaxmarl_llm.shaping import identity_shaper


def small_cfg(**kw):
    base = dict(
        name="ippo",
        total_timesteps=16 * 8 * 40,
        num_envs=16,
        num_steps=8,
        lr=3e-3,
        anneal_lr=False,
        num_minibatches=2,
        update_epochs=4,
        hidden_sizes=[32, 32],
    )
    base.update(kw)
    return PPOConfig(**base)


def train(cfg, env, seeds=2):
    learner = ppo.make_learner(cfg, env, identity_shaper())
    return jax.jit(jax.vmap(learner.train))(jax.random.split(jax.random.PRNGKey(0), seeds))


@pytest.mark.parametrize(
    "kw",
    [
        {},
        # learning runs; IPPO's feed-forward one above stays in the suite (MAPPO's critic
        # is in the runner and shaping tests), the GRU paths are in the gradient-chunking
        # test below, per-agent parameters in their own test
        pytest.param({"name": "mappo"}, marks=pytest.mark.slow),
        pytest.param(
            {"recurrent": True, "gru_hidden_dim": 32, "num_minibatches": 4},
            marks=pytest.mark.slow,
        ),
        pytest.param(
            {"name": "mappo", "recurrent": True, "gru_hidden_dim": 32, "num_minibatches": 4},
            marks=pytest.mark.slow,
        ),
        pytest.param({"param_sharing": "per_agent"}, marks=pytest.mark.slow),
    ],
    ids=["ippo-ff", "mappo-ff", "ippo-gru", "mappo-gru", "ippo-per-agent"],
)
def test_learns_bandit_and_respects_mask(kw):
    env = ArrayEnv(MaskedBandit())
    cfg = small_cfg(**kw)
    state, metrics = train(cfg, env)
    ret = np.asarray(metrics["episode_return"])  # [seeds, updates], mean over agents
    # Optimal return is horizon * 1 = 4; the masked action (worth 2) must never be taken.
    assert ret[:, 0].mean() < 2.0, ret[:, 0]
    assert ret[:, -5:].mean() > 3.5, ret[:, -5:]
    assert np.all(ret <= 4.0 + 1e-5), "an agent took the masked action"
    assert np.all(np.isfinite(np.asarray(metrics["value_loss"])))
    # the greedy policy (learners/evaluation.py) plays the best legal action every step
    learner = ppo.make_learner(cfg, env, identity_shaper())
    evaluate = jax.jit(jax.vmap(make_evaluate(env, learner.policy, 16, 50)))
    m = evaluate(state, jax.random.split(jax.random.PRNGKey(1), 2))
    np.testing.assert_allclose(m["eval_return"], 4.0, atol=1e-5)
    assert np.asarray(m["eval_episodes"]).tolist() == [16, 16]


@pytest.mark.slow
@pytest.mark.parametrize("commnet_steps", [0, 1], ids=["independent", "commnet"])
def test_only_commnet_learns_what_the_teammate_sees(commnet_steps):
    """Each agent must name its teammate's private bit: independent actors stay at the
    0.5 of a guess, CommNet's mean-of-teammates message gets it right."""
    env = ArrayEnv(GuessTeammateBit())
    cfg = small_cfg(commnet_steps=commnet_steps, total_timesteps=16 * 8 * 60, agent_ids=False)
    _, metrics = train(cfg, env)
    final = np.asarray(metrics["episode_return"])[:, -5:].mean()
    if commnet_steps:
        assert final > 0.9, final
    else:
        assert 0.35 < final < 0.65, final


def test_commnet_is_permutation_equivariant_and_listens():
    from jaxmarl_llm.learners.networks import CommNetActorCritic

    net = CommNetActorCritic(4, (8, 8), "tanh", comm_steps=2)
    x = jax.random.normal(jax.random.PRNGKey(0), (5, 3, 6))
    params = net.init(jax.random.PRNGKey(1), x)
    logits = net.apply(params, x, method="policy_logits")
    chex.assert_shape(logits, (5, 3, 4))
    perm = np.array([2, 0, 1])
    permuted = net.apply(params, x[:, perm], method="policy_logits")
    np.testing.assert_allclose(permuted, logits[:, perm], rtol=1e-5, atol=1e-6)
    moved = net.apply(params, x.at[:, 1].add(1.0), method="policy_logits")
    assert np.abs(moved[:, 0] - logits[:, 0]).max() > 1e-4  # agent 0 hears agent 1


def test_commnet_needs_a_shared_feed_forward_actor():
    from jaxmarl_llm.errors import ConfigError

    env = ArrayEnv(MaskedBandit())
    with pytest.raises(ConfigError, match="commnet_steps"):
        ppo.make_learner(small_cfg(commnet_steps=1, recurrent=True), env, identity_shaper())


def test_per_agent_params_are_separate():
    env = ArrayEnv(MaskedBandit(num_agents=3))
    learner = ppo.make_learner(small_cfg(param_sharing="per_agent"), env, identity_shaper())
    params = learner.init(jax.random.PRNGKey(0)).params
    leaves = jax.tree.leaves(params)
    assert all(x.shape[0] == 3 for x in leaves)
    kernels = [x for x in leaves if x.ndim == 3]  # [agents, in, out]; biases start at zero
    assert kernels and all(not np.allclose(k[0], k[1]) for k in kernels)


def test_update_compiles_once():
    env = envs.make_array_env("mpe:simple_spread_3")
    traces = []

    learner = ppo.make_learner(small_cfg(total_timesteps=16 * 8 * 3), env, identity_shaper())

    def counted(s):
        traces.append(1)
        return learner.update(s)

    update = jax.jit(counted)
    s = learner.init(jax.random.PRNGKey(0))
    for _ in range(3):
        s, m = update(s)
    jax.block_until_ready(s)
    assert len(traces) == 1
    assert int(s.update_step) == 3


@pytest.mark.slow
def test_ippo_improves_on_mpe_spread():
    env = envs.make_array_env("mpe:simple_spread_3")
    cfg = PPOConfig(name="ippo", total_timesteps=64 * 128 * 24, num_envs=64, num_steps=128)
    _, metrics = train(cfg, env, seeds=1)
    ret = np.asarray(metrics["episode_return"])[0]
    # A random policy scores about -84 (summed over 3 agents); learning lifts it.
    assert ret[:3].mean() < -78
    assert ret[-3:].mean() > ret[:3].mean() + 5, (ret[:3], ret[-3:])


def test_bad_minibatch_split_is_rejected():
    with pytest.raises(ValueError, match="'algo.num_minibatches': 7 does not divide"):
        ppo.check_config(small_cfg(num_minibatches=7))
    ppo.check_config(small_cfg(num_minibatches=4))


@pytest.mark.parametrize("chunks", [2, 4])
def test_num_grad_chunks_divides_and_targets_chunk_size(chunks):
    # 32 units x 3 rows = 96 rows; chunks of 96/chunks rows -> exactly `chunks` parts.
    assert ppo.num_grad_chunks(32, 3, 96 // chunks) == chunks
    assert ppo.num_grad_chunks(32, 3, 0) == 1
    assert ppo.num_grad_chunks(32, 3, 10_000) == 1
    assert 30 % ppo.num_grad_chunks(30, 1, 4) == 0  # never a ragged chunk


def test_grad_chunk_rows_default_follows_the_backend():
    """Unset, chunks fit a CPU's cache; an accelerator takes the whole minibatch at once."""
    assert PPOConfig().grad_chunk_rows is None
    assert ppo.grad_chunk_rows(None, "cpu") == ppo.CPU_GRAD_CHUNK_ROWS
    assert ppo.grad_chunk_rows(None, "gpu") == 0
    assert ppo.grad_chunk_rows(None, "tpu") == 0
    assert ppo.grad_chunk_rows(24, "gpu") == 24  # a configured value wins everywhere
    assert ppo.grad_chunk_rows(0, "cpu") == 0
    assert ppo.grad_chunk_rows(None, "cpu", recurrent=True) == 0  # GRU minibatches whole
    assert ppo.grad_chunk_rows(24, "cpu", recurrent=True) == 24


@pytest.mark.parametrize(
    "kw",
    [{}, {"name": "mappo", "recurrent": True, "gru_hidden_dim": 16, "num_minibatches": 2}],
    ids=["ff", "gru"],
)
def test_gradient_chunking_does_not_change_the_update(kw):
    """Accumulating a minibatch's gradient over chunks is the same SGD step."""
    env = envs.make_array_env("mpe:simple_spread_3")
    states = []
    for rows in (0, 24):  # whole minibatch vs chunks of ~24 agent-rows
        cfg = small_cfg(total_timesteps=16 * 8 * 2, grad_chunk_rows=rows, **kw)
        learner = ppo.make_learner(cfg, env, identity_shaper())
        state = learner.init(jax.random.PRNGKey(3))
        state, metrics = jax.jit(learner.update)(state)
        states.append((state.params, metrics))
    (p0, m0), (p1, m1) = states
    for a, b in zip(jax.tree.leaves(p0), jax.tree.leaves(p1), strict=True):
        np.testing.assert_allclose(a, b, rtol=2e-4, atol=2e-6)
    np.testing.assert_allclose(m0["policy_loss"], m1["policy_loss"], rtol=1e-4, atol=1e-6)


@pytest.mark.parametrize("kw", [{}, {"recurrent": True, "gru_hidden_dim": 8}], ids=["ff", "gru"])
def test_collect_plays_the_current_policy_without_changing_the_state(kw):
    env = ArrayEnv(MaskedBandit())
    learner = ppo.make_learner(small_cfg(**kw), env, identity_shaper())
    state = learner.init(jax.random.PRNGKey(0))
    before = [np.asarray(x) for x in jax.tree.leaves(state)]
    collect = jax.jit(learner.collect, static_argnums=2)
    batch = collect(state, jax.random.PRNGKey(1), 5)
    e, n = 16, env.num_agents
    assert batch.actions.shape == (5, e, n) and batch.reward.shape == (5, e, n)
    assert batch.obs.shape == batch.next_obs.shape == (5, e, n, env.obs_dim)
    assert batch.done.shape == (5, e)
    # env states of every step: the first is the learner's, and step t+1 starts where
    # step t ended unless an episode ended in between (auto-reset)
    s0 = jax.tree.leaves(batch.state)[0]
    np.testing.assert_array_equal(s0[0], jax.tree.leaves(state.env_state.env_state)[0])
    s_next = jax.tree.leaves(batch.next_state)[0]
    cont = ~np.asarray(batch.done[:-1])
    np.testing.assert_array_equal(np.asarray(s0[1:])[cont], np.asarray(s_next[:-1])[cont])
    # the masked action (index 3 of MaskedBandit) is never played
    assert not np.any(np.asarray(batch.actions) == 3)
    after = [np.asarray(x) for x in jax.tree.leaves(state)]
    for a, b in zip(before, after, strict=True):
        np.testing.assert_array_equal(a, b)
    again = collect(state, jax.random.PRNGKey(1), 5)
    np.testing.assert_array_equal(batch.actions, again.actions)
    other = collect(state, jax.random.PRNGKey(2), 5)
    assert not np.array_equal(batch.actions, other.actions)


def indexed_batch(T, E, N, carries):
    """A Batch whose every entry names its place: ``10 * (t * E + e) + agent`` (agent 0 on
    per-step leaves), carries ``10 * e + agent``; obs and carries also have a feature axis."""
    cell = np.arange(T * E, dtype=np.float32).reshape(T, E)
    per_agent = 10 * cell[..., None] + np.arange(N, dtype=np.float32)  # [T, E, N]
    carry = 10 * np.arange(E, dtype=np.float32)[:, None] + np.arange(N)  # [E, N]
    rollout = ppo.Rollout(
        obs=np.repeat(per_agent[..., None], 3, axis=-1),
        world_state=None,
        avail=None,
        action=per_agent.astype(np.int32),
        log_prob=per_agent,
        value=per_agent,
        reward=per_agent,
        done=10 * cell,
        reset=10 * cell,
    )
    h = np.repeat(carry[..., None], 2, axis=-1)  # [E, N, H]
    return ppo.Batch(
        rollout=rollout,
        advantages=per_agent,
        targets=per_agent,
        carries=(h, h + 1000) if carries else None,
    )


class MinibatchTest(chex.TestCase):
    T, E, N = 4, 6, 2

    @chex.variants(with_jit=True, without_jit=True)
    def test_cells_keep_their_agents_together(self):
        batch = indexed_batch(self.T, self.E, self.N, carries=False)
        perm = np.random.default_rng(0).permutation(self.T * self.E).astype(np.int32)
        shuffled = self.variant(lambda b, p: ppo.shuffle_units(b, p, sequences=False))(batch, perm)
        assert shuffled.carries is None
        expected = 10 * perm[:, None] + np.arange(self.N)  # [T * E, N]
        for leaf in (shuffled.advantages, shuffled.rollout.action, shuffled.rollout.value):
            np.testing.assert_array_equal(leaf, expected)
        np.testing.assert_array_equal(shuffled.rollout.obs[..., 1], expected)
        np.testing.assert_array_equal(shuffled.rollout.done, 10 * perm)

        parts = self.variant(lambda b: ppo.split_units(b, 3, sequences=False))(shuffled)
        chex.assert_shape(parts.advantages, (3, 8, self.N))
        chex.assert_shape(parts.rollout.obs, (3, 8, self.N, 3))
        np.testing.assert_array_equal(parts.advantages.reshape(-1, self.N), expected)

    @chex.variants(with_jit=True, without_jit=True)
    def test_sequences_stay_whole_with_their_carries(self):
        batch = indexed_batch(self.T, self.E, self.N, carries=True)
        perm = np.array([4, 1, 5, 0, 3, 2], np.int32)
        shuffled = self.variant(lambda b, p: ppo.shuffle_units(b, p, sequences=True))(batch, perm)
        t = np.arange(self.T)[:, None, None]
        agent = np.arange(self.N)
        expected = 10 * (t * self.E + perm[None, :, None]) + agent  # [T, E, N]
        np.testing.assert_array_equal(shuffled.advantages, expected)
        np.testing.assert_array_equal(shuffled.rollout.reset, expected[..., 0])
        actor, critic = shuffled.carries
        np.testing.assert_array_equal(actor[..., 0], 10 * perm[:, None] + agent)
        np.testing.assert_array_equal(critic[..., 1], 1000 + 10 * perm[:, None] + agent)

        parts = self.variant(lambda b: ppo.split_units(b, 2, sequences=True))(shuffled)
        chex.assert_shape(parts.advantages, (2, self.T, 3, self.N))
        chex.assert_shape(parts.rollout.obs, (2, self.T, 3, self.N, 3))
        chex.assert_shape(parts.carries[0], (2, 3, self.N, 2))
        for i in range(2):  # each part holds whole sequences, each beside its own carry
            envs = perm[3 * i : 3 * i + 3]
            np.testing.assert_array_equal(parts.advantages[i], expected[:, 3 * i : 3 * i + 3])
            np.testing.assert_array_equal(parts.carries[0][i, ..., 0], 10 * envs[:, None] + agent)

    @chex.variants(with_jit=True, without_jit=True)
    @parameterized.named_parameters(("cells", False, 4), ("sequences", True, 3))
    def test_minibatches_hold_every_unit_once(self, sequences, parts):
        units = self.E if sequences else self.T * self.E
        batch = indexed_batch(self.T, self.E, self.N, carries=sequences)
        mbs = self.variant(lambda k, b: ppo.minibatches(k, b, parts, sequences))(
            jax.random.PRNGKey(7), batch
        )
        adv = np.asarray(mbs.advantages)[..., 0]  # agent 0: 10 * cell
        assert adv.shape[0] == parts
        if sequences:  # [parts, T, E / parts]: each column one env, the same at every t
            env = (adv // 10) % self.E
            assert (env == env[:, :1]).all()
            drawn = env[:, 0].ravel()
        else:  # [parts, U / parts]
            drawn = (adv // 10).ravel()
        np.testing.assert_array_equal(np.sort(drawn), np.arange(units))
        assert not np.array_equal(drawn, np.arange(units))  # shuffled


@pytest.mark.parametrize(
    "recurrent", [False, pytest.param(True, marks=pytest.mark.slow)], ids=["ff", "gru"]
)
def test_nstep_returns_with_a_soft_target_critic_and_two_optimizers(recurrent):
    """EPyMARL's MAPPO pieces: n-step targets bootstrapped from a target critic that
    moves by tau toward the critic once per update; the actor's and the critic's
    parameters stepped by their own optimisers; the bandit is still learned."""
    env = ArrayEnv(MaskedBandit())
    kw = {"recurrent": True, "gru_hidden_dim": 16, "num_minibatches": 4} if recurrent else {}
    cfg = small_cfg(name="mappo", returns="nstep", n_step=3, target_critic_tau=0.25,
                    separate_optimizers=True, normalize_advantages=False, **kw)  # fmt: skip
    learner = ppo.make_learner(cfg, env, identity_shaper())
    s0 = learner.init(jax.random.PRNGKey(0))
    chex.assert_trees_all_equal(s0.target_params, s0.params)
    s1, _ = jax.jit(learner.update)(s0)
    expected = jax.tree.map(lambda t, p: 0.75 * t + 0.25 * p, s0.target_params, s1.params)
    chex.assert_trees_all_close(s1.target_params, expected, rtol=1e-6, atol=1e-7)
    labels = ppo.critic_or_actor_labels(s0.params)
    assert set(jax.tree.leaves(labels)) == {"actor", "critic"}
    if not recurrent:  # learned, and the masked action never played
        state, _ = train(cfg, env)
        m = jax.vmap(make_evaluate(env, learner.policy, 8, 50))(
            state, jax.random.split(jax.random.PRNGKey(1), 2)
        )
        np.testing.assert_allclose(m["eval_return"], 4.0, atol=1e-5)


@pytest.mark.parametrize(
    "kw, message",
    [
        ({"target_critic_tau": 0.01}, "set algo.returns=nstep"),
        ({"returns": "td"}, "gae or nstep"),
        ({"returns": "nstep", "n_step": 0}, "must be >= 1"),
        ({"returns": "nstep", "target_critic_tau": 2.0}, r"in \[0, 1\]"),
    ],
)
def test_bad_return_settings_are_refused(kw, message):
    from jaxmarl_llm.errors import ConfigError

    with pytest.raises(ConfigError, match=message):
        ppo.check_config(small_cfg(**kw))

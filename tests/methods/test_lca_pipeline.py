"""LCA on a toy race: pairs, labels, the fitted potential and the shaper inside a learner."""

import functools
import json

import chex
import jax
import jax.numpy as jnp
import numpy as np
import pytest
from toy_envs import RaceLine

from envs.array_env import ArrayEnv
from jaxmarl_llm.lm.factory import make_backend
from jaxmarl_llm.methods.lca import LCAConfig, potential_rewards, prepare
from jaxmarl_llm.methods.lca.labels import TextQuery, backend_labels, heuristic_labels
from jaxmarl_llm.methods.lca.pairs import sample_transitions
from jaxmarl_llm.methods.lca.potential import role_groups
from jaxmarl_llm.shaper import shaped_reward
from jaxmarl_llm.transitions import TransitionBatch

SMALL = dict(num_pairs=600, fit_steps=800, batch_size=128, rollout_envs=8, hidden=[32])


def _env(**kw):
    return ArrayEnv(RaceLine(**kw))


def test_sample_transitions_are_sequential_steps():
    env = _env()
    t = sample_transitions(env, jax.random.PRNGKey(0), 40, "mixed", 8)
    chex.assert_shape(t.actions, (40, 2))
    move = jnp.where(t.actions == 1, -1, jnp.where(t.actions == 2, 1, 0))
    expect = jnp.clip(t.state.pos + move, 0, env.env.length - 1)
    np.testing.assert_array_equal(t.next_state.pos, expect)
    # uniform half reaches cells a random walk from the left half rarely reaches in time
    assert int(t.state.pos.max()) >= env.env.length - 2


@pytest.mark.parametrize("accuracy,queries", [(1.0, 1), (0.7, 1), (0.7, 4)])
def test_heuristic_labels_follow_the_potential_with_flips(accuracy, queries):
    env = _env()
    t = sample_transitions(env, jax.random.PRNGKey(1), 2000, "uniform", 8)
    conf, count = heuristic_labels(env.env, jax.random.PRNGKey(2), t, accuracy, queries)
    moved = t.next_state.pos != t.state.pos
    right = t.next_state.pos > t.state.pos
    assert bool(jnp.all(count == queries))
    assert bool(jnp.all(jnp.where(~moved, conf == 0.5, True)))  # equal states: ties
    decided = moved & (conf != 0.5)
    acc = float(jnp.where(decided, (conf > 0.5) == right, False).sum() / decided.sum())
    if queries == 1:
        assert abs(acc - accuracy) < 0.04
    else:  # the majority of 4 answers at 70% is right more often than one answer
        assert acc > 0.8


def test_text_labels_through_scripted_backend_match_array_teacher(tmp_path):
    env = _env(num_agents=2, length=5)
    t = sample_transitions(env, jax.random.PRNGKey(3), 24, "uniform", 8)
    backend = make_backend("scripted", store=tmp_path / "labels.sqlite")
    conf, count, report = backend_labels(env.env, backend, t, TextQuery(), progress=False)
    # a perfect teacher agrees with the heuristic whatever order the states were shown in
    expect = np.where(
        t.next_state.pos > t.state.pos, 1.0, np.where(t.next_state.pos < t.state.pos, 0.0, 0.5)
    )
    np.testing.assert_array_equal(conf, expect)
    assert report.abstained == 0 and (count == 1).all()
    # replay from the store gives the same labels without the teacher
    replay = make_backend(
        "scripted", store=tmp_path / "labels.sqlite", cache_mode="replay", noise={"mistake": 1.0}
    )
    conf2, _, _ = backend_labels(env.env, replay, t, TextQuery(), progress=False)
    np.testing.assert_array_equal(conf2, conf)


@pytest.mark.slow
def test_prepare_learns_a_potential_that_rewards_progress_and_zero_for_noop(tmp_path):
    env = _env()
    cfg = LCAConfig(**SMALL)
    res = prepare(env, cfg, seed=0, artifact_dir=tmp_path, progress=False)
    assert res.report["val_accuracy_vs_heuristic"] > 0.95
    assert res.report["label_accuracy_vs_heuristic"] == 1.0
    state = env.env.random_state(jax.random.PRNGKey(0)).replace(pos=jnp.array([2, 2]))
    right = state.replace(pos=jnp.array([3, 2]))
    r = potential_rewards(env.env, res.model, res.params, state, jnp.array([2, 0]), right)
    assert float(r[0]) > 0 and float(r[1]) == 0.0  # agent 1 stayed still: no reward
    left = state.replace(pos=jnp.array([1, 2]))
    r = potential_rewards(env.env, res.model, res.params, state, jnp.array([1, 0]), left)
    assert float(r[0]) < 0
    # artifacts reload instead of relabelling and refitting
    again = prepare(env, cfg, seed=0, artifact_dir=tmp_path, progress=False)
    assert "loaded_from" in again.report
    chex.assert_trees_all_close(again.params, res.params)
    report = json.loads((tmp_path / "report.json").read_text())
    assert report["pairs"] == 600
    # a different setting is a different fingerprint: no stale reuse
    other = prepare(
        env, LCAConfig(**{**SMALL, "accuracy": 0.8}), seed=0, artifact_dir=tmp_path, progress=False
    )
    assert "loaded_from" not in other.report


@pytest.mark.slow  # two potential models fitted: a statistical comparison
def test_four_queries_at_70_percent_beat_one():
    env = _env(length=8)
    acc = {}
    for q in (1, 4):
        cfg = LCAConfig(**{**SMALL, "num_pairs": 400, "accuracy": 0.7, "num_queries": q})
        acc[q] = prepare(env, cfg, seed=1, progress=False).report["val_accuracy_vs_heuristic"]
    assert acc[4] >= acc[1]


@pytest.mark.parametrize("jit", [True, False])
def test_shaper_adds_the_potential_reward_over_any_batch_shape(jit):
    env = _env()
    res = prepare(env, LCAConfig(**SMALL), seed=0, progress=False)
    from jaxmarl_llm.methods.lca import potential_shaper

    shaper = potential_shaper(env.env, res.model, res.params)
    t = sample_transitions(env, jax.random.PRNGKey(5), 12, "uniform", 8)
    lead = (3, 4)
    reshape = lambda x: x.reshape((*lead, *x.shape[1:]))  # noqa: E731
    batch = TransitionBatch(
        obs=None,
        actions=reshape(t.actions),
        next_obs=None,
        reward=jnp.ones((*lead, 2)),
        done=jnp.zeros(lead, bool),
        state=jax.tree.map(reshape, t.state),
        next_state=jax.tree.map(reshape, t.next_state),
    )

    def fn(params, batch):
        return shaped_reward(shaper, params, batch)

    out = (jax.jit(fn) if jit else fn)(shaper.params, batch)
    chex.assert_shape(out, (*lead, 2))
    flat = potential_rewards(env.env, res.model, res.params, t.state, t.actions, t.next_state)
    np.testing.assert_allclose(out.reshape(12, 2), 1.0 + flat, rtol=1e-5, atol=1e-6)


def test_roles_give_one_model_per_role():
    assert role_groups(RaceLine(roles=("a", "a"))) is None
    assert role_groups(RaceLine(num_agents=3, roles=("g", "o", "g"))) == (0, 1, 0)


def test_lca_needs_a_credit_env():
    from toy_envs import MaskedBandit

    with pytest.raises(ValueError, match="MaskedBandit lacks"):
        prepare(ArrayEnv(MaskedBandit()), LCAConfig(**SMALL), progress=False)


def test_heuristic_potential_shaper_is_the_scaled_heuristic_difference():
    from jaxmarl_llm.methods.handcrafted import heuristic_potential_shaper
    from jaxmarl_llm.shaper import CombineMode

    env = _env()
    shaper = heuristic_potential_shaper(env, CombineMode.add, 1.0, scale=0.5)
    t = sample_transitions(env, jax.random.PRNGKey(6), 32, "uniform", 8)
    batch = TransitionBatch(
        obs=None,
        actions=t.actions,
        next_obs=None,
        reward=jnp.zeros((32, 2)),
        done=jnp.zeros((32,), bool),
        state=t.state,
        next_state=t.next_state,
    )
    out = jax.jit(lambda p, b: shaper.apply(p, b))(shaper.params, batch)
    expect = jnp.where(t.actions == 0, 0.0, 0.5 * (t.next_state.pos - t.state.pos))
    np.testing.assert_allclose(out, expect)


def test_rewards_from_uninformative_labels_stay_small():
    # eq. 4's robustness: rankings at chance give near-flat potentials, and the reward
    # scale must not blow them back up to the size of an informed model's steps
    env = _env()
    step = lambda r: r["scale"] * r["mean_abs_potential_step"]  # noqa: E731
    clean = prepare(env, LCAConfig(**SMALL), seed=0, progress=False).report
    chance = prepare(env, LCAConfig(**{**SMALL, "accuracy": 0.5}), seed=0, progress=False).report
    assert step(clean) == pytest.approx(LCAConfig.step_scale, rel=1e-4)
    assert chance["mean_abs_potential_step"] < LCAConfig.min_step
    assert step(chance) < 0.5 * step(clean)


def test_scripted_pairs_reach_the_late_stages_random_play_misses():
    import envs

    env = envs.make_array_env("victim_rubble")
    key = jax.random.PRNGKey(3)
    scripted = sample_transitions(env, key, 2000, "scripted", 32, 0.3)
    random = sample_transitions(env, key, 2000, "rollout", 32)
    chex.assert_shape(scripted.actions, (2000, 2))
    done = lambda t: np.asarray(t.state.flags[:, :5]).sum(-1)  # noqa: E731
    # mostly the scripted policy's own moves; with epsilon 0 every move is the policy's
    assert (done(scripted) >= 3).mean() > 0.3 > (done(random) >= 3).mean()
    greedy = sample_transitions(env, key, 64, "scripted", 32, 0.0)
    expect = jax.vmap(env.env.greedy_actions)(greedy.state)
    np.testing.assert_array_equal(np.asarray(greedy.actions), np.asarray(expect))


def test_scripted_pairs_need_a_scripted_policy():
    with pytest.raises(ValueError, match="pair_source=scripted needs an env with a scripted"):
        sample_transitions(_env(), jax.random.PRNGKey(0), 16, "scripted", 8)
    with pytest.raises(ValueError, match="scripted_epsilon"):
        LCAConfig.check(LCAConfig(scripted_epsilon=1.5))


def test_labels_through_an_openai_compatible_endpoint_report_tokens(tmp_path):
    """LCA ranks through the http backend (here a local OpenAI-compatible server whose
    model always answers "2"): every pair is answered, and the tokens are accounted."""
    from jaxmarl_llm.lm.backend import Backend, Completion
    from jaxmarl_llm.lm.server import serve

    class SaysTwo(Backend):
        kind, model = "says_two", "two"

        def generate(self, requests):
            return [Completion("2", 7, 1) for _ in requests]

    with serve(SaysTwo()) as url:
        cfg = LCAConfig(
            **{**SMALL, "num_pairs": 20, "fit_steps": 10},
            labeler="backend",
            backend="http",
            backend_options={"base_url": url, "model": "two"},
        )
        res = prepare(_env(), cfg, seed=0, artifact_dir=tmp_path, progress=False)
    r = res.report
    assert r["backend"] == "http" and r["labeling"]["answered"] == 20
    asked = r["cache"]["misses"]  # identical prompts are answered once, from the store
    assert 0 < asked <= 20
    assert r["usage"]["prompt_tokens"] == asked * 7 and r["usage"]["completion_tokens"] == asked
    # "2" means the state shown second is better: half the prompts show s' first
    assert 0.0 < float(np.mean(np.load(tmp_path / "pairs.npz")["confidence"])) < 1.0


@functools.cache
def _completion_pool():
    import envs
    from jaxmarl_llm.methods.lca.pairs import completion_transitions

    env = envs.make_array_env("victim_rubble")
    t, completed = jax.jit(completion_transitions, static_argnums=(0, 2, 3))(
        env, jax.random.PRNGKey(4), 16, 2048
    )
    return env, t, np.asarray(completed).reshape(2048, 16)


def test_completion_pool_plays_without_step_limit_until_the_task_is_completed():
    env, t, completed = _completion_pool()
    raw = env.env
    won = np.asarray(jax.vmap(raw.won)(t.next_state)).reshape(2048, 16)
    step = np.asarray(t.state.step).reshape(2048, 16)
    assert won.any() and (step > raw.max_steps).any()  # no time limit
    for e in range(16):
        ends = np.nonzero(won[:, e])[0]
        last = ends[-1] if ends.size else -1
        # exactly the steps up to the last completion belong to completed trajectories
        np.testing.assert_array_equal(completed[:, e], np.arange(2048) <= last)
        # after a completion the env starts over from a reset state
        for k in ends[ends < 2047]:
            assert step[k + 1, e] == 0
    flags = np.asarray(t.state.flags).reshape(2048, 16, -1)
    assert (flags[..., :5].sum(-1) == 5)[completed].any()  # the last stage is on the path


def test_completion_pairs_cover_the_stages_random_play_under_the_limit_misses():
    import envs

    env = envs.make_array_env("victim_rubble")
    key = jax.random.PRNGKey(3)
    full = sample_transitions(env, key, 2000, "completion", 32, horizon=4096)
    limited = sample_transitions(env, key, 2000, "rollout", 32)
    chex.assert_shape(full.actions, (2000, 2))
    done = lambda t: np.asarray(t.state.flags[:, :5]).sum(-1)  # noqa: E731
    assert (done(full) >= 4).mean() > 5 * max((done(limited) >= 4).mean(), 0.01)


def test_completion_pairs_need_a_completable_task_and_enough_completions():
    import envs

    with pytest.raises(ValueError, match="needs an env whose task can be completed"):
        sample_transitions(_env(), jax.random.PRNGKey(0), 16, "completion", 8)
    with pytest.raises(ValueError, match="completed the task on only 0 steps"):
        sample_transitions(
            envs.make_array_env("victim_rubble"),
            jax.random.PRNGKey(0),
            16,
            "completion",
            4,
            horizon=8,
        )


def test_on_path_agreement_scores_the_potential_along_scripted_play():
    import envs
    from jaxmarl_llm.methods.lca.on_path import on_path_agreement

    env = envs.make_array_env("victim_rubble")
    key = jax.random.PRNGKey(0)
    phi = env.env.heuristic_potential
    same = on_path_agreement(env, lambda _, s: phi(s), key, 16)
    flipped = on_path_agreement(env, lambda _, s: -phi(s), key, 16)
    assert same["agreement"] == 1.0 and flipped["agreement"] == 0.0
    assert same["moves"] == flipped["moves"] > 100
    # every stage of the task is walked, by both roles
    assert set(same["by_stage"]) >= {"0", "1", "2", "3", "4", "5"}
    counts = sum(n for row in same["by_stage"].values() for _, n in row.values())
    assert counts == same["moves"]
    # moving along x only: right on some stretches, wrong on others
    east = on_path_agreement(env, lambda _, s: (s.pos % env.env.width).astype(float), key, 16)
    assert 0.0 < east["agreement"] < 1.0 and east["worst_stage"] < east["agreement"]
    assert on_path_agreement(_env(), lambda _, s: s.pos.astype(float), key, 4) is None
    # a parameterised score: the same program for any parameters (they are traced)
    scaled = lambda w, s: w * phi(s)  # noqa: E731
    assert on_path_agreement(env, scaled, key, 16, params=jnp.float32(2.0))["agreement"] == 1.0
    assert on_path_agreement(env, scaled, key, 16, params=jnp.float32(-1.0))["agreement"] == 0.0


def test_reports_carry_on_path_agreement_where_the_env_has_a_scripted_policy():
    import envs

    cfg = LCAConfig(
        num_pairs=400,
        fit_steps=50,
        batch_size=64,
        hidden=[16],
        pair_source="completion",
        rollout_envs=16,
        completion_horizon=1024,
    )
    report = prepare(envs.make_array_env("victim_rubble"), cfg, seed=0, progress=False).report
    path = report["on_path"]
    assert 0.0 <= path["worst_stage"] <= path["agreement"] <= 1.0 and path["moves"] > 1000
    assert "on_path" not in prepare(_env(), LCAConfig(**SMALL), seed=0, progress=False).report

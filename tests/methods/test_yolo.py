"""YOLO-MARL's planning bonus: known answers, a run, and a model's code through the sandbox."""

import json

import jax
import jax.numpy as jnp
import numpy as np
import pytest

import envs
from envs.lbf import EAST, LOAD, NONE, WEST, LBFState
from jaxmarl_llm.config import build_config
from jaxmarl_llm.methods.yolo import YOLOConfig, planning_bonus
from jaxmarl_llm.methods.yolo.lbf import REFERENCE_PLANNING_FUNCTION
from jaxmarl_llm.methods.yolo.shaper import YOLOParams, env_tasks, obtain_plan
from jaxmarl_llm.runner import run_experiment

ENV = "lbf:8x8-2p-2f-coop"


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


@pytest.mark.parametrize("jit", [False, True], ids=["eager", "jit"])
def test_the_bonus_rewards_actions_that_carry_out_the_plan(jit):
    aenv = envs.make_array_env(ENV)
    tasks, plan, _ = obtain_plan(aenv, YOLOConfig(), None)
    params = YOLOParams(jnp.float32(0.02), jnp.float32(0.01))
    bonus = lambda s, a: planning_bonus(tasks, plan, params, s, jnp.asarray(a, jnp.int32))
    bonus = jax.jit(bonus) if jit else bonus
    s = _state()  # both target food 0 (nearest in total); agent 1 is already next to it
    np.testing.assert_allclose(bonus(s, [EAST, LOAD]), [0.02, 0.02])  # approach / load
    np.testing.assert_allclose(bonus(s, [EAST, NONE]), [0.02, -0.01])  # no parking by food
    np.testing.assert_allclose(bonus(s, [WEST, EAST]), [-0.01, -0.01])  # walk away
    np.testing.assert_allclose(bonus(s, [LOAD, LOAD]), [-0.01, 0.02])  # 0 is not there yet
    # once both are adjacent the plan says pick up: only LOAD matches
    both = s.replace(agent_pos=jnp.array([[3, 2], [3, 4]], jnp.int32))
    np.testing.assert_allclose(bonus(both, [LOAD, NONE]), [0.02, -0.01])
    # any leading batch shape
    batch = jax.tree.map(lambda x: jnp.stack([x, x, x]), s)
    assert bonus(batch, jnp.array([[EAST, NONE]] * 3)).shape == (3, 2)


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
    assert plan(tasks.interpret(_state())).shape == (2,)
    with pytest.raises(ValueError, match="no task set for FastSimpleSpread; .* lbf"):
        env_tasks(envs.make_array_env("mpe:simple_spread_3"))

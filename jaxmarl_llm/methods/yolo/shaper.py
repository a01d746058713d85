"""YOLO-MARL's planning bonus as a shaper (``shaping.name: yolo``).

Before training, once per run: a planning function is obtained (the scripted backend's
reference function, or a language model answering the strategy prompt and then the
planning-function prompt of appendix C), compiled by the sandbox and kept with its
prompts in ``RUN_DIR/yolo/``. During training, inside the scan, every agent gets
``+reward`` when its action carries out the task the planning function assigns it and
``-penalty`` otherwise (appendix A, Table 2), added to the env reward.
"""

from __future__ import annotations

import dataclasses
import inspect
import json
from pathlib import Path
from typing import Any

import jax
import jax.numpy as jnp
from flax import struct

from envs.array_env import ArrayEnv
from jaxmarl_llm.methods.yolo import lbf
from jaxmarl_llm.methods.yolo.sandbox import UnsafeCode, compile_function, compile_with_retries
from jaxmarl_llm.shaping.base import CombineMode, Shaper, TransitionBatch

PLANNERS = ("reference", "backend")


@dataclasses.dataclass
class YOLOConfig:
    """Keys of ``shaping.kwargs`` for ``shaping.name: yolo``."""

    reward: float = 0.005  # r' (Table 2, LBF with MAPPO)
    penalty: float = 0.005  # p'
    planner: str = "reference"  # reference: the scripted answer; backend: ask a model
    backend: str = "gemma"
    backend_options: dict[str, Any] = dataclasses.field(default_factory=dict)
    attempts: int = 3  # planning functions asked for before giving up (refusals fed back)
    max_tokens: int = 1024
    use_strategy: bool = True  # ablation: skip strategy generation


@dataclasses.dataclass(frozen=True)
class EnvTasks:
    """What YOLO-MARL needs to know about one environment."""

    interpret: Any
    constants: dict[str, int]
    matches: Any  # (env_state, tasks [N], actions [N]) -> bool [N]
    reference: str
    description: str
    rules: str
    tasks_text: str


def env_tasks(env: ArrayEnv) -> EnvTasks:
    from envs.lbf import LevelBasedForaging

    raw = env.env
    if isinstance(raw, LevelBasedForaging):
        f = raw.num_food
        return EnvTasks(
            interpret=lbf.interpret,
            constants=lbf.task_constants(f),
            matches=lbf.action_matches,
            reference=lbf.REFERENCE_PLANNING_FUNCTION,
            description=(
                f"This Level-Based Foraging environment has {raw.num_agents} agents and {f} "
                "food items on a grid. Your goal is to make the agents collaborate and pick "
                "up all the food."
            ),
            rules=(
                "1. The Pickup action is successful if all the agents pick up the same target "
                "together.\n2. The Pickup action is only successful if the sum of the levels "
                "of the agents is equal to or higher than the level of the food.\n3. The "
                "Pickup action is only allowed if the agents are within a distance of 1 "
                "relative to the food.\n4. Success Condition: All food must be picked up "
                f"before {raw.max_steps} steps."
            ),
            tasks_text="\n".join(
                [f"{i + 1}. Target food {i} (TARGET_FOOD_{i})" for i in range(f)]
                + [f"{f + 1}. Pickup (PICKUP)"]
            ),
        )
    raise ValueError(
        f"YOLO-MARL has no task set for {type(raw).__name__}; environments with one: "
        "lbf:* (MPE and SMAX task sets are not written yet)"
    )


@struct.dataclass
class YOLOParams:
    reward: jax.Array  # [] r'
    penalty: jax.Array  # [] p'


def planning_bonus(tasks: EnvTasks, plan, params: YOLOParams, state, actions) -> jax.Array:
    """``[..., N]``: ``+r'`` where the action carries out the planned task, else ``-p'``."""
    lead = actions.shape[:-1]
    flat_state = jax.tree.map(lambda x: x.reshape((-1, *x.shape[len(lead) :])), state)
    flat_actions = actions.reshape((-1, actions.shape[-1]))

    def one(s, a):
        return tasks.matches(s, plan(tasks.interpret(s)), a)

    ok = jax.vmap(one)(flat_state, flat_actions).reshape(actions.shape)
    return jnp.where(ok, params.reward, -params.penalty)


def obtain_plan(env: ArrayEnv, cfg: YOLOConfig, artifact_dir: Path | None):
    """The compiled planning function and a record of how it was obtained."""
    tasks = env_tasks(env)
    _, sample = env.env.reset(jax.random.PRNGKey(0))
    sample_args = (tasks.interpret(sample),)

    def compile_source(source: str):
        return compile_function(
            source,
            "planning_function",
            sample_args,
            out_shape=(env.num_agents,),
            constants=tasks.constants,
        )

    record: dict[str, Any] = {"planner": cfg.planner}
    if cfg.planner == "reference":
        plan, source, errors = compile_source(tasks.reference), tasks.reference, []
    else:
        plan, source, errors, record = _ask_model(env, cfg, tasks, compile_source, artifact_dir)
    record.update({"source": source, "refusals": errors})
    if artifact_dir is not None:
        artifact_dir.mkdir(parents=True, exist_ok=True)
        (artifact_dir / "planning_function.py").write_text(source)
        (artifact_dir / "record.json").write_text(json.dumps(record, indent=2))
    return tasks, plan, record


def _ask_model(env, cfg: YOLOConfig, tasks: EnvTasks, compile_source, artifact_dir):
    from jaxmarl_llm.lm import templates
    from jaxmarl_llm.lm.backend import Request, SamplingParams
    from jaxmarl_llm.lm.factory import make_backend
    from jaxmarl_llm.lm.parsers import ParseError, parse_python_block

    store = str(artifact_dir / "answers.sqlite") if artifact_dir is not None else None
    backend = make_backend(cfg.backend, store=store, **cfg.backend_options)
    params = SamplingParams(max_tokens=cfg.max_tokens)
    common = dict(
        environment_description=tasks.description,
        game_rules=tasks.rules,
        task_assignment=tasks.tasks_text,
    )
    record: dict[str, Any] = {"planner": "backend", "backend": cfg.backend}
    try:
        strategy = ""
        if cfg.use_strategy:
            prompt = templates.render("yolo_strategy", **common)
            strategy = backend.generate([Request(prompt, params=params)])[0].text
            record["strategy_prompt"], record["strategy"] = prompt, strategy
        prompt = templates.render(
            "yolo_planning_function",
            **common,
            strategy=strategy or "(none given)",
            interpretation_function=inspect.getsource(tasks.interpret),
            agent_names=", ".join(env.agents),
        )
        record["planning_prompt"] = prompt

        def ask(previous_error: str | None) -> str:
            text = (
                prompt
                if previous_error is None
                else (
                    f"{prompt}\n\nYour previous answer was rejected: {previous_error}\n"
                    "Answer again with a corrected function."
                )
            )
            answer = backend.generate([Request(text, params=params)])[0].text
            try:
                return parse_python_block(answer, "planning_function")
            except ParseError as e:
                return f"# unparsable answer: {e.reason}"

        plan, source, errors = compile_with_retries(ask, compile_source, cfg.attempts)
    finally:
        backend.close()
    return plan, source, errors, record


def yolo_shaper(env: ArrayEnv, cfg: YOLOConfig, mode, coef, artifact_dir) -> Shaper:
    if cfg.planner not in PLANNERS:
        raise ValueError(f"planner={cfg.planner!r}; valid choices: {', '.join(PLANNERS)}")
    if cfg.reward < 0 or cfg.penalty < 0 or cfg.attempts < 1:
        raise ValueError("reward and penalty must be >= 0 and attempts >= 1")
    try:
        tasks, plan, record = obtain_plan(env, cfg, artifact_dir)
    except UnsafeCode as e:
        raise ValueError(f"YOLO-MARL: no usable planning function: {e}") from e
    print(
        f"YOLO-MARL: planning function from {record['planner']} ({len(record['refusals'])} refused)"
    )

    def apply(p: YOLOParams, batch: TransitionBatch) -> jax.Array:
        return planning_bonus(tasks, plan, p, batch.state, batch.actions)

    params = YOLOParams(jnp.asarray(cfg.reward, jnp.float32), jnp.asarray(cfg.penalty, jnp.float32))
    return Shaper(
        apply=apply,
        params=params,
        fields=("actions", "state"),
        mode=CombineMode(mode),
        coef=coef,
        name="yolo",
    )

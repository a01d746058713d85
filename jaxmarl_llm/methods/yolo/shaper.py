"""YOLO-MARL's planning bonus as a shaper (``shaping.name: yolo``).

Before training, once per run: a planning function is obtained (the scripted backend's
reference function, or a language model answering the strategy prompt and then the
planning-function prompt of appendix C), compiled by the sandbox and kept with its
prompts in ``RUN_DIR/yolo/``. During training, inside the scan (or when a replay batch
is sampled), every agent gets ``+reward`` when its action carries out the task the
planning function assigns it and ``-penalty`` otherwise (appendix A, Table 2), added to
the env reward (``combine: per_agent``), or every agent gets the sum of all agents'
bonuses (``combine: team_sum``, Algorithm 1). Task sets: LBF, MPE simple spread and SMAX
(``env_tasks``).

``planner: file`` compiles an answer kept in ``answer_file`` (a model's answer saved
elsewhere, e.g. one printed in a paper, as bare code or with a fenced block) through the
same sandbox: the way to replay a model's code without the model. The paper's own
LLM-written LBF reward function, trained on alone, gives the near-zero return of its
Fig. 7. ``planner: scripted_noisy`` is the reference plan made wrong on a set fraction of
(state, agent) pairs (``noisy_plan``): how good a plan must be.

Ablations (they need ``planner: backend`` or ``file``: they change what a model is shown
or asked):
``use_strategy: false`` skips the strategy prompt; ``use_interpretation: false`` shows
the raw observation layout instead of the interpretation function, and the model's code
reads ``{"observation": [N, D]}``; ``function: reward`` asks for ``compute_reward`` too
(section 6.3), whose output replaces the bonus.
"""

from __future__ import annotations

import dataclasses
import functools
import inspect
import json
import logging
import textwrap
from pathlib import Path
from typing import Any

import jax
import jax.numpy as jnp
from flax import struct

from envs.array_env import ArrayEnv
from envs.capabilities import YoloTaskSet, require
from jaxmarl_llm.errors import RunError
from jaxmarl_llm.methods.yolo import lbf, mpe, smax
from jaxmarl_llm.methods.yolo.noisy_plan import noisy_planning
from jaxmarl_llm.methods.yolo.sandbox import UnsafeCode, compile_function, compile_with_retries
from jaxmarl_llm.shaper import CombineMode, Shaper
from jaxmarl_llm.transitions import TransitionBatch

logger = logging.getLogger(__name__)

PLANNERS = ("reference", "backend", "file", "scripted_noisy")
FUNCTIONS = ("planning", "reward")
COMBINES = ("per_agent", "team_sum")
UNPARSABLE = "# unparsable answer:"


@dataclasses.dataclass
class YOLOConfig:
    """Keys of ``shaping.kwargs`` for ``shaping.name: yolo``."""

    reward: float = 0.005  # r' (Table 2, LBF with MAPPO)
    penalty: float = 0.005  # p'
    # reference: the scripted answer; backend: ask a model; file: the answer in answer_file;
    # scripted_noisy: the reference plan with each agent's task replaced by a uniformly
    # drawn other task with probability 1 - plan_accuracy (a pure function of the state)
    planner: str = "reference"
    plan_accuracy: float = 1.0
    noise_seed: int = 0  # scripted_noisy: which fixed pattern of wrong tasks
    # per_agent: agent i trains on r_i + bonus_i; team_sum: every agent gets
    # r_i + sum_j bonus_j (Algorithm 1's R = r + sum_i delta r_i). QMIX/VDN's team reward
    # (team_reward: sum) already sums the agents' bonuses, so per_agent is Algorithm 1 there
    # and team_sum would count every bonus N times
    combine: str = "per_agent"
    answer_file: str | None = None
    backend: str = "gemma"
    backend_options: dict[str, Any] = dataclasses.field(default_factory=dict)
    attempts: int = 3  # planning functions asked for before giving up (refusals fed back)
    max_tokens: int = 1024
    use_strategy: bool = True  # ablation: skip strategy generation
    # ablation: no interpretation function; the model's code reads the raw observations
    use_interpretation: bool = True
    # planning: the bonus for actions that carry out the planned task (the method);
    # reward: the model also writes compute_reward, which is used instead (section 6.3)
    function: str = "planning"

    @staticmethod
    def check(cfg: YOLOConfig) -> None:
        if cfg.planner not in PLANNERS:
            raise ValueError(f"planner={cfg.planner!r}; valid choices: {', '.join(PLANNERS)}")
        if cfg.function not in FUNCTIONS:
            raise ValueError(f"function={cfg.function!r}; valid choices: {', '.join(FUNCTIONS)}")
        if cfg.combine not in COMBINES:
            raise ValueError(f"combine={cfg.combine!r}; valid choices: {', '.join(COMBINES)}")
        if not 0.0 <= cfg.plan_accuracy <= 1.0:
            raise ValueError(f"plan_accuracy={cfg.plan_accuracy} must be in [0, 1]")
        if cfg.plan_accuracy != 1.0 and cfg.planner != "scripted_noisy":
            raise ValueError(
                "plan_accuracy is only read by planner=scripted_noisy "
                f"(got planner={cfg.planner!r})"
            )
        if cfg.reward < 0 or cfg.penalty < 0 or cfg.attempts < 1:
            raise ValueError("reward and penalty must be >= 0 and attempts >= 1")
        if cfg.planner in ("reference", "scripted_noisy") and (
            cfg.function != "planning" or not cfg.use_interpretation
        ):
            raise ValueError(
                "function=reward and use_interpretation=false are ablations of what a model "
                "writes: they need planner=backend or planner=file (the reference answer, noisy "
                "or not, is a planning function over the interpreted state)"
            )
        if (cfg.planner == "file") != (cfg.answer_file is not None):
            raise ValueError(
                "planner=file reads its answer from answer_file, and answer_file is only "
                f"read by planner=file (got planner={cfg.planner!r}, "
                f"answer_file={cfg.answer_file!r})"
            )


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
    observation_text: str = ""  # the raw observation layout (no-interpretation ablation)


def env_tasks(env: ArrayEnv) -> EnvTasks:
    """The task set ``env`` declares (``envs.capabilities.YoloTaskSet``), sized for its
    raw jaxmarl environment."""
    family = require(env, YoloTaskSet, needed_by="YOLO-MARL").family
    build = {"lbf": _lbf_tasks, "spread": _spread_tasks, "smax": _smax_tasks}
    if family not in build:
        raise ValueError(f"YOLO-MARL has no task set {family!r}; known: {', '.join(build)}")
    return build[family](env.env)


def _lbf_tasks(raw) -> EnvTasks:
    f = raw.num_food
    return EnvTasks(
        interpret=lbf.make_interpret(raw.grid_size),
        constants=lbf.task_constants(f),
        matches=functools.partial(lbf.action_matches, grid_size=raw.grid_size),
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
        observation_text=(
            "Row i is agent i's observation: for each food (row, col, level), the food "
            "still on the grid first, row by row, then (-1, -1, 0) for each one collected; "
            "then for each agent, agent i first, (row, col, level). Target food k is the "
            "k-th food in this list."
        ),
        tasks_text="\n".join(
            [f"{i + 1}. Target food {i} (TARGET_FOOD_{i})" for i in range(f)]
            + [f"{f + 1}. Pickup (PICKUP)"]
        ),
    )


def _spread_tasks(raw) -> EnvTasks:
    n, L = raw.num_agents, raw.num_landmarks
    return EnvTasks(
        interpret=mpe.make_interpret(n),
        constants=mpe.task_constants(n, L),
        matches=mpe.make_action_matches(n),
        reference=mpe.REFERENCE_PLANNING_FUNCTION,
        description=(
            f"This Multi-Agent Particle Environment (MPE) multi-agent reinforcement "
            f"learning environment has {n} agents and {L} landmarks. Your goal is to make "
            "agents collaborate and cover all the landmarks."
        ),
        rules=(
            "1. Agents must cover all landmarks by minimizing the distances between each "
            "landmark, with each agent going to a unique landmark.\n2. Agents cannot "
            "collide with another agent. The collision threshold is 0.3."
        ),
        observation_text=(
            "Row i is agent i's observation: its velocity (2), its position (2), the "
            f"position of each of the {L} landmarks relative to it (2 each), the position "
            "of each other agent relative to it (2 each), then communication (zeros)."
        ),
        tasks_text="\n".join(
            [f"{j + 1}. Landmark {j} (LANDMARK_{j})" for j in range(L)]
            + [f"{L + 1}. No op (NO_OP)"]
        ),
    )


def _smax_tasks(raw) -> EnvTasks:
    allies, enemies = raw.num_allies, raw.num_enemies
    return EnvTasks(
        interpret=smax.make_interpret(raw),
        constants=smax.task_constants(),
        matches=smax.action_matches,
        reference=smax.REFERENCE_PLANNING_FUNCTION,
        description=(
            f"This SMAX (JAX StarCraft Multi-Agent Challenge) map has {allies} allied "
            f"units controlled by the agents and {enemies} enemy units controlled by a "
            "scripted policy. Your task is to use the unit information to win the battle "
            f"within {raw.max_steps} steps."
        ),
        rules=(
            "1. A unit can shoot an enemy within its shooting range (given per ally in "
            "the processed state).\n2. Success condition: eliminate all enemy units before "
            "the episode ends.\n3. Failure condition: the episode ends before all "
            "enemies are dead, or all agents die."
        ),
        observation_text=(
            "Row i is agent i's SMAX observation: for each other unit (allies, then "
            "enemies) health, relative x, relative y, previous movement x and y, and unit "
            "type bits, then its own health and unit type bits (zeros for unseen units)."
        ),
        tasks_text=(
            "1. Move (MOVE)\n2. Attack (ATTACK)\n3. Stop (STOP)\n"
            "4. None, only for dead agents (NONE)"
        ),
    )


@struct.dataclass
class YOLOParams:
    reward: jax.Array  # [] r'
    penalty: jax.Array  # [] p'


def planning_bonus(tasks: EnvTasks, plan, params: YOLOParams, state, actions) -> jax.Array:
    """``[..., N]``: ``+r'`` where the action carries out the planned task, else ``-p'``."""
    ok = _per_step(lambda s, a: tasks.matches(s, plan.tasks(s), a), state, actions)
    return jnp.where(ok, params.reward, -params.penalty)


def combine_bonus(bonus: jax.Array, how: str) -> jax.Array:
    """``bonus [..., N]`` as each agent receives it: its own (``per_agent``) or the sum
    over all agents (``team_sum``)."""
    if how == "per_agent":
        return bonus
    if how == "team_sum":
        return jnp.broadcast_to(bonus.sum(-1, keepdims=True), bonus.shape)
    raise ValueError(f"combine={how!r}; valid choices: {', '.join(COMBINES)}")


def _per_step(fn, state, actions) -> jax.Array:
    """``fn(state, actions [N]) -> [N]`` over any leading batch shape of ``actions``."""
    lead = actions.shape[:-1]
    flat_state = jax.tree.map(lambda x: x.reshape((-1, *x.shape[len(lead) :])), state)
    flat_actions = actions.reshape((-1, actions.shape[-1]))
    return jax.vmap(fn)(flat_state, flat_actions).reshape(actions.shape)


@dataclasses.dataclass(frozen=True)
class Plan:
    """What the model wrote, compiled: ``view`` (env state -> what its code reads),
    ``planning`` (view -> task per agent) and, in the reward ablation, ``reward``
    (view, tasks, actions -> reward per agent)."""

    view: Any
    planning: Any
    reward: Any = None

    def tasks(self, state) -> jax.Array:
        return self.planning(self.view(state))

    def rewards(self, state, actions) -> jax.Array:
        v = self.view(state)
        return self.reward(v, self.planning(v), actions)


def _identity(state):
    return state


def raw_view(env: ArrayEnv):
    """The no-interpretation ablation's input: every agent's raw observation ``[N, D]``."""

    def view(state) -> dict:
        return {"observation": env.stack_obs(env.env.get_obs(state))}

    return view


def split_functions(source: str) -> dict[str, str]:
    """Each top-level function of ``source`` as its own source (the reward ablation's
    answer holds two); refused if it does not parse."""
    import ast

    try:
        tree = ast.parse(source)
    except (SyntaxError, ValueError) as e:
        raise UnsafeCode(f"does not parse: {e}", getattr(e, "lineno", None)) from None
    return {
        node.name: ast.get_source_segment(source, node)
        for node in tree.body
        if isinstance(node, ast.FunctionDef)
    }


def obtain_plan(env: ArrayEnv, cfg: YOLOConfig, artifact_dir: Path | None):
    """``(tasks, plan, record)``: the env's task set, the compiled ``Plan`` and a record
    of how it was obtained."""
    YOLOConfig.check(cfg)
    tasks = env_tasks(env)
    view = tasks.interpret if cfg.use_interpretation else raw_view(env)
    _, sample = env.env.reset(jax.random.PRNGKey(0))
    sample_view = view(jax.tree.map(jnp.asarray, sample))
    n = env.num_agents
    int_sample = jnp.zeros((n,), jnp.int32)

    def compile_planning(source: str):
        return compile_function(
            source, "planning_function", (sample_view,), out_shape=(n,), constants=tasks.constants
        )

    def compile_source(source: str) -> Plan:
        if source.startswith(UNPARSABLE):
            raise UnsafeCode(source[2:])  # the answer held no code: say so, not "no function"
        if cfg.function == "planning":
            return Plan(view, compile_planning(source))
        parts = split_functions(source)
        missing = {"planning_function", "compute_reward"} - set(parts)
        if missing:
            raise UnsafeCode(f"the answer must define {' and '.join(sorted(missing))}")
        reward = compile_function(
            parts["compute_reward"],
            "compute_reward",
            (sample_view, int_sample, int_sample),
            out_shape=(n,),
            out_kind="f",
            constants=tasks.constants,
        )
        return Plan(view, compile_planning(parts["planning_function"]), reward)

    record: dict[str, Any] = {"planner": cfg.planner, "function": cfg.function}

    def save(source: str | None = None):
        if artifact_dir is None:
            return
        artifact_dir.mkdir(parents=True, exist_ok=True)
        if source is not None:
            (artifact_dir / "planning_function.py").write_text(source)
        (artifact_dir / "record.json").write_text(json.dumps(record, indent=2))

    if cfg.planner in ("reference", "scripted_noisy"):
        plan, source, errors = compile_source(tasks.reference), tasks.reference, []
        if cfg.planner == "scripted_noisy":
            record.update({"plan_accuracy": cfg.plan_accuracy, "noise_seed": cfg.noise_seed})
            num_tasks = max(tasks.constants.values()) + 1
            noisy = noisy_planning(plan.tasks, num_tasks, cfg.plan_accuracy, cfg.noise_seed)
            plan = Plan(view=_identity, planning=noisy)
    elif cfg.planner == "file":
        record["answer_file"] = str(cfg.answer_file)
        source = _answer_from_file(Path(cfg.answer_file), cfg)
        try:
            plan, errors = compile_source(source), []
        except UnsafeCode as e:
            raise UnsafeCode(f"answer_file {str(cfg.answer_file)!r}: {e}") from None
    else:
        try:
            plan, source, errors = _ask_model(env, cfg, tasks, compile_source, artifact_dir, record)
        except UnsafeCode as e:  # keep the prompts and the reasons (answers are in the store)
            record["error"] = str(e)
            save()
            raise
    record.update({"source": source, "refusals": errors})
    save(source)
    return tasks, plan, record


def _answer_from_file(path: Path, cfg: YOLOConfig) -> str:
    """The code of a saved answer (bare code, or the last fenced block that defines the
    function the config needs)."""
    from jaxmarl_llm.lm.parsers import ParseError
    from jaxmarl_llm.methods.yolo.answers import parse_python_block

    if not path.is_file():
        raise UnsafeCode(f"answer_file {str(path)!r} does not exist")
    required = "planning_function" if cfg.function == "planning" else "compute_reward"
    try:
        return parse_python_block(path.read_text(), required)
    except ParseError as e:
        raise UnsafeCode(f"answer_file {str(path)!r}: {e.reason}") from None


def _code_information(env: ArrayEnv, cfg: YOLOConfig, tasks: EnvTasks) -> str:
    if cfg.use_interpretation:
        return textwrap.dedent(inspect.getsource(tasks.interpret))
    n, d = env.num_agents, env.obs_dim
    return f'# processed_state = {{"observation": array of shape [{n}, {d}]}}\n' + "\n".join(
        f"# {line}" for line in textwrap.wrap(tasks.observation_text, 84)
    )


def _ask_model(env, cfg: YOLOConfig, tasks: EnvTasks, compile_source, artifact_dir, record):
    """Ask the backend (strategy, then code, refusals fed back); fills ``record`` with the
    prompts as it goes."""
    from jaxmarl_llm.lm import templates
    from jaxmarl_llm.lm.backend import Request, SamplingParams
    from jaxmarl_llm.lm.factory import make_backend
    from jaxmarl_llm.lm.parsers import ParseError
    from jaxmarl_llm.methods.yolo.answers import parse_python_block

    store = str(artifact_dir / "answers.sqlite") if artifact_dir is not None else None
    backend = make_backend(cfg.backend, store=store, **cfg.backend_options)
    params = SamplingParams(max_tokens=cfg.max_tokens)
    common = dict(
        environment_description=tasks.description,
        game_rules=tasks.rules,
        task_assignment=tasks.tasks_text,
    )
    record["backend"] = cfg.backend
    try:
        strategy = ""
        if cfg.use_strategy and cfg.function == "planning":
            prompt = templates.render("yolo_strategy", **common)
            strategy = backend.generate([Request(prompt, params=params)])[0].text
            record["strategy_prompt"], record["strategy"] = prompt, strategy
        template = (
            "yolo_planning_function" if cfg.function == "planning" else "yolo_reward_function"
        )
        extra = {"strategy": strategy or "(none given)"} if cfg.function == "planning" else {}
        prompt = templates.render(
            template,
            **common,
            **extra,
            interpretation_function=_code_information(env, cfg, tasks),
            agent_names=", ".join(env.agents),
        )
        record["planning_prompt"] = prompt
        required = "planning_function" if cfg.function == "planning" else "compute_reward"

        def ask(previous_error: str | None) -> str:
            text = (
                prompt
                if previous_error is None
                else (
                    f"{prompt}\n\nYour previous answer was rejected: {previous_error}\n"
                    "Answer again with corrected code."
                )
            )
            answer = backend.generate([Request(text, params=params)])[0].text
            try:
                return parse_python_block(answer, required)
            except ParseError as e:
                return f"{UNPARSABLE} {e.reason}"

        return compile_with_retries(ask, compile_source, cfg.attempts)
    finally:
        backend.close()


class NoUsablePlan(RunError, ValueError):
    """No planning (or reward) function passed the sandbox: every answer was refused, or
    the answer file is missing. The prompts and refusals are in ``<run>/yolo/record.json``."""


def yolo_shaper(env: ArrayEnv, cfg: YOLOConfig, mode, coef, artifact_dir) -> Shaper:
    YOLOConfig.check(cfg)
    try:
        tasks, plan, record = obtain_plan(env, cfg, artifact_dir)
    except UnsafeCode as e:
        raise NoUsablePlan(f"YOLO-MARL: no usable planning function: {e}") from e
    logger.info(
        "YOLO-MARL: planning function from %s (%d refused)",
        record["planner"],
        len(record["refusals"]),
    )

    def apply(p: YOLOParams, batch: TransitionBatch) -> jax.Array:
        if plan.reward is not None:  # the model's own reward function (section 6.3)
            bonus = _per_step(plan.rewards, batch.state, batch.actions)
        else:
            bonus = planning_bonus(tasks, plan, p, batch.state, batch.actions)
        return combine_bonus(bonus, cfg.combine)

    params = YOLOParams(jnp.asarray(cfg.reward, jnp.float32), jnp.asarray(cfg.penalty, jnp.float32))
    return Shaper(
        apply=apply,
        params=params,
        fields=("actions", "state"),
        mode=CombineMode(mode),
        coef=coef,
        name="yolo",
    )

"""LCA's team goal and key steps, inferred from a sampled trajectory's rewards (sec. 4.1).

One episode is played until the team task is completed (the env's scripted policy taking
a random action with probability ``epsilon``, or random play where the env has no
scripted policy). Its sparse team reward (the env's ``event_reward``: the team reward
without the step penalty, as the paper assumes) is non-zero at a few states; those
states, described in text in the order they were reached with their rewards
(``prompts/lca_team_goal.txt``), are shown to a backend, which answers with the team
goal and its key steps (``TeamGoal``). With ``team_goal: infer`` that answer replaces
the env's hand-written ``team_target`` and ``key_steps`` in the ranking prompts.

The scripted backend answers with the env's hand-written text, so its inferred goal
renders the ranking prompts exactly as the written one does.
"""

from __future__ import annotations

import dataclasses
import functools
from typing import Any

import jax
import numpy as np

from envs.array_env import ArrayEnv
from envs.capabilities import ScriptedPolicy, capability
from envs.credit import CreditAssignmentEnv
from jaxmarl_llm.lm import templates
from jaxmarl_llm.lm.backend import Backend, Request, SamplingParams
from jaxmarl_llm.lm.labeling import LabelingPolicy, ask
from jaxmarl_llm.methods.lca.answers import TeamGoal, parse_key_steps, parse_team_goal
from jaxmarl_llm.methods.lca.pairs import rollout_transitions

TEMPLATE = "lca_team_goal"
GOAL_FILE = "team_goal.json"  # in the run's lca folder: the prompt, answers and result


@dataclasses.dataclass(frozen=True)
class Trajectory:
    """One completed episode: env states ``s_0 .. s_T`` and the sparse team reward of
    each of its ``T`` steps."""

    states: list[Any]
    rewards: np.ndarray  # [T] float


def written_goal(env: CreditAssignmentEnv) -> TeamGoal:
    """The env's hand-written team target and key steps (its ``prompt_context``)."""
    ctx = env.prompt_context(env.reset(jax.random.PRNGKey(0))[1], 0)
    return TeamGoal(goal=ctx["team_target"], steps=parse_key_steps(ctx["key_steps"]))


@functools.partial(jax.jit, static_argnums=(0, 2, 3, 4))
def _rollout(env: ArrayEnv, key: jax.Array, num_envs: int, steps: int, epsilon: float | None):
    t = rollout_transitions(env, key, num_envs, steps, epsilon)
    raw = env.env
    reward = jax.vmap(raw.event_reward)(t.state, t.next_state)
    won = jax.vmap(env.won)(t.next_state)
    shape = (steps, num_envs)
    return t, reward.reshape(shape), won.reshape(shape)


def sample_trajectory(
    env: ArrayEnv, key: jax.Array, num_envs: int = 16, epsilon: float = 0.3
) -> Trajectory:
    """The first of ``num_envs`` episodes (from resets) that completes the team task."""
    raw = env.env
    if not hasattr(raw, "event_reward"):
        raise ValueError(
            f"{type(raw).__name__} has no event_reward (its team reward without the step "
            "penalty), so LCA cannot infer its team goal: use team_goal=written"
        )
    if not env.has_won:
        raise ValueError(f"{type(raw).__name__} reports no task completion (won_fn)")
    scripted = capability(raw, ScriptedPolicy) is not None
    steps = int(raw.max_steps)
    t, reward, won = _rollout(env, key, num_envs, steps, epsilon if scripted else None)
    won = np.asarray(won)
    # an episode lasts at most max_steps, so a win within them ends each env's first one
    winners = np.nonzero(won.any(0))[0]
    if not winners.size:
        policy = f"scripted play (epsilon {epsilon})" if scripted else "random play"
        raise ValueError(
            f"no episode of {type(raw).__name__} completed the team task in {num_envs} "
            f"episodes of {policy}: no trajectory to infer the team goal from"
        )
    e = int(winners[0])
    end = int(np.argmax(won[:, e]))
    flat = lambda tree, i: jax.tree.map(lambda x: x[i * num_envs + e], tree)  # noqa: E731
    states = [flat(t.state, i) for i in range(end + 1)] + [flat(t.next_state, end)]
    return Trajectory(states=states, rewards=np.asarray(reward[: end + 1, e], np.float64))


def goal_prompt(env: CreditAssignmentEnv, trajectory: Trajectory) -> str:
    """The team-goal prompt: the start state, then every state reached with a non-zero
    team reward, in order, with that reward."""
    rewarded = [
        f"Step {t + 1}: team reward {r:+g}.\n{env.describe(trajectory.states[t + 1], 0)}"
        for t, r in enumerate(trajectory.rewards)
        if r != 0
    ]
    return templates.render(
        TEMPLATE,
        start_state=env.describe(trajectory.states[0], 0),
        rewarded_steps="\n\n".join(rewarded),
        length=len(trajectory.rewards),
    )


def infer_team_goal(
    env: ArrayEnv,
    backend: Backend,
    seed: int = 0,
    max_tokens: int = 256,
    policy: LabelingPolicy | None = None,
    epsilon: float = 0.3,
) -> tuple[TeamGoal | None, dict[str, Any]]:
    """``(goal, record)``: the backend's team goal for a trajectory sampled with ``seed``
    (None when every answer was malformed, after ``policy``'s retries) and a record of
    the query (prompt, every answer, the result beside the hand-written text)."""
    raw = env.env
    key = jax.random.fold_in(jax.random.PRNGKey(seed), 0x60A1)
    trajectory = sample_trajectory(env, key, epsilon=epsilon)
    prompt = goal_prompt(raw, trajectory)
    written = written_goal(raw)
    request = Request(
        prompt=prompt,
        params=SamplingParams(max_tokens=max_tokens, temperature=0.0, seed=seed),
        payload={"answer": written.answer_text()},
    )
    answers: list[str] = []

    def parse(text: str) -> TeamGoal:
        answers.append(text)
        return parse_team_goal(text)

    (goal,), report = ask(backend, [request], parse, policy)
    record = {
        "backend": getattr(backend, "model", type(backend).__name__),
        "seed": seed,
        "trajectory_steps": len(trajectory.rewards),
        "rewards": {str(t + 1): float(r) for t, r in enumerate(trajectory.rewards) if r != 0},
        "prompt": prompt,
        "answers": answers,
        "labeling": report.as_dict(),
        "inferred": None if goal is None else dataclasses.asdict(goal),
        "written": dataclasses.asdict(written),
        "same_as_written": goal == written,
    }
    return goal, record


def goal_fields(goal: TeamGoal | None) -> dict[str, str]:
    """The ranking prompts' fields a goal replaces (none for the written one)."""
    if goal is None:
        return {}
    return {"team_target": goal.goal, "key_steps": goal.key_steps_text()}


__all__ = [
    "GOAL_FILE",
    "TeamGoal",
    "Trajectory",
    "goal_fields",
    "goal_prompt",
    "infer_team_goal",
    "sample_trajectory",
    "written_goal",
]

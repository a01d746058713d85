"""DPM's queries as text (appendix E prompts) through any language-model backend.

The queries a round selected (``online.py``) are rendered with the env's
``SceneDescriber`` (``envs.capabilities``; SMAX's is ``envs/smax_text.py``) into
``prompts/dpm_trajectory_comparison.txt`` and ``dpm_agent_ranking.txt``, asked
through the backend (answers cached in the label store), and parsed ("#1"/"#2"/"#0";
"Rank #k : {agents}" lines) into the same label arrays the array teacher gives. Each
request also carries the teacher's values as its payload, so the scripted backend answers
exactly as the array teacher would; language models read only the prompt. Malformed
answers are asked again, then abstained on.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import jax
import numpy as np

from envs.capabilities import SceneDescriber
from jaxmarl_llm.lm import templates
from jaxmarl_llm.lm.backend import Backend, Request, SamplingParams
from jaxmarl_llm.lm.labeling import LabelingPolicy, LabelingReport, ask, rankings_to_pair_arrays
from jaxmarl_llm.methods.dpm.answers import parse_agent_ranking, parse_hash_choice

GAME = "the StarCraft Multi-Agent Challenge game"
CRITERION = (
    "Generally, it is considered better when fewer allied agents are killed or injured "
    "while inflicting more damage on the enemy."
)

# the agent-ranking prompt's notice (appendix E, Fig. 24), word for word
FOCUS_NOTICE = (
    "To win, focused attacks are necessary. Therefore, prioritize agents contributing to "
    "attacking the same enemy. Also, assign lower contribution scores to agents with high "
    "health who are not engaging enemies."
)


def _at(tree: Any, *index: int) -> Any:
    return jax.tree.map(lambda x: x[index], tree)


def trajectory_prompts(
    describer: SceneDescriber, state, next_state, pairs, episodes: bool = False
) -> list[str]:
    """Prompts for segment pairs ``[((t_a, e_a, length_a), (t_b, e_b, length_b))]``: the
    segment of env ``e`` that starts at step ``t`` of the host states (leaves ``[T, E,
    ...]``) and lasts ``length`` steps; ``episodes``: each is a whole episode."""
    out = []
    for (ta, ea, la), (tb, eb, lb) in pairs:
        first_a, last_a = _at(state, ta, ea), _at(next_state, ta + la - 1, ea)
        first_b, last_b = _at(state, tb, eb), _at(next_state, tb + lb - 1, eb)
        fields = dict(
            game=GAME,
            scenario_info=describer.scenario_info(first_a),
            trajectory_1=describer.trajectory(first_a, last_a, la),
            trajectory_2=describer.trajectory(first_b, last_b, lb),
            criterion=CRITERION,
        )
        if episodes:
            out.append(templates.render("dpm_episode_comparison", **fields))
        else:
            if la != lb:
                raise ValueError(f"windows of one comparison have one length, got {la} and {lb}")
            out.append(templates.render("dpm_trajectory_comparison", length=la, **fields))
    return out


def agent_prompt(describer: SceneDescriber, s, s_next, actions, agents: Sequence[int]) -> str:
    return templates.render(
        "dpm_agent_ranking",
        game=GAME,
        scenario_info=describer.scenario_info(s),
        scene=describer.scene(s, actions, agents),
        next_scene=describer.scene(s_next, None, agents),
        num_agents=len(agents),
        notice=FOCUS_NOTICE,
    )


def ask_trajectories(
    backend: Backend,
    prompts: list[str],
    values: np.ndarray,
    params: SamplingParams,
    policy: LabelingPolicy,
) -> tuple[np.ndarray, np.ndarray, LabelingReport]:
    """``(label [K], valid [K], report)``: P(first segment preferred) per prompt."""
    requests = [
        Request(prompt=p, params=params, payload={"value_a": float(a), "value_b": float(b)})
        for p, (a, b) in zip(prompts, values, strict=True)
    ]
    answers, report = ask(backend, requests, parse_hash_choice, policy)
    label = np.array([0.5 if a is None else a for a in answers], np.float32)
    valid = np.array([a is not None for a in answers], bool)
    return label, valid, report


def ask_rankings(
    backend: Backend,
    prompts: list[str],
    scores: np.ndarray,
    agents: Sequence[int],
    num_agents: int,
    params: SamplingParams,
    policy: LabelingPolicy,
) -> tuple[np.ndarray, np.ndarray, LabelingReport]:
    """``(label [K, N, N], pair_valid [K, N, N], report)`` from rankings of ``agents``
    (the described subset); pairs with an agent outside it stay invalid."""
    k = len(agents)
    requests = [
        Request(prompt=p, params=params, payload={"scores": [float(x) for x in sc[list(agents)]]})
        for p, sc in zip(prompts, scores, strict=True)
    ]
    answers, report = ask(backend, requests, lambda t: parse_agent_ranking(t, k), policy)
    sub_label, sub_valid = rankings_to_pair_arrays(answers, k)
    label = np.full((len(prompts), num_agents, num_agents), 0.5, np.float32)
    valid = np.zeros_like(label, bool)
    ix = np.ix_(np.arange(len(prompts)), list(agents), list(agents))
    label[ix], valid[ix] = sub_label, sub_valid
    return label, valid, report

"""Verco's message teacher for the salad kitchen: who says what to whom (section 4.2).

Two label sources write one message per agent from what both agents see:

* the **scripted teacher** (the offline default), a documented rule over the symbolic
  state (:func:`envs.salad.text.global_description`);
* an **LM teacher**: the paper's teacher prompt (template ``verco_message``) sent through
  any backend behind the label store, answers parsed by ``parse_agent_messages`` with the
  labeling helpers' corrective retries, over-long messages cut to the word budget.

The scripted rule. Each agent gets one job, a phrase of at most four words, and agent
``i``'s message is ``"I <job_i>; you <job_j>"`` (at most 10 words, the paper's budget):
the two messages of a state state the same split of work from each side.

1. An agent holding something has the job its item implies: an unchopped task food is
   chopped ("chop the tomato") or, when no knife is reachable (map B's right side),
   handed over via the middle counter ("pass the tomato over"); a chopped task food goes
   in the plate ("plate the chopped tomato") or over the wall; the plate with exactly
   the task's food is served ("serve the dish") or passed over; a plate still missing
   food collects a reachable chopped task food ("collect the chopped onion"), else is
   passed over when its holder cannot reach the knives, else waits ("wait with the
   plate"); a food the task does not need is put down.
2. Open sub-tasks, in order: chop a task food lying unchopped on a knife; plate a loose
   chopped task food; fetch a raw task food (to chop it, or to pass it over when the
   fetcher reaches no knife); fetch the plate (only once some task food is chopped or
   every task food is taken care of); serve a finished dish lying on a counter.
3. Each open sub-task, in that order, goes to the empty-handed agent without a job that
   can reach its item and is closest to it (ties: the lower agent index); an item
   claimed by a held-item job (rule 1) is not offered again. An agent left without a
   job "waits".

Reachability and distances are the kitchen's walking distances, so the rule is the same
on both maps: on map B the right agent fetches and passes over, the left one chops,
plates and serves.
"""

from __future__ import annotations

import dataclasses
import functools
from collections.abc import Sequence
from typing import Any

import numpy as np

from envs.salad import maps
from envs.salad.env import TASKS, SaladKitchen
from envs.salad.maps import NUM_CELLS, PLATE, SIZE, UNREACHABLE
from envs.salad.text import global_description, text_observations
from jaxmarl_llm.lm import templates
from jaxmarl_llm.lm.backend import Backend, Request, SamplingParams
from jaxmarl_llm.lm.labeling import LabelingPolicy, LabelingReport, ask
from jaxmarl_llm.methods.verco.answers import parse_agent_messages
from jaxmarl_llm.methods.verco.losses import cut_message_words

MESSAGE_WORD_BUDGET = 10
SCRIPTED_TEACHER = "scripted teacher"
TEMPLATE = "verco_message"
WAIT_JOB = "wait"

ENVIRONMENT_DESCRIPTIONS = {
    "A": (
        "two cooks in one kitchen room: foods must be chopped on a knife, put in the "
        "plate and the finished salad served at the delivery counter"
    ),
    "B": (
        "two cooks split by a counter wall: the left cook reaches the knives and the "
        "delivery counter, the right cook the foods and the plate, and items cross the "
        "wall on the middle counter; foods must be chopped on a knife, put in the plate "
        "and the finished salad served"
    ),
}


def agent_messages_from_jobs(jobs: Sequence[str]) -> list[str]:
    """``"I <mine>; you <teammate's>"`` for each of two agents' jobs."""
    if len(jobs) != 2:
        raise ValueError(f"the salad teacher writes for two agents, got {len(jobs)} jobs")
    return [f"I {jobs[i]}; you {jobs[1 - i]}" for i in range(2)]


def _reach_table(env: SaladKitchen) -> np.ndarray:
    """``[49 target, 49 from]`` walking distance to a floor cell next to the target."""
    return env.kitchen.distance[:, NUM_CELLS, :]


def _cell(pos: np.ndarray) -> int:
    return int(pos[0]) * SIZE + int(pos[1])


def _state_jobs(env: SaladKitchen, g: dict[str, np.ndarray], b: int) -> list[str]:
    """The two agents' jobs in state ``b`` of a global description (module docstring)."""
    k = env.kitchen
    dist = _reach_table(env)
    agent_cells = [_cell(g["agent_pos"][b, a]) for a in range(2)]

    def reach(agent: int, cell: int) -> int:
        return int(dist[cell, agent_cells[agent]])

    def reaches(agent: int, cell: int) -> bool:
        return reach(agent, cell) < UNREACHABLE

    def reaches_knife(agent: int) -> bool:
        return any(reaches(agent, int(c)) for c in k.knives)

    needed = g["task_foods"][b]
    chopped = g["chopped"][b]
    in_plate = g["in_plate"][b]
    holder = g["item_holder"][b]
    item_cells = [_cell(g["item_pos"][b, item]) for item in range(4)]
    knives = {int(c) for c in k.knives}
    name = maps.FOOD_NAMES
    dish_done = bool((in_plate == needed).all())
    plate_cell = item_cells[PLATE]

    jobs: list[str | None] = [None, None]
    claimed: set[int] = set()
    for agent in range(2):
        held = int(g["holding"][b, agent])
        if held < 0:
            continue
        claimed.add(held)
        if held == PLATE:
            loose_chopped = [
                f
                for f in range(3)
                if needed[f] and chopped[f] and not in_plate[f] and holder[f] < 0
            ]
            reachable = [f for f in loose_chopped if reaches(agent, item_cells[f])]
            if dish_done:
                jobs[agent] = (
                    "serve the dish" if reaches(agent, k.delivery) else "pass the dish over"
                )
            elif reachable:
                jobs[agent] = f"collect the chopped {name[reachable[0]]}"
                claimed.add(reachable[0])
            elif not reaches_knife(agent):
                jobs[agent] = "pass the plate over"
            else:
                jobs[agent] = "wait with the plate"
        elif not needed[held]:
            jobs[agent] = f"put the {name[held]} down"
        elif chopped[held]:
            plate_ok = holder[PLATE] < 0 and reaches(agent, plate_cell)
            jobs[agent] = (
                f"plate the chopped {name[held]}" if plate_ok else f"pass the {name[held]} over"
            )
        else:
            jobs[agent] = (
                f"chop the {name[held]}" if reaches_knife(agent) else f"pass the {name[held]} over"
            )

    # open sub-tasks: (item, target cell, phrase for an agent that can / cannot reach a knife)
    open_tasks: list[tuple[int, int, str, str]] = []
    for f in range(3):
        if not needed[f] or f in claimed or in_plate[f] or holder[f] >= 0:
            continue
        if not chopped[f] and item_cells[f] in knives:
            phrase = f"chop the {name[f]}"
            open_tasks.append((f, item_cells[f], phrase, phrase))
    for f in range(3):
        if not needed[f] or f in claimed or in_plate[f] or holder[f] >= 0 or not chopped[f]:
            continue
        open_tasks.append(
            (f, item_cells[f], f"plate the chopped {name[f]}", f"pass the {name[f]} over")
        )
    for f in range(3):
        if not needed[f] or f in claimed or in_plate[f] or holder[f] >= 0 or chopped[f]:
            continue
        if item_cells[f] in knives:
            continue
        open_tasks.append((f, item_cells[f], f"fetch the {name[f]}", f"pass the {name[f]} over"))
    food_pending = [
        f
        for f in range(3)
        if needed[f] and not in_plate[f] and f not in claimed and holder[f] < 0 and not chopped[f]
    ]
    if PLATE not in claimed and holder[PLATE] < 0:
        if dish_done:
            phrase = "serve the dish"
            open_tasks.append((PLATE, plate_cell, phrase, "pass the dish over"))
        elif (needed & chopped).any() or not food_pending:
            open_tasks.append((PLATE, plate_cell, "fetch the plate", "pass the plate over"))

    for _item, cell, with_knife, without_knife in open_tasks:
        free = [a for a in range(2) if jobs[a] is None and reaches(a, cell)]
        if not free:
            continue
        agent = min(free, key=lambda a: (reach(a, cell), a))
        jobs[agent] = with_knife if reaches_knife(agent) else without_knife
    return [job if job is not None else WAIT_JOB for job in jobs]


def scripted_jobs(env: SaladKitchen, states) -> list[list[str]]:
    """``[state][agent]`` job phrases of the scripted teacher (module docstring)."""
    g = global_description(env, states)
    return [_state_jobs(env, g, b) for b in range(g["task"].shape[0])]


def scripted_messages(env: SaladKitchen, states) -> list[list[str]]:
    """``[state][agent]`` messages of the scripted teacher for a batch (or one) of states,
    each at most :data:`MESSAGE_WORD_BUDGET` words."""
    return [agent_messages_from_jobs(jobs) for jobs in scripted_jobs(env, states)]


# ----- the LM teacher ---------------------------------------------------------------------


def teacher_prompt(env: SaladKitchen, observations: Sequence[str], task: str) -> str:
    """The paper's teacher prompt for one state: every agent's observation text and the
    task (template ``verco_message``)."""
    if task not in TASKS:
        raise ValueError(f"unknown salad task {task!r}; known tasks: {', '.join(TASKS)}")
    shown = ". ".join(
        f"The observation of Agent {i + 1}: {o.rstrip('.')}" for i, o in enumerate(observations)
    )
    return templates.render(
        TEMPLATE,
        num_agents=len(observations),
        environment_description=ENVIRONMENT_DESCRIPTIONS[env.map_name],
        observations=shown,
        task_goal=f"the {task}",
    )


def teacher_requests(
    env: SaladKitchen, states, params: SamplingParams | None = None
) -> list[Request]:
    """One teacher request per state. The payload carries the scripted teacher's messages,
    so the text path can be run by :func:`scripted_message_answer` without a model; a
    language model never reads it."""
    params = params or SamplingParams(max_tokens=64)
    g = global_description(env, states)
    observations = text_observations(env, states)
    scripted = scripted_messages(env, states)
    return [
        Request(
            prompt=teacher_prompt(env, observations[b], TASKS[int(g["task"][b])]),
            params=params,
            payload={"messages": scripted[b]},
        )
        for b in range(len(observations))
    ]


def format_agent_messages(messages: Sequence[str]) -> str:
    """The answer form the teacher prompt asks for: ``"Agent k: <message>"`` lines."""
    return "\n".join(f"Agent {i + 1}: {m}" for i, m in enumerate(messages))


def scripted_message_answer(payloads: Sequence[dict[str, Any]], seeds) -> list[str]:
    """A :class:`jaxmarl_llm.lm.scripted.ScriptedBackend` answer function: the scripted
    teacher's messages from each request's payload, in the prompt's answer form."""
    del seeds  # the scripted teacher is noise-free
    return [format_agent_messages(p["messages"]) for p in payloads]


@dataclasses.dataclass
class TeacherReport:
    """How the LM teacher's labels came out: parse retries, abstentions, budget cuts."""

    labeling: LabelingReport
    cut_messages: int = 0
    dropped_words: int = 0
    messages: int = 0

    def as_dict(self) -> dict[str, Any]:
        return {
            **self.labeling.as_dict(),
            "messages": self.messages,
            "cut_messages": self.cut_messages,
            "dropped_words": self.dropped_words,
        }


def parse_and_cut(
    texts: Sequence[str | None], max_words: int = MESSAGE_WORD_BUDGET
) -> tuple[list[list[str] | None], int, int]:
    """Cut parsed per-agent messages to ``max_words``; returns them with the number of cut
    messages and of dropped words (``None`` entries, abstentions, stay ``None``)."""
    out: list[list[str] | None] = []
    cut = dropped = 0
    for messages in texts:
        if messages is None:
            out.append(None)
            continue
        kept = []
        for message in messages:
            c = cut_message_words(message, max_words)
            cut += int(c.was_cut)
            dropped += c.dropped
            kept.append(c.kept)
        out.append(kept)
    return out, cut, dropped


def lm_teacher_messages(
    backend: Backend,
    env: SaladKitchen,
    states,
    policy: LabelingPolicy | None = None,
    params: SamplingParams | None = None,
    max_words: int = MESSAGE_WORD_BUDGET,
) -> tuple[list[list[str] | None], TeacherReport]:
    """``[state][agent]`` messages from a teacher language model (``None`` where it
    abstained after its retries), each cut to ``max_words`` words, and the report.

    ``backend`` is any backend; wrap it in :class:`jaxmarl_llm.lm.store.CachedBackend` to
    keep every query and answer and replay them without the model.
    """
    requests = teacher_requests(env, states, params)
    parse = functools.partial(parse_agent_messages, num_agents=env.num_agents)
    parsed, labeling = ask(backend, requests, parse, policy)
    messages, cut, dropped = parse_and_cut(parsed, max_words)
    count = sum(len(m) for m in messages if m is not None)
    return messages, TeacherReport(labeling, cut, dropped, count)

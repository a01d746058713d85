"""A text bandit built from salad kitchen prompts: the Verco/TWOSOME action prompts of
kitchen states, each with the one action that is rewarded in it.

States come from mixed play (each kitchen follows the scripted team or picks uniformly
among its available actions, a coin flip per step), so that chopped food, plates and
dishes appear, not only the raw start. An agent's prompt and its available actions are
exactly what a Verco/TWOSOME rollout gives it (``action_prompt`` without a message).

The rewarded action is the scripted teacher's job for that agent (``scripted_jobs``)
mapped to the macro-action that carries it out (:func:`job_action`). States where the
job has no matching available action, or where the agent has only one action, are left
out. The teacher reads the whole state and the prompt shows only part of it, so one
prompt (text and available actions) can meet different jobs; such prompts are dropped,
which makes the rewarded action a function of what the policy is shown.
"""

from __future__ import annotations

import dataclasses
from collections import defaultdict

import jax
import numpy as np

from envs.salad.env import (
    CHOP,
    DELIVER,
    GET_PLATE,
    GET_TOMATO,
    GO_KNIFE_1,
    GO_KNIFE_2,
    NOBODY,
    WAIT,
)
from envs.salad.maps import FOOD_NAMES, PLATE, SIZE
from envs.salad.scripted import scripted_actions
from envs.salad.text import global_description, text_observations
from jaxmarl_llm.methods.verco.rollout import action_prompt, env_functions
from jaxmarl_llm.methods.verco.teacher import scripted_jobs


@dataclasses.dataclass(frozen=True)
class BanditPrompt:
    prompt: str
    avail: np.ndarray  # [A] bool
    rewarded: int  # the action index that earns reward 1


def job_action(job: str, avail: np.ndarray, g: dict, b: int, agent: int, knives) -> int | None:
    """The macro-action that carries out the teacher's ``job`` for ``agent`` in state ``b``
    of a global description, or ``None`` where no available action does (jobs of map B's
    wall, putting a food down)."""
    words = job.split()
    food = {name: i for i, name in enumerate(FOOD_NAMES)}
    action = None
    if job in ("wait", "wait with the plate"):
        action = WAIT
    elif job == "serve the dish":
        action = DELIVER if g["holding"][b, agent] == PLATE else GET_PLATE
    elif job == "fetch the plate" or (words[0] == "plate" and words[-1] in food):
        action = GET_PLATE  # holding chopped food, "get plate" puts it in the plate
    elif words[0] in ("fetch", "collect") and words[-1] in food:
        action = GET_TOMATO + food[words[-1]]
    elif words[0] == "chop" and words[-1] in food:
        if g["holding"][b, agent] == food[words[-1]]:
            action = first_free_knife(g, b, knives)
        elif avail[CHOP]:
            action = CHOP
        else:  # walks to the food's knife and stops there, ready to chop
            action = GET_TOMATO + food[words[-1]]
    if action is None or not avail[action]:
        return None
    return action


def first_free_knife(g: dict, b: int, knives) -> int:
    """Go to knife 1 unless an item lies on it, then knife 2."""
    loose = g["item_holder"][b] == NOBODY
    lying = zip(g["item_pos"][b], loose, strict=True)
    cells = {int(p[0]) * SIZE + int(p[1]) for p, free in lying if free}
    return GO_KNIFE_1 if int(knives[0]) not in cells else GO_KNIFE_2


def kitchen_bandit(
    env, num_envs: int = 64, steps: int = 200, seed: int = 0
) -> tuple[list[BanditPrompt], int]:
    """The distinct prompts met in ``steps`` steps of ``num_envs`` kitchens under mixed
    play, each with its rewarded action (module docstring), in the order first met; and
    how many prompts were dropped for meeting more than one job."""
    reset, avail_fn, step = env_functions(env)
    scripted = jax.jit(jax.vmap(lambda s: scripted_actions(env, s)))
    rng = np.random.default_rng(seed)
    key = jax.random.PRNGKey(seed)
    key, k0 = jax.random.split(key)
    state = reset(jax.random.split(k0, num_envs))
    knives = env.kitchen.knives
    # a prompt with its available actions is one arm of the bandit
    seen: dict[tuple[str, bytes], set[int]] = defaultdict(set)
    first: dict[tuple[str, bytes], BanditPrompt] = {}
    for _ in range(steps):
        avail = np.asarray(avail_fn(state))
        obs = text_observations(env, state)
        jobs = scripted_jobs(env, state)
        g = global_description(env, state)
        for b in range(num_envs):
            for agent in range(2):
                if avail[b, agent].sum() <= 1:
                    continue
                action = job_action(jobs[b][agent], avail[b, agent], g, b, agent, knives)
                if action is None:
                    continue
                prompt = action_prompt(obs[b][agent], "")
                arm = (prompt, avail[b, agent].tobytes())
                seen[arm].add(action)
                first.setdefault(arm, BanditPrompt(prompt, avail[b, agent].copy(), action))
        random = np.array([[rng.choice(np.flatnonzero(m)) for m in row] for row in avail])
        follow = rng.random(num_envs) < 0.5
        actions = np.where(follow[:, None], np.asarray(scripted(state)), random).astype(np.int32)
        key, k = jax.random.split(key)
        state, *_ = step(jax.random.split(k, num_envs), state, actions)
    kept = [p for arm, p in first.items() if len(seen[arm]) == 1]
    return kept, len(first) - len(kept)


def split_prompts(prompts: list[BanditPrompt], test_fraction: float, seed: int):
    """A shuffled train/test split of the distinct prompts."""
    order = np.random.default_rng(seed).permutation(len(prompts))
    n_test = max(1, int(round(test_fraction * len(prompts))))
    return [prompts[i] for i in order[n_test:]], [prompts[i] for i in order[:n_test]]

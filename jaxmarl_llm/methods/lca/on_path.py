"""Whether a learned potential points the right way along the path a competent team walks.

Held-out accuracy on sampled pairs measures agreement where the pairs were drawn; a
potential can score well there and still push the wrong way on the stretch of the task
the samples hardly cover (e.g. the last stages of Victim-Rubble under random play). Here
the env's scripted policy plays from reset starts; at every step where an agent moves and
the ranking heuristic's potential of that agent changes, the learned potential's change
should have the same sign. Agreement is reported overall and per stage of the task (the
number of task flags done before the step, ``task_stage``) and per role; the worst
(stage, role) cell counts only cells with at least ``MIN_MOVES`` moves.
"""

from __future__ import annotations

import functools
from collections.abc import Callable
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np

from envs.array_env import ArrayEnv
from envs.capabilities import ScriptedPolicy, capability
from jaxmarl_llm.preferences.models import RewardModel

MIN_MOVES = 50  # fewer moves in a (stage, role) cell: reported, not the worst stage


@functools.partial(jax.jit, static_argnames=("env", "score", "num_starts"))
def _path_signs(env: ArrayEnv, score: Callable, params: Any, key: jax.Array, num_starts: int):
    """``(stage [T, S], agree [T, S, N], counted [T, S, N])`` over ``num_starts`` scripted
    episodes of ``max_steps`` steps (steps after completion not counted)."""
    raw = env.env
    policy = capability(raw, ScriptedPolicy)
    _, start = jax.vmap(raw.reset)(jax.random.split(key, num_starts))
    stage_of = getattr(raw, "task_stage", lambda s: jnp.zeros((), jnp.int32))

    def one(s, done):
        a = policy.greedy_actions(s)
        _, s2, _, _, _ = raw.step_env(key, s, env.unstack_actions(a))
        d_phi = raw.heuristic_potential(s2) - raw.heuristic_potential(s)
        d_sig = score(params, s2) - score(params, s)
        counted = ~done & (a != raw.noop_action) & (d_phi != 0)
        agree = jnp.sign(d_sig) == jnp.sign(d_phi)
        return s2, done | raw.won(s2), (stage_of(s), agree, counted)

    def step(carry, _):
        s, done = carry
        s2, done2, out = jax.vmap(one)(s, done)
        return (s2, done2), out

    init = (start, jnp.zeros((num_starts,), bool))
    _, out = jax.lax.scan(step, init, None, raw.max_steps)
    return out


@functools.cache
def model_score(env: ArrayEnv, model: RewardModel) -> Callable:
    """``(params, state) -> [N]``: the learned potential of every agent (``params``: the
    model's own). One function per env and model, so every call shares one program."""
    return lambda params, s: model.apply_agents(params, env.env.agent_features(s))


def on_path_agreement(
    env: ArrayEnv, score: Callable, key: jax.Array, num_starts: int = 128, params: Any = None
) -> dict[str, Any] | None:
    """Sign agreement of a potential ``score(params, state) -> [N]`` (e.g. ``model_score``)
    with the heuristic along scripted play; None for an env without a scripted policy.
    ``{"agreement", "worst_stage", "moves", "by_stage": {stage: {role: [agreement,
    moves]}}}``."""
    raw = env.env
    if capability(raw, ScriptedPolicy) is None:
        return None
    out = _path_signs(env, score, params, key, num_starts)
    stage, agree, counted = map(np.asarray, out)
    roles = list(raw.roles)
    by_stage: dict[str, dict[str, list]] = {}
    worst = None
    for k in np.unique(stage):
        at = counted & (stage == k)[..., None]
        row = {}
        for role in dict.fromkeys(roles):
            cols = [i for i, r in enumerate(roles) if r == role]
            n = int(at[..., cols].sum())
            if n:
                row[role] = [float(agree[..., cols][at[..., cols]].mean()), n]
                if n >= MIN_MOVES:
                    worst = row[role][0] if worst is None else min(worst, row[role][0])
        if row:
            by_stage[str(int(k))] = row
    total = int(counted.sum())
    return {
        "agreement": float(agree[counted].mean()) if total else None,
        "worst_stage": worst,
        "moves": total,
        "by_stage": by_stage,
    }

"""What an environment offers to credit-assignment methods (LCA and its baselines).

A jaxmarl ``MultiAgentEnv`` that also implements ``CreditAssignmentEnv`` can be used by
``jaxmarl_llm.methods.lca``: state pairs are sampled from it, described to a language
model from each agent's point of view, ranked by the paper's heuristic (the scripted
teacher), scored by state-scoring models on ``agent_features``, and rewarded through
the shaper inside the training scan. Every method except ``describe``/``prompt_context``
is pure and jittable and takes the env's own state (not the ``ArrayEnv`` wrapper's).
"""

from __future__ import annotations

from typing import Any, Protocol, runtime_checkable

import chex
import jax
import numpy as np


@runtime_checkable
class CreditAssignmentEnv(Protocol):
    #: the action index meaning "stay still / do nothing"; LCA's individual reward is
    #: zero for an agent that takes it (paper eq. 4, "stays still without an action")
    noop_action: int
    #: role name of each agent in ``agents`` order (e.g. ("agent", "agent") or
    #: ("green", "orange")); agents with the same role share a state-scoring model
    roles: tuple[str, ...]

    def agent_features(self, state: Any) -> jax.Array:
        """``[N, F]`` float32: agent ``i``'s agent-specific encoding of ``state``.

        Row ``i`` puts agent ``i`` first ("ego") and the others after it ("teammates"),
        so one state-scoring model can serve every agent of a role.
        """

    def heuristic_potential(self, state: Any) -> jax.Array:
        """``[N]`` float32: the paper's human ranking heuristic from each agent's view.

        The scripted teacher prefers ``s'`` over ``s`` for agent ``i`` when
        ``phi_i(s') > phi_i(s)`` (tie when equal); with the noise models of
        ``jaxmarl_llm.lm.teachers`` this is the paper's "human ranking-heuristic".
        """

    def individual_reward(self, state: Any, actions: jax.Array, next_state: Any) -> jax.Array:
        """``[N]`` float32 hand-crafted individual rewards (the MAPPO team+individual baseline).

        Environments without simple individual rewards (Pistonball) raise
        ``NotImplementedError`` naming the reason.
        """

    def random_state(self, key: chex.PRNGKey) -> Any:
        """A random valid state covering every stage of the task (not only start states)."""

    def won(self, state: Any) -> jax.Array:
        """``[]`` bool: the team task is completed in ``state``."""

    def render(self, state: Any) -> jax.Array:
        """``[H, W, 3]`` uint8 picture of ``state`` (pure JAX, so it can be vmapped)."""

    def describe(self, state: Any, agent: int) -> str:
        """Plain-language description of ``state`` from agent ``agent``'s view (host side).

        The agent is called "ego" and every other agent "teammate".
        """

    def prompt_context(self, state: Any, agent: int) -> dict[str, str]:
        """Fields of the LCA ranking prompt for ``agent`` (host side): ``task_description``,
        ``team_target``, ``key_steps``, ``dependency`` (constraints between agents' tasks,
        may depend on ``state``) and ``ego_role``."""


def is_credit_env(env: Any) -> bool:
    return isinstance(env, CreditAssignmentEnv)


def map_states(fn, states: Any, batch_shape: tuple[int, ...]) -> Any:
    """Apply a per-state function to env states with leading ``batch_shape`` axes."""
    n = int(np.prod(batch_shape)) if batch_shape else 1
    flat = jax.tree.map(lambda x: x.reshape((n, *x.shape[len(batch_shape) :])), states)
    out = jax.vmap(fn)(flat)
    return jax.tree.map(lambda x: x.reshape((*batch_shape, *x.shape[1:])), out)


def require_credit_env(env: Any, who: str) -> CreditAssignmentEnv:
    """``env`` (a jaxmarl env or its ``ArrayEnv`` view) as a credit env, or a clear error."""
    raw = getattr(env, "env", env)
    if not is_credit_env(raw):
        missing = [
            m
            for m in ("noop_action", "roles", "agent_features", "heuristic_potential")
            if not hasattr(raw, m)
        ]
        raise ValueError(
            f"{who} needs an environment with agent-specific encodings and a ranking "
            f"heuristic (envs.credit.CreditAssignmentEnv, e.g. two_switch, victim_rubble, "
            f"pistonball); {type(raw).__name__} lacks {missing or 'part of that interface'}"
        )
    return raw

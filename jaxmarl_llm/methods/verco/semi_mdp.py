"""Semi-MDP returns: an agent's decisions are its transitions.

Decision ``j`` at step ``t_j`` earns the discounted team rewards up to its next decision,
``R_j = sum_{t_j <= t < t_{j+1}} gamma^(t - t_j) r_t``, and bootstraps with
``gamma^(t_{j+1} - t_j) V(next decision)``; the forced steps in between carry no policy
gradient and no value target of their own. An episode's end cuts the sum there (no
bootstrap); the rollout's end bootstraps with the value of the agent's prompt after the
last step. GAE runs over decisions with ``lambda`` per decision.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np


def semi_mdp_advantages(
    decision_steps: Sequence[int],
    values: Sequence[float],
    rewards: np.ndarray,
    dones: np.ndarray,
    last_value: float,
    gamma: float,
    lam: float,
) -> tuple[np.ndarray, np.ndarray]:
    """GAE advantages and returns ``[n]`` of one agent's ``n`` decisions in one rollout.

    ``decision_steps``: increasing rollout steps at which the agent chose;
    ``values``: the critic at each decision; ``rewards``, ``dones`` ``[T]``: the team's
    reward and episode end of every step (the step's transition); ``last_value``: the
    critic after step ``T - 1`` (used where the last decision's episode is still running).
    """
    steps = list(decision_steps)
    n, horizon = len(steps), len(rewards)
    advantages = np.zeros(n, np.float64)
    gae = 0.0
    for j in reversed(range(n)):
        end = steps[j + 1] if j + 1 < n else horizon
        segment_return, discount, terminal = 0.0, 1.0, False
        for t in range(steps[j], end):
            segment_return += discount * float(rewards[t])
            discount *= gamma
            if dones[t]:
                terminal = True
                break
        if terminal:
            next_value, discount, gae = 0.0, 0.0, 0.0
        else:
            next_value = values[j + 1] if j + 1 < n else last_value
            if j + 1 == n:
                gae = 0.0
        delta = segment_return + discount * next_value - values[j]
        gae = delta + discount * lam * gae
        advantages[j] = gae
    return advantages, advantages + np.asarray(values, np.float64)

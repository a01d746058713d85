"""YOLO-MARL on MPE simple spread: state interpretation, tasks, task-to-action matching.

- Tasks (section 5, MPE): ``LANDMARK_0 .. LANDMARK_{L-1}``, then ``NO_OP``.
- ``action_matches``: "landmark j" accepts the moves whose direction points toward
  landmark j (positive component of the offset along the move's axis: at most two of
  the four moves), and once the agent is within ``arrive_radius`` of it also the no-op
  (it is there; damping holds it); "no op" accepts the no-op only. Actions are MPE's
  discrete ``0 no-op, 1 -x, 2 +x, 3 -y, 4 +y``.
- ``REFERENCE_PLANNING_FUNCTION``: what the scripted backend answers, compiled through
  the sandbox like a model's answer: a greedy unique assignment (the globally closest
  free agent-landmark pair first, ``NUM_AGENTS`` rounds), the paper's "each agent going
  to a unique landmark".
"""

from __future__ import annotations

import jax
import jax.numpy as jnp
from jaxmarl.environments.mpe.simple import State

ARRIVE_RADIUS = 0.1
# unit direction of each discrete action (0 no-op, 1 -x, 2 +x, 3 -y, 4 +y)
DIRECTIONS = jnp.array([[0.0, 0.0], [-1.0, 0.0], [1.0, 0.0], [0.0, -1.0], [0.0, 1.0]])


def make_interpret(num_agents: int):
    def interpret(state: State) -> dict:
        """Named parts of an MPE simple spread state.

        Returns a dict of arrays:
            agent_pos: [N, 2] (x, y) of every agent.
            agent_vel: [N, 2] velocity of every agent.
            landmark_pos: [L, 2] (x, y) of every landmark.
            offset: [N, L, 2] landmark position minus agent position.
            distance: [N, L] Euclidean distance from each agent to each landmark.
            agent_distance: [N, N] distance between agents (collisions below 0.3).
        """
        agent_pos = state.p_pos[:num_agents]
        landmark_pos = state.p_pos[num_agents:]
        offset = landmark_pos[None, :, :] - agent_pos[:, None, :]
        gap = agent_pos[None, :, :] - agent_pos[:, None, :]
        return {
            "agent_pos": agent_pos,
            "agent_vel": state.p_vel[:num_agents],
            "landmark_pos": landmark_pos,
            "offset": offset,
            "distance": jnp.sqrt((offset**2).sum(-1)),
            "agent_distance": jnp.sqrt((gap**2).sum(-1)),
        }

    return interpret


def task_constants(num_agents: int, num_landmarks: int) -> dict[str, int]:
    out = {f"LANDMARK_{j}": j for j in range(num_landmarks)}
    out["NO_OP"] = num_landmarks
    out["NUM_AGENTS"] = num_agents
    return out


def make_action_matches(num_agents: int, arrive_radius: float = ARRIVE_RADIUS):
    def action_matches(state: State, tasks: jax.Array, actions: jax.Array) -> jax.Array:
        """``[N]`` bool: does each agent's action carry out its task?"""
        landmarks = state.p_pos[num_agents:]
        num_landmarks = landmarks.shape[0]
        target = landmarks[jnp.clip(tasks, 0, num_landmarks - 1)]
        offset = target - state.p_pos[:num_agents]  # [N, 2]
        toward = (DIRECTIONS[actions] * offset).sum(-1) > 0
        arrived = jnp.sqrt((offset**2).sum(-1)) < arrive_radius
        goes = toward | (arrived & (actions == 0))
        return jnp.where(tasks >= num_landmarks, actions == 0, goes)

    return action_matches


REFERENCE_PLANNING_FUNCTION = '''
def planning_function(processed_state):
    """Each agent goes to its own landmark: repeatedly give the closest free
    (agent, landmark) pair to each other."""
    distance = processed_state["distance"]
    n_agents = distance.shape[0]
    n_landmarks = distance.shape[1]
    task = jnp.full((n_agents,), NO_OP)
    free_agent = jnp.ones((n_agents,))
    free_landmark = jnp.ones((n_landmarks,))
    for step in range(NUM_AGENTS):
        cost = distance + 1000.0 * (1 - free_agent[:, None]) + 1000.0 * (1 - free_landmark[None, :])
        best = jnp.argmin(cost)
        agent = best // n_landmarks
        landmark = best % n_landmarks
        open_pair = cost.min() < 1000.0
        task = jnp.where(open_pair, task.at[agent].set(landmark), task)
        free_agent = jnp.where(open_pair, free_agent.at[agent].set(0.0), free_agent)
        free_landmark = jnp.where(open_pair, free_landmark.at[landmark].set(0.0), free_landmark)
    return task
'''

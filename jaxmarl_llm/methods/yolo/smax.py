"""YOLO-MARL on SMAX (jaxmarl's SMAC): state interpretation, tasks, task-to-action matching.

- Tasks (section 5, SMAC): ``MOVE``, ``ATTACK``, ``STOP``, ``NONE`` (for dead agents).
- ``action_matches``: SMAX's ally actions are ``0..3`` moves (north, east, south,
  west), ``4`` stop, ``5 + k`` attack enemy ``k``. "move" accepts the four moves,
  "attack" any attack action, "stop" the stop action and "none" anything (a dead
  agent can only stop).
- ``REFERENCE_PLANNING_FUNCTION``: what the scripted backend answers, compiled through
  the sandbox like a model's answer: a dead agent gets ``NONE``; a living one
  ``ATTACK`` when a living enemy is within its shooting range, else ``MOVE``.
"""

from __future__ import annotations

import jax
import jax.numpy as jnp

NUM_MOVES = 4
STOP_ACTION = 4


def make_interpret(env):
    num_allies = env.num_allies
    ranges = jnp.asarray(env.unit_type_attack_ranges)
    health = jnp.asarray(env.unit_type_health)

    def interpret(state) -> dict:
        """Named parts of an SMAX state (allies first, then enemies).

        Returns a dict of arrays:
            ally_pos: [A, 2] (x, y) of every ally; enemy_pos: [E, 2] of every enemy.
            ally_alive: [A] 1 while alive; enemy_alive: [E] the same for enemies.
            ally_health: [A] health as a fraction of the unit type's maximum;
                enemy_health: [E] the same for enemies.
            ally_range: [A] shooting range of every ally.
            ally_cooldown: [A] weapon cooldown left (0: can shoot now).
            distance: [A, E] distance from each ally to each enemy.
            in_range: [A, E] 1 where the enemy is alive and within the ally's range.
        """
        s = state.state  # the heuristic-enemy wrapper's inner SMAX state
        pos, alive = s.unit_positions, s.unit_alive.astype(jnp.int32)
        frac = s.unit_health / health[s.unit_types]
        ally_range = ranges[s.unit_types[:num_allies]]
        d = jnp.sqrt(((pos[:num_allies, None, :] - pos[None, num_allies:, :]) ** 2).sum(-1))
        in_range = (d <= ally_range[:, None]) & (alive[None, num_allies:] == 1)
        return {
            "ally_pos": pos[:num_allies],
            "enemy_pos": pos[num_allies:],
            "ally_alive": alive[:num_allies],
            "enemy_alive": alive[num_allies:],
            "ally_health": frac[:num_allies],
            "enemy_health": frac[num_allies:],
            "ally_range": ally_range,
            "ally_cooldown": s.unit_weapon_cooldowns[:num_allies],
            "distance": d,
            "in_range": in_range.astype(jnp.int32),
        }

    return interpret


def task_constants() -> dict[str, int]:
    return {"MOVE": 0, "ATTACK": 1, "STOP": 2, "NONE": 3}


def action_matches(state, tasks: jax.Array, actions: jax.Array) -> jax.Array:
    """``[N]`` bool: does each agent's action carry out its task?"""
    del state
    move = actions < NUM_MOVES
    attack = actions > STOP_ACTION
    stop = actions == STOP_ACTION
    return jnp.select(
        [tasks == 0, tasks == 1, tasks == 2], [move, attack, stop], jnp.ones_like(move)
    )


REFERENCE_PLANNING_FUNCTION = '''
def planning_function(processed_state):
    """Attack whenever a living enemy is in range, otherwise move in; dead agents get
    NONE."""
    in_range = processed_state["in_range"].any(axis=1)
    alive = processed_state["ally_alive"] == 1
    task = jnp.where(in_range, ATTACK, MOVE)
    return jnp.where(alive, task, NONE)
'''

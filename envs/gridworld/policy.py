"""The grid worlds' scripted policy: a greedy descent of the distance tables."""

from __future__ import annotations

from functools import partial

import jax
import jax.numpy as jnp

from envs.gridworld.actions import INTERACT, STAY
from envs.gridworld.layout import UNREACHABLE
from envs.gridworld.state import GridState


class GridPolicy:
    """Distances and ``greedy_actions`` for ``GridWorld``: reads its distance tables
    (``dist``, ``target_face``), ``_config_index``, ``_blocked`` and ``delta``; a task
    names the targets its agents head for in ``_policy_targets``."""

    def distance(self, target: jax.Array, state: GridState) -> jax.Array:
        """``[N]`` actions each agent needs to reach target index ``target`` (``[]`` or
        ``[N]``) under the state's obstacles (teammates ignored)."""
        cfg = self._config_index(state.flags)
        return jnp.asarray(self.dist)[target, cfg, state.pos, state.facing]

    def _policy_targets(self, state: GridState) -> tuple[jax.Array, jax.Array]:
        """``([N] target index, [N] bool active)`` the scripted policy heads for."""
        raise NotImplementedError

    @partial(jax.jit, static_argnums=(0,))
    def greedy_actions(self, state: GridState) -> jax.Array:
        """``[N]`` int32 actions of the scripted BFS policy (pure, jittable).

        Every agent descends its distance table toward ``_policy_targets`` (the
        heuristic's targets), treating the teammate as an obstacle, and interacts once
        it faces a ``face`` target; inactive agents stay. When the two agents want each
        other's cells, agent 1 steps aside to the best free cell. An agent that waits
        (inactive, or its target unreachable for now) on the cell its teammate wants to
        enter steps aside to the free neighbour farthest along the teammate's distance
        table, off the teammate's way (so a waiting agent never walls its teammate in).
        """
        tid, active = self._policy_targets(state)
        cfg = self._config_index(state.flags)
        dist = jnp.asarray(self.dist)
        obj = state.flags[: self.num_objects]
        delta = jnp.asarray(self.delta)
        dirs = jnp.arange(4)
        acts, wants, frees, d_next_all, waiting = [], [], [], [], []
        for i in range(self.num_agents):
            target = state.pos[i] + delta  # [4]
            env_free = ~self._blocked(target, obj)
            occ = jnp.zeros((4,), bool)
            for j in range(self.num_agents):
                if j != i:
                    occ = occ | (target == state.pos[j])
            nxt = jnp.where(env_free & ~occ, target, state.pos[i])
            d_next = dist[tid[i], cfg, nxt, dirs]  # [4]
            d_now = dist[tid[i], cfg, state.pos[i], state.facing[i]]
            best = jnp.argmin(d_next)
            # where it would go if the teammate were not there
            d_alone = dist[tid[i], cfg, jnp.where(env_free, target, state.pos[i]), dirs]
            want = target[jnp.argmin(d_alone)]
            at_goal = d_now == 0
            use = jnp.where(jnp.asarray(self.target_face)[tid[i]], INTERACT, STAY)
            a = jnp.where(at_goal, use, best + 1)
            a = jnp.where(active[i] & (d_now < UNREACHABLE), a, STAY)
            acts.append(a)
            wants.append(jnp.where(at_goal | ~active[i], state.pos[i], want))
            frees.append(env_free & ~occ)
            d_next_all.append(d_next)
            waiting.append(~active[i] | (d_now >= UNREACHABLE))
        head_on = (wants[0] == state.pos[1]) & (wants[1] == state.pos[0])
        side = jnp.where(frees[1], d_next_all[1], 10**6)
        aside = jnp.where(jnp.any(frees[1]), jnp.argmin(side) + 1, STAY)
        acts[1] = jnp.where(head_on, aside, acts[1])
        for i in range(self.num_agents):
            j = 1 - i
            # the teammate's distance from each neighbour (best facing): largest = off its way
            d_mate = dist[tid[j], cfg, state.pos[i] + delta].min(-1)  # [4]
            away = jnp.argmax(jnp.where(frees[i], d_mate, -1)) + 1
            in_way = waiting[i] & ~waiting[j] & (wants[j] == state.pos[i]) & jnp.any(frees[i])
            acts[i] = jnp.where(in_way, away, acts[i])
        return jnp.stack(acts).astype(jnp.int32)

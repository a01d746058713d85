"""Vectorized MPE simple spread: jaxmarl's ``SimpleSpreadMPE`` as whole-array ops.

jaxmarl's MPE step goes through per-agent dicts, Python loops over entities, a vmapped
action decoder and nested vmaps over entity pairs for the contact forces. Under
``vmap`` over thousands of envs on a CPU that makes the env step the rollout's
bottleneck. ``FastSimpleSpread`` computes the same transition on ``[num_entities, 2]``
arrays: one arithmetic action decode for all agents, contact forces once per unordered
pair of (colliding) agents, every observation in a single ``[N, obs_dim]`` array (the
dict is built only at the boundary) and the reward as one vectorized formula.

Two CPU-specific choices keep the reset cheap, which matters because ``ArrayEnv``
computes a reset at every step: the reset positions are drawn with threefry written
out in jnp ops (bit-identical to ``jax.random.split`` + ``uniform``, which on CPU
lower to unfusable while loops), and the reset observation is one exact 0/+-1 matmul
of the positions, so XLA materializes them instead of re-deriving the random bits
inside every observation entry. Static slices replace gathers throughout (XLA's CPU
gather is slow at these sizes).

It is a drop-in replacement: same constructor kwargs (the ones that matter for the
discrete spread task), same ``State`` class (jaxmarl's MPE ``State``), same key splits
(reset positions are bit-identical for a key; the step's action-noise keys are split
exactly as jaxmarl does when ``u_noise`` is non-zero), same observation layout
(``[vel, pos, landmarks - pos, other agents - pos, other agents' comm]`` with the other
agents in increasing index order, which is what jaxmarl's pair of ``jnp.roll`` calls
produces), same rewards (``local_ratio`` * -collisions + (1 - ``local_ratio``) *
-sum over landmarks of the nearest agent's distance), and the same done rule (``done``
when the step counter *before* the step has reached ``max_steps``, so an episode lasts
``max_steps + 1`` steps). ``tests/envs/test_spread.py`` checks it step for step against
jaxmarl's ``SimpleSpreadMPE``.
"""

from __future__ import annotations

from functools import partial

import jax
import jax.numpy as jnp
import numpy as np
from jaxmarl.environments.mpe.default_params import (
    CONTACT_FORCE,
    CONTACT_MARGIN,
    DAMPING,
    DISCRETE_ACT,
    DT,
    MAX_STEPS,
)
from jaxmarl.environments.mpe.simple import State
from jaxmarl.environments.multi_agent_env import MultiAgentEnv
from jaxmarl.environments.spaces import Box, Discrete

# jax.random's threefry written out in jnp ops
from envs.fast_random import raw_threefry_key as _raw_threefry_key
from envs.fast_random import threefry2x32 as _threefry2x32
from envs.fast_random import uniform_from_bits as _uniform_from_bits

__all__ = ["FastSimpleSpread", "State"]

AGENT_RAD = 0.15
LANDMARK_RAD = 0.05


def _per_entity(name: str, value, n: int, default) -> np.ndarray:
    """A per-entity (or per-agent) parameter as a host constant of length ``n``."""
    if value is None:
        return np.asarray(default)
    arr = np.asarray(value)
    if arr.shape != (n,):
        raise ValueError(f"{name} must have length {n}, got shape {arr.shape}")
    return arr


def _drop_diagonal(x, n: int):
    """``x`` of shape ``[n, n, *rest]`` -> ``[n, n - 1, *rest]`` without the diagonal.

    Row ``i`` keeps columns ``0..i-1, i+1..n-1`` in that order, which is the order
    jaxmarl's two ``jnp.roll`` calls give the other agents. Static reshapes and slices
    only (no gather; works on numpy arrays too): in row-major order the off-diagonal
    entries are the flat array without its first entry, cut into ``n - 1`` rows of
    ``n + 1`` whose last entry is the next diagonal one.
    """
    rest = x.shape[2:]
    if n == 1:
        return x[:, :0]
    flat = x.reshape((n * n, *rest))[1:]
    return flat.reshape((n - 1, n + 1, *rest))[:, :n].reshape((n, n - 1, *rest))


def split_uniform_2d(key: jax.Array, sizes: tuple[int, ...], minval: float, maxval: float):
    """``[jax.random.uniform(k, (m, 2), minval, maxval) for k, m in zip(split(key, len(sizes)),
    sizes)]`` concatenated, as two fused threefry evaluations (bit-identical)."""
    raw = _raw_threefry_key(key)
    if raw is None:
        keys = jax.random.split(key, len(sizes))
        return jnp.concatenate(
            [
                jax.random.uniform(keys[i], (m, 2), minval=minval, maxval=maxval)
                for i, m in enumerate(sizes)
            ]
        )
    # split: counters (hi, lo) = (0, i); the i-th key is (bits1[i], bits2[i]).
    num = len(sizes)
    s1, s2 = _threefry2x32(
        raw[0], raw[1], np.zeros(num, np.uint32), np.arange(num, dtype=np.uint32)
    )
    # bits of key i for shape (m, 2): counters (0, flat index), bits = bits1 ^ bits2.
    # (broadcasts, not a gather: XLA's CPU gather is slow at these sizes)
    k1 = jnp.concatenate([jnp.broadcast_to(s1[i], (2 * m,)) for i, m in enumerate(sizes)])
    k2 = jnp.concatenate([jnp.broadcast_to(s2[i], (2 * m,)) for i, m in enumerate(sizes)])
    counts = np.concatenate([np.arange(2 * m, dtype=np.uint32) for m in sizes])
    b1, b2 = _threefry2x32(k1, k2, np.zeros_like(counts), counts)
    return _uniform_from_bits(b1 ^ b2, minval, maxval).reshape(-1, 2)


class FastSimpleSpread(MultiAgentEnv):
    """MPE cooperative navigation (simple spread), vectorized; see the module docstring.

    Args:
        num_agents, num_landmarks, local_ratio, max_steps, dt: as jaxmarl's
            ``SimpleSpreadMPE``.
        action_type: only ``"Discrete"`` (jaxmarl's default) is supported.
        damping, contact_force, contact_margin: physics scalars, jaxmarl's defaults.
        mass, max_speed, moveable: per-entity arrays (``num_agents + num_landmarks``).
        accel, u_noise: per-agent arrays. ``u_noise`` adds Gaussian action noise drawn
            with jaxmarl's keys.
        silent, c_noise: accepted for compatibility; agents must be silent (jaxmarl's
            spread default), so the communication state stays zero and ``c_noise`` has
            no effect, as in jaxmarl.
    """

    def __init__(
        self,
        num_agents: int = 3,
        num_landmarks: int = 3,
        local_ratio: float = 0.5,
        action_type: str = DISCRETE_ACT,
        max_steps: int = MAX_STEPS,
        dt: float = DT,
        damping: float = DAMPING,
        contact_force: float = CONTACT_FORCE,
        contact_margin: float = CONTACT_MARGIN,
        mass=None,
        accel=None,
        max_speed=None,
        moveable=None,
        u_noise=None,
        silent=None,
        c_noise=None,
        dim_p: int = 2,
    ):
        if action_type != DISCRETE_ACT:
            raise NotImplementedError(
                f"FastSimpleSpread supports discrete actions only, got {action_type!r}"
            )
        if dim_p != 2:
            raise ValueError(f"dim_p must be 2 (as jaxmarl's MPE assumes), got {dim_p}")
        if not 0.0 <= local_ratio <= 1.0:
            raise ValueError("local_ratio must be between 0.0 and 1.0")
        if damping < 0:
            raise ValueError(f"damping must be non-negative, got {damping}")
        super().__init__(num_agents)
        n, nl = num_agents, num_landmarks
        e = n + nl
        self.num_landmarks = nl
        self.num_entities = e
        self.local_ratio = local_ratio
        self.max_steps = max_steps
        self.dt = dt
        self.damping = damping
        self.contact_force = contact_force
        self.contact_margin = contact_margin
        self.dim_c = 2  # jaxmarl: "follows code rather than docs"
        self.dim_p = 2
        self.landmarks = [f"landmark {i}" for i in range(nl)]
        self.a_to_i = {a: i for i, a in enumerate(self.agents)}
        self.l_to_i = {lm: i + n for i, lm in enumerate(self.landmarks)}
        self.agent_range = jnp.arange(n)
        self.entity_range = jnp.arange(e)

        # Per-entity constants, as jaxmarl's spread sets them (host arrays: compile-time
        # constants, and static checks below can look at them).
        self.rad = np.concatenate([np.full(n, AGENT_RAD), np.full(nl, LANDMARK_RAD)]).astype(
            np.float32
        )
        self.collide = np.concatenate([np.full(n, True), np.full(nl, False)])
        self.mass = _per_entity("mass", mass, e, np.full(e, 1.0, np.float32))
        self.accel = _per_entity("accel", accel, n, np.full(n, 5.0, np.float32))
        self.max_speed = _per_entity(
            "max_speed", max_speed, e, np.concatenate([np.full(n, -1.0), np.full(nl, 0.0)])
        ).astype(np.float32)
        self.moveable = _per_entity(
            "moveable", moveable, e, np.concatenate([np.full(n, True), np.full(nl, False)])
        ).astype(bool)
        self.u_noise = _per_entity("u_noise", u_noise, n, np.zeros(n, np.int32))
        self.silent = _per_entity("silent", silent, n, np.ones(n, np.int32))
        self.c_noise = _per_entity("c_noise", c_noise, n, np.zeros(n, np.int32))
        if not np.all(self.silent):
            raise NotImplementedError("FastSimpleSpread supports silent agents only")
        if np.any(self.mass <= 0) or np.any(self.accel <= 0):
            raise ValueError("mass and accel must be positive")

        obs_dim = 4 + (n - 1) * 4 + nl * 2
        self.obs_dim = obs_dim
        self.observation_spaces = {a: Box(-jnp.inf, jnp.inf, (obs_dim,)) for a in self.agents}
        self.action_spaces = {a: Discrete(5) for a in self.agents}

        # Derived constants for the vectorized step.
        # Agent control: u = unit(action) * accel * moveable (jaxmarl's decoder order).
        self._u_scale = (self.accel * self.moveable[:n]).astype(np.float32)[:, None]
        self._agents_moveable = self.moveable[:n]
        self._has_u_noise = bool(np.any(self.u_noise != 0))
        self._clip_speed = bool(np.any(self.max_speed >= 0))
        # Contact forces and collisions only concern entities that both collide: the
        # agents. Each unordered pair (a < b) once.
        self._pairs = [(a, b) for a in range(n) for b in range(a + 1, n)]
        self._pair_dist_min = np.array(
            [self.rad[a] + self.rad[b] for a, b in self._pairs], np.float32
        )
        self._reset_obs_matrix = self._make_reset_obs_matrix()

    # ----- the API -------------------------------------------------------------------
    @partial(jax.jit, static_argnums=(0,))
    def reset(self, key: jax.Array) -> tuple[dict, State]:
        """Uniform positions in [-1, 1]^2 drawn with jaxmarl's keys; zero velocities."""
        # jaxmarl: key_a, key_l = split(key); uniform(key_a, (N, 2)), uniform(key_l, (L, 2))
        p_pos = split_uniform_2d(key, (self.num_agents, self.num_landmarks), -1.0, 1.0)
        state = State(
            p_pos=p_pos,
            p_vel=jnp.zeros((self.num_entities, self.dim_p), jnp.float32),
            c=jnp.zeros((self.num_agents, self.dim_c), jnp.float32),
            done=jnp.zeros((), bool),
            step=jnp.zeros((), jnp.int32),
        )
        return self._to_dict(self._reset_obs(p_pos)), state

    @partial(jax.jit, static_argnums=(0,))
    def step_env(self, key: jax.Array, state: State, actions: dict):
        n = self.num_agents
        act = jnp.stack([jnp.reshape(actions[a], ()) for a in self.agents])  # [N]
        u = self._decode(act)  # [N, 2]
        if self._has_u_noise:
            # jaxmarl: key, key_w = split(key); one normal per agent from split(key_w, N)
            _, key_w = jax.random.split(key)
            noise_keys = jax.random.split(key_w, n)
            noise = jax.vmap(lambda k: jax.random.normal(k, (2,)))(noise_keys)
            u = u + noise * jnp.asarray(self.u_noise, jnp.float32)[:, None]
        if not self._agents_moveable.all():
            u = jnp.where(jnp.asarray(self._agents_moveable)[:, None], u, 0.0)

        p_pos, p_vel = self._physics(state.p_pos, state.p_vel, u)
        done = state.step >= self.max_steps
        # Silent agents: the communication state is zero (jaxmarl selects zeros).
        c = jnp.zeros((n, self.dim_c), state.c.dtype)
        state = state.replace(p_pos=p_pos, p_vel=p_vel, c=c, done=done, step=state.step + 1)

        obs, rew = self._obs_and_reward(p_pos, p_vel, None)
        dones = {a: done for a in self.agents}
        dones["__all__"] = done
        return self._to_dict(obs), state, self._to_dict(rew), dones, {}

    def get_obs(self, state: State) -> dict:
        return self._to_dict(self._obs_and_reward(state.p_pos, state.p_vel, state.c)[0])

    def rewards(self, state: State) -> dict:
        return self._to_dict(self._obs_and_reward(state.p_pos, state.p_vel, state.c)[1])

    @property
    def agent_classes(self) -> dict:
        return {"agents": self.agents}

    # ----- array versions --------------------------------------------------------------
    def _to_dict(self, x: jax.Array) -> dict:
        return {a: x[i] for i, a in enumerate(self.agents)}

    def _decode(self, act: jax.Array) -> jax.Array:
        """Discrete actions [N] -> controls [N, 2]: 0 no-op, 1 -x, 2 +x, 3 -y, 4 +y."""
        ux = (act == 2).astype(jnp.float32) - (act == 1).astype(jnp.float32)
        uy = (act == 4).astype(jnp.float32) - (act == 3).astype(jnp.float32)
        return jnp.stack([ux, uy], axis=-1) * jnp.asarray(self._u_scale)

    def _pair_deltas(self, pa: jax.Array) -> jax.Array:
        """``p_a - p_b`` for every agent pair a < b, [P, 2] (static slices, no gather)."""
        return jnp.stack([pa[a] - pa[b] for a, b in self._pairs])

    def _per_agent(self, v: jax.Array, negate_for_b: bool) -> jax.Array:
        """Agent i's sum over the pairs it is in of ``v[p]`` ([P, ...] -> [N, ...]), with
        ``-v[p]`` where i is the pair's second agent if ``negate_for_b``."""
        rows = []
        for i in range(self.num_agents):
            total = None
            for p, (a, b) in enumerate(self._pairs):
                if i not in (a, b):
                    continue
                term = -v[p] if (negate_for_b and i == b) else v[p]
                total = term if total is None else total + term
            rows.append(total)
        return jnp.stack(rows)

    def _contact_forces(self, pa: jax.Array) -> jax.Array:
        """Soft contact forces between the agents, [N, 2] (each agent's total).

        As jaxmarl, once per pair a < b: ``f = contact_force * (p_a - p_b) / dist *
        logaddexp(0, -(dist - dist_min) / k) * k``, pushing a by ``+f`` and b by ``-f``.
        """
        if not self._pairs:
            return jnp.zeros_like(pa)
        delta = self._pair_deltas(pa)  # [P, 2]
        dist = jnp.sqrt(jnp.sum(jnp.square(delta), axis=-1))  # [P]
        k = self.contact_margin
        penetration = jnp.logaddexp(0.0, -(dist - jnp.asarray(self._pair_dist_min)) / k) * k
        force = self.contact_force * delta / dist[:, None] * penetration[:, None]
        total = self._per_agent(force, negate_for_b=True)
        if not self._agents_moveable.all():
            total = total * jnp.asarray(self._agents_moveable, jnp.float32)[:, None]
        return total

    def _physics(self, p_pos: jax.Array, p_vel: jax.Array, u: jax.Array):
        """One world step: control and contact forces, damping, integration, speed cap."""
        n, nl = self.num_agents, self.num_landmarks
        f_agents = self._contact_forces(p_pos[:n]) + u
        p_force = jnp.concatenate([f_agents, jnp.zeros((nl, 2), f_agents.dtype)])
        mass = jnp.asarray(self.mass, jnp.float32)[:, None]
        moveable = jnp.asarray(self.moveable, jnp.float32)[:, None]
        new_pos = p_pos + p_vel * self.dt
        vel = p_vel * (1 - self.damping)
        vel = vel + (p_force / mass) * self.dt * moveable
        if self._clip_speed:
            max_speed = jnp.asarray(self.max_speed)[:, None]
            speed = jnp.sqrt(jnp.sum(jnp.square(vel), axis=-1, keepdims=True))
            over = vel / speed * max_speed
            vel = jnp.where((speed > max_speed) & (max_speed >= 0), over, vel)
        return new_pos, vel

    def _obs_and_reward(self, p_pos: jax.Array, p_vel: jax.Array, c: jax.Array | None):
        """Observations [N, obs_dim] and rewards [N] (``c=None``: zero communication)."""
        n, nl = self.num_agents, self.num_landmarks
        pa = p_pos[:n]
        land_rel = p_pos[None, n:, :] - pa[:, None, :]  # [N, L, 2]
        other_rel = _drop_diagonal(pa[None, :, :] - pa[:, None, :], n)  # [N, N-1, 2]
        if c is None:
            comm = jnp.zeros((n, (n - 1) * self.dim_c), pa.dtype)
        else:
            comm = _drop_diagonal(jnp.broadcast_to(c[None, :n], (n, n, c.shape[-1])), n)
            comm = comm.reshape(n, -1)
        obs = jnp.concatenate(
            [p_vel[:n], pa, land_rel.reshape(n, -1), other_rel.reshape(n, -1), comm], axis=-1
        )

        # Global: each landmark is covered by its nearest agent.
        if nl:
            land_dist = jnp.sqrt(jnp.sum(jnp.square(land_rel), axis=-1))  # [N, L]
            global_rew = -jnp.sum(jnp.min(land_dist, axis=0))
        else:
            global_rew = jnp.zeros((), jnp.float32)
        # Local: -1 per other agent in contact (dist < rad_a + rad_b).
        if self._pairs:
            delta = self._pair_deltas(pa)
            hit = jnp.sqrt(jnp.sum(jnp.square(delta), axis=-1)) < self._pair_dist_min
            hits = self._per_agent(hit.astype(jnp.int32), negate_for_b=False)
        else:
            hits = jnp.zeros((n,), jnp.int32)
        rew = (-hits) * self.local_ratio + global_rew * (1 - self.local_ratio)
        return obs, rew.astype(jnp.float32)

    def _make_reset_obs_matrix(self) -> np.ndarray:
        """``M`` with ``p_pos.reshape(-1) @ M == obs.reshape(-1)`` at zero velocity and
        communication: every entry is ``+p``, ``p_j - p_i`` or 0, so the product (at
        HIGHEST precision) is exact. Computing the reset observation as one small matmul
        makes XLA materialize the freshly drawn positions once; as elementwise ops it
        re-derives the threefry bits inside every observation entry."""
        n, nl, d = self.num_agents, self.num_landmarks, self.obs_dim
        m = np.zeros((self.num_entities, 2, n, d), np.float32)
        for i in range(n):
            m[i, :, i, 2:4] += np.eye(2)  # own position
            for j in range(nl):  # landmarks relative to agent i
                cols = slice(4 + 2 * j, 6 + 2 * j)
                m[n + j, :, i, cols] += np.eye(2)
                m[i, :, i, cols] -= np.eye(2)
            for j, o in enumerate(o for o in range(n) if o != i):  # other agents
                cols = slice(4 + 2 * nl + 2 * j, 6 + 2 * nl + 2 * j)
                m[o, :, i, cols] += np.eye(2)
                m[i, :, i, cols] -= np.eye(2)
        return m.reshape(2 * self.num_entities, n * d)

    def _reset_obs(self, p_pos: jax.Array) -> jax.Array:
        flat = jnp.dot(
            p_pos.reshape(-1),
            jnp.asarray(self._reset_obs_matrix),
            precision=jax.lax.Precision.HIGHEST,
        )
        return flat.reshape(self.num_agents, self.obs_dim)

"""Conformance checks every registered environment must pass.

``check_env_static_conformance`` traces (never compiles) the ``ArrayEnv`` view and checks
the registry contract, shapes and dtypes; it costs well under a second per env.
``check_env_conformance`` adds the dynamic checks: one ``jit(vmap(rollout))`` of random
legal play compared step for step with the unjitted, unbatched ``ArrayEnv``, determinism,
auto-reset and episode statistics, and action masks.

Compiled rollouts are cached per (env, kwargs, steps), so env-specific tests that use
``rollout_harness`` with the same arguments reuse the compilation.
"""

from __future__ import annotations

import functools
from dataclasses import dataclass
from typing import Any

import chex
import jax
import jax.numpy as jnp
import numpy as np
from jaxmarl.environments.multi_agent_env import MultiAgentEnv

import envs
from envs.array_env import ArrayEnv

BATCH_KEYS = (0, 1, 0)  # rows 0 and 2 share a key: vmap must not mix rows
EAGER_STEPS = 2  # steps replayed without jit/vmap per checked row
FLOAT_TOL = {"rtol": 1e-5, "atol": 1e-5}


def _single_action_counts(env: MultiAgentEnv, agents: list[str]) -> list[int]:
    return [int(env.action_space(a).n) for a in agents]


def check_env_static_conformance(name: str, **env_kwargs) -> ArrayEnv:
    """Registry contract, ``ArrayEnv`` construction and traced shapes/dtypes."""
    spec = envs.spec(name)
    assert spec.name == name
    assert isinstance(spec.description, str) and spec.description
    env = envs.make(name, **env_kwargs)
    assert isinstance(env, MultiAgentEnv), f"{name}: make returned {type(env)}"
    aenv = envs.make_array_env(name, **env_kwargs)
    assert isinstance(aenv, ArrayEnv)
    assert aenv.agents == list(env.agents)
    n, d, a, s = aenv.num_agents, aenv.obs_dim, aenv.num_actions, aenv.world_state_dim
    assert n >= 1 and d >= 1 and a >= 1 and s >= 1
    assert a == max(_single_action_counts(env, aenv.agents))
    assert aenv.agent_groups.shape == (n,)
    assert aenv.agent_groups.min() == 0
    assert set(aenv.agent_groups.tolist()) == set(range(aenv.num_groups)), "gaps in groups"
    assert aenv.has_won == (spec.won_fn is not None)

    def trace(key):
        obs, state = aenv.reset(key)
        res = aenv.step(key, state, jnp.zeros((n,), jnp.int32))
        return obs, state, aenv.avail_actions(state), aenv.world_state(state, obs), res

    obs, state, avail, ws, res = jax.eval_shape(trace, jax.random.PRNGKey(0))
    for what, x, shape, dtype in (
        ("reset obs", obs, (n, d), jnp.float32),
        ("reset avail", avail, (n, a), jnp.bool_),
        ("world_state", ws, (s,), jnp.float32),
        ("obs", res.obs, (n, d), jnp.float32),
        ("terminal_obs", res.terminal_obs, (n, d), jnp.float32),
        ("reward", res.reward, (n,), jnp.float32),
        ("done", res.done, (), jnp.bool_),
        ("avail_actions", res.avail_actions, (n, a), jnp.bool_),
        ("info episode_return", res.info["episode_return"], (n,), jnp.float32),
        ("info episode_length", res.info["episode_length"], (), jnp.int32),
        ("info won", res.info["won"], (), jnp.bool_),
    ):
        assert x.shape == shape and x.dtype == dtype, f"{name}: {what} {x.shape} {x.dtype}"
    # A step's state must have the reset state's avals, weak types included, or a jitted
    # step retraces and recompiles on its own output.
    avals = lambda t: jax.tree.map(lambda x: (x.shape, x.dtype, x.weak_type), t)
    assert avals(res.state) == avals(state), f"{name}: step state avals differ from reset's"
    return aenv


# ----- compiled rollouts ----------------------------------------------------------------
def _rollout(aenv: ArrayEnv, steps: int, key: jax.Array) -> tuple[dict, dict]:
    """Reset, then ``steps`` auto-resetting steps of uniform random legal actions."""
    k_reset, k_run = jax.random.split(key)
    obs, state = aenv.reset(k_reset)
    avail = aenv.avail_actions(state)
    start = {"obs": obs, "avail": avail, "world_state": aenv.world_state(state, obs)}

    def body(carry, k):
        obs, state, avail = carry
        k_act, k_step = jax.random.split(k)
        actions = aenv.random_actions(k_act, avail)
        r = aenv.step(k_step, state, actions)
        out = {
            "actions": actions,
            "avail_before": avail,
            "obs": r.obs,
            "terminal_obs": r.terminal_obs,
            "reward": r.reward,
            "done": r.done,
            "avail": r.avail_actions,
            "world_state": aenv.world_state(r.state, r.obs),
            "state_episode_return": r.state.episode_return,
            "state_episode_length": r.state.episode_length,
            "info": r.info,
        }
        return (r.obs, r.state, r.avail_actions), out

    _, traj = jax.lax.scan(body, (obs, state, avail), jax.random.split(k_run, steps))
    return start, traj


def _step_keys(key: jax.Array, steps: int) -> tuple[jax.Array, jax.Array]:
    """The reset key and per-step keys ``_rollout`` derives from ``key``."""
    k_reset, k_run = jax.random.split(key)
    return k_reset, jax.random.split(k_run, steps)


@dataclass(frozen=True)
class Harness:
    name: str
    env_kwargs: dict[str, Any]
    aenv: ArrayEnv
    steps: int
    rollout: Any  # jit(vmap(_rollout)): keys [B, 2] -> (start, traj), leaves [B, (T,) ...]

    def run(self, seeds=BATCH_KEYS) -> tuple[dict, dict]:
        keys = jnp.stack([jax.random.PRNGKey(s) for s in seeds])
        return jax.tree.map(np.asarray, self.rollout(keys))


@functools.cache
def _harness(name: str, kwargs_items: tuple, steps: int) -> Harness:
    env_kwargs = dict(kwargs_items)
    aenv = envs.make_array_env(name, **env_kwargs)
    fn = jax.jit(jax.vmap(functools.partial(_rollout, aenv, steps)))
    return Harness(name, env_kwargs, aenv, steps, fn)


def rollout_harness(name: str, steps: int = 32, **env_kwargs) -> Harness:
    """Compiled random-play rollout for ``name``, cached when the kwargs are hashable."""
    items = tuple(sorted(env_kwargs.items()))
    try:
        hash(items)
    except TypeError:
        return _harness.__wrapped__(name, items, steps)
    return _harness(name, items, steps)


# ----- the full check ----------------------------------------------------------------------
def _assert_close(a, b, what: str):
    a, b = np.asarray(a), np.asarray(b)
    assert a.shape == b.shape, f"{what}: shape {a.shape} != {b.shape}"
    if np.issubdtype(a.dtype, np.floating):
        np.testing.assert_allclose(a, b, err_msg=what, **FLOAT_TOL)
    else:
        np.testing.assert_array_equal(a, b, err_msg=what)


def _check_eager_matches(h: Harness, start: dict, traj: dict, row: int, seed: int):
    """Replay the first steps of row ``row`` without jit or vmap and compare."""
    aenv = h.aenv
    k_reset, step_keys = _step_keys(jax.random.PRNGKey(seed), h.steps)
    obs, state = aenv.reset(k_reset)
    avail = aenv.avail_actions(state)
    chex.assert_shape(obs, (aenv.num_agents, aenv.obs_dim))
    _assert_close(obs, start["obs"][row], f"{h.name}: reset obs (eager vs jit/vmap)")
    _assert_close(avail, start["avail"][row], f"{h.name}: reset avail")
    _assert_close(
        aenv.world_state(state, obs), start["world_state"][row], f"{h.name}: reset world_state"
    )
    for t in range(min(EAGER_STEPS, h.steps)):
        k_act, k_step = jax.random.split(step_keys[t])
        actions = aenv.random_actions(k_act, avail)
        _assert_close(actions, traj["actions"][row, t], f"{h.name}: actions t={t}")
        r = aenv.step(k_step, state, actions)
        assert r.obs.dtype == jnp.float32 and r.reward.dtype == jnp.float32
        assert r.done.dtype == jnp.bool_ and r.avail_actions.dtype == jnp.bool_
        for field in ("obs", "terminal_obs", "reward", "done"):
            _assert_close(getattr(r, field), traj[field][row, t], f"{h.name}: {field} t={t}")
        _assert_close(r.avail_actions, traj["avail"][row, t], f"{h.name}: avail t={t}")
        _assert_close(
            aenv.world_state(r.state, r.obs),
            traj["world_state"][row, t],
            f"{h.name}: world_state t={t}",
        )
        for k in ("episode_return", "episode_length", "won"):
            _assert_close(r.info[k], traj["info"][k][row, t], f"{h.name}: info[{k}] t={t}")
        obs, state, avail = r.obs, r.state, r.avail_actions


def _check_shapes(h: Harness, start: dict, traj: dict, batch: int):
    a = h.aenv
    n, d, na, s, t = a.num_agents, a.obs_dim, a.num_actions, a.world_state_dim, h.steps
    expect = {
        "obs": ((batch, t, n, d), np.float32),
        "terminal_obs": ((batch, t, n, d), np.float32),
        "reward": ((batch, t, n), np.float32),
        "done": ((batch, t), np.bool_),
        "avail": ((batch, t, n, na), np.bool_),
        "world_state": ((batch, t, s), np.float32),
        "actions": ((batch, t, n), np.int32),
    }
    for k, (shape, dtype) in expect.items():
        assert traj[k].shape == shape, f"{h.name}: {k} shape {traj[k].shape} != {shape}"
        assert traj[k].dtype == dtype, f"{h.name}: {k} dtype {traj[k].dtype} != {dtype}"
    assert start["obs"].shape == (batch, n, d) and start["world_state"].shape == (batch, s)
    for k in ("obs", "terminal_obs", "reward", "world_state"):
        assert np.isfinite(traj[k]).all(), f"{h.name}: non-finite {k}"


def _check_masks(h: Harness, start: dict, traj: dict):
    name = h.name
    for avail in (start["avail"], traj["avail"], traj["avail_before"]):
        assert avail.any(-1).all(), f"{name}: an agent has no legal action"
    counts = _single_action_counts(h.aenv.env, h.aenv.agents)
    for i, n_i in enumerate(counts):
        assert not traj["avail"][..., i, n_i:].any(), f"{name}: padded action {i} available"
    chosen = np.take_along_axis(traj["avail_before"], traj["actions"][..., None], -1)[..., 0]
    assert chosen.all(), f"{name}: random_actions picked a masked action"


def _check_episodes(h: Harness, traj: dict, won_possible: bool):
    """Episode statistics against a numpy replay of the rewards and dones."""
    name = h.name
    done, reward = traj["done"], traj["reward"]
    info = traj["info"]
    assert done.any(), (
        f"{name}: no episode ended in {h.steps} random steps; pass short-episode kwargs "
        "or more steps"
    )
    batch, steps = done.shape
    for b in range(batch):
        ret = np.zeros(reward.shape[-1], np.float64)
        length = 0
        for t in range(steps):
            ret += reward[b, t]
            length += 1
            assert info["episode_length"][b, t] == length, f"{name}: episode_length b={b} t={t}"
            np.testing.assert_allclose(
                info["episode_return"][b, t], ret, rtol=1e-4, atol=1e-4, err_msg=name
            )
            if done[b, t]:
                ret[:] = 0.0
                length = 0
            assert traj["state_episode_length"][b, t] == length, f"{name}: counter restart"
            np.testing.assert_allclose(
                traj["state_episode_return"][b, t], ret, rtol=1e-4, atol=1e-4, err_msg=name
            )
    # Observations carry on unchanged between resets and are replaced at a reset.
    live = ~done
    np.testing.assert_array_equal(traj["obs"][live], traj["terminal_obs"][live])
    obs_vary = np.ptp(np.concatenate([traj["obs"], traj["terminal_obs"]]), axis=(0, 1)).any()
    if obs_vary:
        same = (traj["obs"][done] == traj["terminal_obs"][done]).reshape(int(done.sum()), -1)
        assert not same.all(-1).any(), f"{name}: terminal_obs equals the reset obs at a done"
    if not won_possible:
        assert not info["won"].any(), f"{name}: won set for an env without won_fn"


def _check_auto_reset_obs(h: Harness, traj: dict, row: int, seed: int):
    """At the first done of ``row`` the returned obs is a fresh reset with the step's key."""
    t = int(np.argmax(traj["done"][row]))
    _, step_keys = _step_keys(jax.random.PRNGKey(seed), h.steps)
    _, k_step = jax.random.split(step_keys[t])
    _, k_reset = jax.random.split(k_step)  # ArrayEnv.step: key_step, key_reset = split(key)
    obs, state = h.aenv.reset(k_reset)
    _assert_close(obs, traj["obs"][row, t], f"{h.name}: obs after auto-reset t={t}")
    _assert_close(
        h.aenv.avail_actions(state), traj["avail"][row, t], f"{h.name}: avail after auto-reset"
    )


def check_env_conformance(
    name: str, *, rollout_steps: int = 32, reset_uses_key: bool = True, **env_kwargs
) -> Harness:
    """Every conformance check on ``envs.make_array_env(name, **env_kwargs)``.

    Args:
        rollout_steps: random-play steps per rollout; at least one episode must end.
        reset_uses_key: whether different keys must give different initial observations
            (False for envs whose start state is fixed by design, e.g. matrix games).
    """
    aenv = check_env_static_conformance(name, **env_kwargs)
    h = rollout_harness(name, rollout_steps, **env_kwargs)
    start, traj = h.run()
    again = h.run()
    batch = len(BATCH_KEYS)
    _check_shapes(h, start, traj, batch)

    # Determinism: same key, same trajectory (across calls and across batch rows).
    chex.assert_trees_all_equal((start, traj), again)
    chex.assert_trees_all_equal(
        jax.tree.map(lambda x: x[0], (start, traj)), jax.tree.map(lambda x: x[2], (start, traj))
    )
    if reset_uses_key:
        firsts = h.run(seeds=tuple(range(batch)))[0]["obs"]  # same batch: no recompile
        assert any(not np.array_equal(firsts[0], firsts[i]) for i in range(1, batch)), (
            f"{name}: reset ignores its key; if the start state is fixed by design pass "
            "reset_uses_key=False"
        )

    # jit(vmap(...)) equals the plain ArrayEnv, row by row.
    for row in (0, 1):
        _check_eager_matches(h, start, traj, row, BATCH_KEYS[row])

    _check_masks(h, start, traj)
    _check_episodes(h, traj, won_possible=aenv.has_won)
    _check_auto_reset_obs(h, traj, 0, BATCH_KEYS[0])
    return h

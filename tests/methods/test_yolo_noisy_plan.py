"""The scripted rungs of YOLO-MARL's label ladder: a reference plan that is wrong on a set
fraction of (state, agent) pairs, the same way every time it sees the same state."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from envs.lbf import LBFState
from jaxmarl_llm.methods.yolo.noisy_plan import corrupt_tasks, noisy_planning, state_key


def _states(n: int) -> LBFState:
    k1, k2 = jax.random.split(jax.random.PRNGKey(0))
    return LBFState(
        agent_pos=jax.random.randint(k1, (n, 2, 2), 0, 8),
        agent_level=jnp.ones((n, 2), jnp.int32),
        food_pos=jax.random.randint(k2, (n, 2, 2), 0, 8),
        food_level=jnp.full((n, 2), 2, jnp.int32),
        food_alive=jnp.ones((n, 2), bool),
        step=jnp.arange(n, dtype=jnp.int32),
    )


def _nearest_food(state):  # a stand-in reference plan: both agents on food 0 or 1
    d = jnp.abs(state.agent_pos[:, None] - state.food_pos[None]).sum(-1).sum(0)
    return jnp.full((2,), jnp.argmin(d), jnp.int32)


@pytest.mark.parametrize("jit, accuracy", [(False, 0.6), (True, 0.9)], ids=["eager", "jit"])
def test_the_noisy_plan_agrees_at_its_accuracy_and_only_errs_to_other_tasks(jit, accuracy):
    planner = noisy_planning(_nearest_food, num_tasks=3, accuracy=accuracy, seed=1)
    batched = jax.vmap(planner)
    batched = jax.jit(batched) if jit else batched
    states = _states(2000)
    noisy, truth = batched(states), jax.vmap(_nearest_food)(states)
    agree = np.asarray(noisy == truth)
    assert abs(agree.mean() - accuracy) < 0.03  # 4000 (state, agent) pairs
    wrong = np.asarray(noisy)[~agree]
    assert ((wrong >= 0) & (wrong < 3)).all()
    # the two wrong choices are equally likely: off by +1 or +2 around the circle
    offset = (np.asarray(noisy) - np.asarray(truth))[~agree] % 3
    assert set(offset) == {1, 2} and abs((offset == 1).mean() - 0.5) < 0.06
    # a function of the state: the same states give the same tasks again
    np.testing.assert_array_equal(batched(states), noisy)


def test_the_noise_is_keyed_on_the_whole_state_and_the_seed():
    s = jax.tree.map(lambda x: x[0], _states(1))
    base = state_key(0, s)
    assert (state_key(0, s) == base).all()
    assert not (state_key(1, s) == base).all()
    assert not (state_key(0, s.replace(step=s.step + 1)) == base).all()
    moved = s.replace(agent_pos=s.agent_pos.at[1, 0].add(1))
    assert not (state_key(0, moved) == base).all()
    # accuracy 1 keeps every task, accuracy 0 changes every one
    tasks = jnp.array([0, 2])
    np.testing.assert_array_equal(corrupt_tasks(base, tasks, 3, 1.0), tasks)
    assert (corrupt_tasks(base, tasks, 3, 0.0) != tasks).all()
    with pytest.raises(ValueError, match="at least 2 tasks"):
        corrupt_tasks(base, tasks, 1, 0.5)
    with pytest.raises(ValueError, match=r"must be in \[0, 1\]"):
        noisy_planning(_nearest_food, 3, 1.2, 0)

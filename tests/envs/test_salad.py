"""The salad kitchen (envs/salad): scripted team, map B's hand-over, rewards, masks, text."""

import functools

import jax
import jax.numpy as jnp
import numpy as np
import pytest

import envs
from envs.salad import maps
from envs.salad.env import (
    CHOP,
    CHOPS_NEEDED,
    DELIVER,
    GET_LETTUCE,
    GET_PLATE,
    GET_TOMATO,
    GO_COUNTER,
    GO_KNIFE_1,
    OBS_DIM,
    REWARD_CHOP,
    REWARD_COLLISION,
    REWARD_DISH,
    REWARD_STEP,
    REWARD_WRONG_DELIVERY,
    TASKS,
    WAIT,
    SaladKitchen,
    episode_stats,
)
from envs.salad.scripted import run_scripted, scripted_actions
from envs.salad.text import action_phrases, global_description, text_observations

KEY = jax.random.PRNGKey(0)

# Steps the scripted team takes per task, in TASKS order. A leg "walk n, act 1" is a
# macro-action that walks n cells to the target's neighbouring floor cell and acts on the
# next step; the next macro-action starts on the step after.
#
# Map A, tomato salad (the chef at (1,2) works alone; its partner waits at (1,4), which the
# chef walks around):
#   get tomato   (0,5) from (1,2) around (1,4) via row 2 to (1,5): walk 5 + pick 1 =  6
#   go to knife 1 (1,0): (1,5) -> (1,1), around (1,4):       walk 6 + put 1  =  7 (13)
#   chop: three chops                                                        =  3 (16)
#   get plate (6,5): (1,1) -> (5,5)                          walk 8 + pick 1 =  9 (25)
#   get tomato on knife 1 with the plate: (5,5) -> (1,1)     walk 8 + scoop 1 = 9 (34)
#   deliver (3,0): (1,1) -> (3,1)                            walk 2 + serve 1 = 3 (37)
# Lettuce (1,6) shares the tomato's access cell (1,5): 37. The onion (2,6) is reached from
# (2,5): 5 then 6 for the first two legs, so 35.
# Lettuce-tomato: tomato legs to 16 as above; get lettuce from (1,1) around (1,4) 6+1 (23);
# knife 2 from (1,5) to (2,1) 5+1 (29); chop 3 (32); plate from (2,1) 7+1 (40); tomato
# from knife 1 8+1 (49); lettuce from knife 2 1+1 (51); deliver from (2,1) 1+1 (53). With
# the onion instead of the tomato or the lettuce, one leg starts or ends at (2,5): 51.
# Lettuce-onion-tomato: the two-food legs to 51 (tomato and lettuce in the plate); the onion
# still needs knife 1, so the plate is parked on knife 2 from (2,1) 0+1 (52); get onion
# from (2,1) to (2,5) 4+1 (57); knife 1 5+1 (63); chop 3 (66); pick the chopped onion up
# 0+1 (67); get plate: to (2,1), pick up the parked plate with the onion put in 1+1 (69);
# deliver 1+1 (71).
#
# Map B, tomato salad: the runner (1,4) gets the tomato 1+1 (2) and puts it on the wall's
# first counter (3,3) from (3,4) 3+1 (6), then takes the plate 3+1 (10) to the wall. The
# chef waits 6 steps (nothing reachable), takes the tomato from (3,2) 2+1 (9), knife 1 3+1
# (13), chops 3 (16), takes the plate the runner left on (3,3) at step 14 3+1 (20), scoops
# the tomato 3+1 (24) and delivers 2+1 (27). Every single food gives 27: the runner's
# legs only decide when the chef may start, and each food reaches the wall by step 6.
# Lettuce-tomato: the tomato legs to 16; the lettuce, on the wall (3,3) since 14, from
# (1,1) to (3,2) 3+1 (20); knife 2 from (3,2) to (2,1) 2+1 (23); chop 3 (26); the plate, on
# the wall since 22, 2+1 (29); tomato on knife 1 3+1 (33); lettuce on knife 2 1+1 (35);
# deliver 1+1 (37). Any two foods give 37 (each is on the wall before the chef asks).
# Lettuce-onion-tomato: as above to 26; the runner carried the onion before the plate, so
# the plate reaches the wall at 28 and the chef takes it 2+1 (31); tomato 3+1 (35);
# lettuce 1+1 (37); park the plate on knife 2 0+1 (38); the onion, on the wall (2,3),
# 1+1 (40); knife 1 2+1 (43); chop 3 (46); pick the onion up 0+1 (47); the parked plate
# 1+1 (49); deliver 1+1 (51).
EXPECTED_STEPS = {
    "A": (37, 37, 35, 53, 51, 51, 71),
    "B": (27, 27, 27, 37, 37, 37, 51),
}


@functools.cache
def _env(map_name: str, **kwargs) -> SaladKitchen:
    return SaladKitchen(map_name, **kwargs)


def _start_states(env: SaladKitchen):
    """One start state per task of TASKS, stacked."""
    _, state = env.reset(KEY)
    return jax.vmap(lambda t: state.replace(task=t))(jnp.arange(len(TASKS), dtype=jnp.int32))


@functools.cache
def _scripted_runs(map_name: str, forbid: tuple = ()):
    env = _env(map_name)
    run = jax.jit(jax.vmap(lambda s: run_scripted(env, s, forbid)))
    return jax.tree.map(np.asarray, run(_start_states(env)))


@functools.cache
def _jit_step(env):
    return jax.jit(env.step_env)


def _step(env, state, a0, a1):
    _, state, rewards, dones, _ = _jit_step(env)(
        KEY, state, {"agent_0": jnp.int32(a0), "agent_1": jnp.int32(a1)}
    )
    return state, float(rewards["agent_0"]), bool(dones["__all__"])


def _run_macro(env, state, agent, macro, other=WAIT):
    """Step until ``agent``'s macro-action ends; returns (state, rewards, done)."""
    rewards = []
    while True:
        actions = [other, other]
        actions[agent] = macro
        state, r, done = _step(env, state, *actions)
        rewards.append(r)
        if done or not bool(state.busy[agent]):
            return state, rewards, done


@pytest.mark.parametrize("map_name", ["A", "B"])
def test_scripted_team_finishes_every_task_in_its_known_steps(map_name):
    final = _scripted_runs(map_name)
    assert final.delivered.all()
    np.testing.assert_array_equal(final.step, EXPECTED_STEPS[map_name])
    np.testing.assert_array_equal(final.collisions, 0)
    np.testing.assert_array_equal(final.wrong_deliveries, 0)


@pytest.mark.parametrize("map_name", ["A", "B"])
def test_scripted_actions_are_always_available(map_name):
    env = _env(map_name)

    def body(state, _):
        actions = scripted_actions(env, state)
        avail = env.get_avail_actions(state)
        ok = jnp.stack([avail[a][actions[i]] for i, a in enumerate(env.agents)]).all()
        live = ~state.delivered
        _, state, *_ = env.step_env(KEY, state, dict(zip(env.agents, actions, strict=True)))
        return state, ok | ~live

    scan = jax.jit(jax.vmap(lambda s: jax.lax.scan(body, s, None, length=80)[1]))
    assert np.asarray(scan(_start_states(env))).all()


def test_map_b_sides_cannot_reach_each_others_items():
    k = maps.kitchen("B")
    chef, runner = (int(r * 7 + c) for r, c in k.agent_start)
    free = maps.NUM_CELLS
    for item_cell in k.item_start:  # food and plate lie on the runner's side
        assert k.distance[item_cell, free, chef] == maps.UNREACHABLE
        assert k.distance[item_cell, free, runner] < maps.UNREACHABLE
    for tool in (*k.knives, k.delivery):  # knives and delivery on the chef's side
        assert k.distance[tool, free, runner] == maps.UNREACHABLE
        assert k.distance[tool, free, chef] < maps.UNREACHABLE
    for wall in k.wall_counters:  # the wall is the only place both reach
        assert k.distance[wall, free, chef] < maps.UNREACHABLE
        assert k.distance[wall, free, runner] < maps.UNREACHABLE


def test_map_b_is_not_solved_without_the_counter_hand_over():
    final = _scripted_runs("B", forbid=(GO_COUNTER,))
    assert not final.delivered.any()
    np.testing.assert_array_equal(final.step, 200)


def test_walking_into_the_teammate_is_a_charged_collision():
    env = _env("A", task="tomato salad")
    _, state = env.reset(KEY)
    # agent 0 (1,2) heads right for the tomato; agent 1 (1,4) heads left for knife 1 around
    # agent 0: both step into (1,3); agent 0 moves first, agent 1 is blocked
    state, reward, _ = _step(env, state, GET_TOMATO, GO_KNIFE_1)
    assert reward == pytest.approx(REWARD_STEP + REWARD_COLLISION)
    np.testing.assert_array_equal(state.agent_pos, [[1, 3], [1, 4]])
    assert int(state.collisions) == 1
    assert bool(state.busy[0]) and not bool(state.busy[1])  # the blocked macro-action ends
    state, reward, _ = _step(env, state, WAIT, WAIT)
    assert reward == pytest.approx(REWARD_STEP)


def test_cooks_walking_head_on_pass_each_other():
    env = _env("A", task="tomato salad")
    _, state = env.reset(KEY)
    # agent 0 at (1,1) walks right to the tomato's access cell (1,5); agent 1 at (1,4) walks
    # left to knife 1's (1,1): each is on the other's shortest path. Moving cooks route
    # through each other and swap on the second step, so both arrive in their shortest walk
    state = state.replace(agent_pos=jnp.array([[1, 1], [1, 4]], jnp.int32))
    steps = 0
    while bool(state.busy[1]) or steps == 0:
        state, _, _ = _step(env, state, GET_TOMATO, GO_KNIFE_1)
        steps += 1
        assert steps <= 5
    assert steps == 4  # agent 1: walk 3, then empty-handed it stops next to the knife
    np.testing.assert_array_equal(state.agent_pos[1], [1, 1])
    state, _, _ = _step(env, state, GET_TOMATO, WAIT)  # agent 0 picks the tomato up
    assert not bool(state.busy[0]) and int(state.item_holder[0]) == 0


def test_a_cook_holding_something_is_not_offered_chop_and_a_chop_ends_after_its_tries():
    env = _env("A", task="tomato salad")
    _, state = env.reset(KEY)
    for macro in (GET_TOMATO, GO_KNIFE_1):
        state, *_ = _run_macro(env, state, 0, macro)
    state, *_ = _run_macro(env, state, 0, GET_LETTUCE)  # back with the lettuce in hand
    state, *_ = _run_macro(env, state, 0, GO_KNIFE_1)  # knife 1 holds the unchopped tomato
    assert int(state.item_holder[1]) == 0 and bool(_chop_target(env, state, 0))
    assert not np.asarray(env.get_avail_actions(state)["agent_0"])[CHOP]
    # forced anyway (the original offers every action): three tries chop nothing, then free
    state, rewards, _ = _run_macro(env, state, 0, CHOP)
    assert len(rewards) == CHOPS_NEEDED and int(state.chops[0]) == 0


def _chop_target(env, state, agent):
    return env._chop_target(state, agent)[0]


@pytest.mark.parametrize("map_name", ["A", "B"])
def test_every_macro_action_ends_within_its_bound(map_name):
    """128 kitchens x 600 steps, half under random available actions, half under the
    scripted team with 30% random actions (a learned-like policy): no macro-action runs
    longer than
    ``max_macro_steps`` (a chop no longer than its tries), and none ever reaches it: the
    bound is a guard, walks end by arriving or being blocked."""
    aenv = envs.make_array_env(f"salad:{map_name}")
    env = aenv.env
    n = 128

    def body(carry, k):
        state, run = carry
        k_act, k_eps, k_step = jax.random.split(k, 3)
        avail = jax.vmap(aenv.avail_actions)(state)
        actions = jax.vmap(aenv.random_actions)(jax.random.split(k_act, n), avail)
        inner = state.env_state
        scripted = jax.vmap(lambda s: scripted_actions(env, s))(inner)
        explore = (
            jax.random.uniform(k_eps, (n, 1)) < jnp.where(jnp.arange(n) < n // 2, 1.0, 0.3)[:, None]
        )
        actions = jnp.where(explore, actions, scripted)
        r = jax.vmap(aenv.step)(jax.random.split(k_step, n), state, actions)
        # steps of the macro-action each cook runs this step (1 for one that starts now)
        macro = jnp.where(inner.busy, inner.macro, actions)
        run = jnp.where(inner.busy, run + 1, 1)
        return (r.state, run), (run, macro, r.info["won"])

    @jax.jit
    def roll(key):
        _, state = jax.vmap(aenv.reset)(jax.random.split(key, n))
        init = (state, jnp.zeros((n, 2), jnp.int32))
        return jax.lax.scan(body, init, jax.random.split(key, 600))[1]

    run, macro, won = (np.asarray(x) for x in roll(KEY))
    assert run.max() < env.max_macro_steps
    assert run[macro == CHOP].max() <= CHOPS_NEEDED
    assert (run > 1).mean() > 0.3  # walks of several steps did happen
    assert won[:, n // 2 :].sum() > won[:, : n // 2].sum() > 0  # dishes were delivered


def test_chop_reward_only_for_the_tasks_food():
    for task, bonus in (("tomato salad", REWARD_CHOP), ("lettuce salad", 0.0)):
        env = _env("A", task=task)
        _, state = env.reset(KEY)
        state, *_ = _run_macro(env, state, 0, GET_TOMATO)
        state, *_ = _run_macro(env, state, 0, GO_KNIFE_1)
        state, rewards, _ = _run_macro(env, state, 0, CHOP)
        assert len(rewards) == 3 and int(state.chops[0]) == 3
        np.testing.assert_allclose(rewards, [REWARD_STEP] * 2 + [REWARD_STEP + bonus], atol=1e-6)


def test_wrong_delivery_penalty_and_the_item_goes_back():
    env = _env("A", task="tomato salad")
    _, state = env.reset(KEY)
    state, *_ = _run_macro(env, state, 0, GET_TOMATO)
    state, rewards, done = _run_macro(env, state, 0, DELIVER)
    assert not done
    assert rewards[-1] == pytest.approx(REWARD_STEP + REWARD_WRONG_DELIVERY)
    assert int(state.wrong_deliveries) == 1 and int(state.item_holder[0]) == -1
    assert int(state.item_cell[0]) == env.kitchen.item_start[0]
    # an empty plate is a wrong dish too
    state, *_ = _run_macro(env, state, 0, GET_PLATE)
    state, rewards, done = _run_macro(env, state, 0, DELIVER)
    assert not done and rewards[-1] == pytest.approx(REWARD_STEP + REWARD_WRONG_DELIVERY)
    assert int(state.item_cell[3]) == env.kitchen.item_start[3]


def test_right_dish_pays_and_ends_the_episode():
    env = _env("A", task="tomato salad")
    _, state = env.reset(KEY)
    for macro in (GET_TOMATO, GO_KNIFE_1, CHOP, GET_PLATE, GET_TOMATO):
        state, *_ = _run_macro(env, state, 0, macro)
    assert bool(state.in_plate[0])
    state, rewards, done = _run_macro(env, state, 0, DELIVER)
    assert done and bool(env.won(state))
    assert rewards[-1] == pytest.approx(REWARD_STEP + REWARD_DISH)
    stats = episode_stats(state)
    assert int(stats["steps"]) == 37 and bool(stats["success"])
    assert int(stats["collisions"]) == 0 and int(stats["wrong_deliveries"]) == 0


def test_get_plate_with_chopped_food_fills_the_plate_then_picks_it_up():
    env = _env("A", task="tomato salad")
    _, state = env.reset(KEY)
    for macro in (GET_TOMATO, GO_KNIFE_1, CHOP, GET_TOMATO):
        state, *_ = _run_macro(env, state, 0, macro)
    assert int(state.item_holder[0]) == 0 and int(state.chops[0]) == 3
    state, *_ = _run_macro(env, state, 0, GET_PLATE)
    assert bool(state.in_plate[0]) and int(state.item_holder[3]) == 0


def test_masks():
    env = _env("A", task="tomato salad")
    _, state = env.reset(KEY)
    avail = {a: np.asarray(m) for a, m in env.get_avail_actions(state).items()}
    # free and empty-handed: no deliver, no chop (no knife with food next to the agent)
    for m in avail.values():
        assert m.shape == (env.num_actions,) and m[WAIT] and not m[DELIVER] and not m[CHOP]
        assert m[GET_TOMATO] and m[GET_PLATE] and m[GO_KNIFE_1]
    state, *_ = _step(env, state, GET_TOMATO, WAIT)
    busy = np.asarray(env.get_avail_actions(state)["agent_0"])
    np.testing.assert_array_equal(busy, np.arange(env.num_actions) == GET_TOMATO)
    state, *_ = _run_macro(env, state, 0, GET_TOMATO)
    held = np.asarray(env.get_avail_actions(state)["agent_0"])
    assert held[DELIVER] and not held[GET_TOMATO]  # nobody can get a held tomato
    assert not np.asarray(env.get_avail_actions(state)["agent_1"])[GET_TOMATO]
    state, *_ = _run_macro(env, state, 0, GO_KNIFE_1)
    assert np.asarray(env.get_avail_actions(state)["agent_0"])[CHOP]
    assert env.num_actions == len(action_phrases(env)) == 9
    assert _env("B").num_actions == len(action_phrases(_env("B"))) == 10


def test_masks_never_empty_in_random_play():
    aenv = envs.make_array_env("salad:B", max_steps=30)

    def body(carry, k):
        state, avail = carry
        k_act, k_step = jax.random.split(k)
        r = aenv.step(k_step, state, aenv.random_actions(k_act, avail))
        return (r.state, r.avail_actions), r.avail_actions

    @jax.jit
    def roll(key):
        _, state = aenv.reset(key)
        return jax.lax.scan(body, (state, aenv.avail_actions(state)), jax.random.split(key, 60))[1]

    avail = np.asarray(jax.vmap(roll)(jax.random.split(KEY, 16)))
    assert avail.any(-1).all()


def test_partial_observation_and_world_state():
    env = _env("A", task="onion salad")
    obs, state = env.reset(KEY)
    world = np.asarray(env.world_state(state))
    assert obs["agent_0"].shape == (OBS_DIM,) and world.shape == (OBS_DIM,)
    tomato = slice(0, 3)
    # the tomato (0,5) is 3 columns from agent 0 (1,2): hidden; agent 1 (1,4) sees it
    np.testing.assert_array_equal(obs["agent_0"][tomato], 0.0)
    np.testing.assert_allclose(obs["agent_1"][tomato], [0.0, 5 / 7, 0.0])
    np.testing.assert_allclose(world[tomato], [0.0, 5 / 7, 0.0])
    # each agent sees itself first, then its teammate; the task is one-hot at the end
    np.testing.assert_allclose(obs["agent_1"][17:21], [1 / 7, 4 / 7, 1 / 7, 2 / 7])
    np.testing.assert_array_equal(world[-len(TASKS) :], np.eye(len(TASKS))[2])


def test_text_observations_mention_task_holding_and_actions():
    env = _env("A", task="lettuce-tomato salad")
    _, state = env.reset(KEY)
    state, *_ = _run_macro(env, state, 0, GET_TOMATO)
    batch = jax.tree.map(lambda x: jnp.stack([x, x]), state)
    texts = text_observations(env, batch)
    assert len(texts) == 2 and all(len(row) == 2 for row in texts)
    me, mate = texts[0]
    assert "lettuce-tomato salad" in me and "You hold raw tomato." in me
    assert "serve the dish" in me and "pick up the tomato" not in me
    assert "Your teammate holds raw tomato." in mate and "You hold nothing." in mate
    assert texts[0] == texts[1] == text_observations(env, state)[0]
    assert all(len(t) < 400 for row in texts for t in row)  # about 100 tokens at most
    # a busy agent's text names only its running macro-action
    state, *_ = _step(env, state, GO_KNIFE_1, WAIT)
    assert "You are busy; go on: go to knife 1." in text_observations(env, state)[0][0]
    g = global_description(env, batch)
    np.testing.assert_array_equal(g["holding"], [[0, -1], [0, -1]])
    np.testing.assert_array_equal(g["item_pos"][0, 0], g["agent_pos"][0, 0])
    np.testing.assert_array_equal(g["task_foods"][0], [True, True, False])


def test_text_length_stays_short_over_scripted_episodes():
    env = _env("B", task="lettuce-onion-tomato salad")
    _, state = env.reset(KEY)
    policy = jax.jit(lambda s: scripted_actions(env, s))
    step = _jit_step(env)
    states = []
    for _ in range(51):
        states.append(state)
        _, state, *_ = step(KEY, state, dict(zip(env.agents, policy(state), strict=True)))
    batch = jax.tree.map(lambda *xs: jnp.stack(xs), *states)
    texts = [t for row in text_observations(env, batch) for t in row]
    assert max(len(t) for t in texts) < 400
    assert any("on the middle counter" in t for t in texts)


def test_task_sampling_and_bad_input():
    env = SaladKitchen("A", tasks=("tomato salad", "onion salad"))
    tasks = {int(env.reset(jax.random.PRNGKey(i))[1].task) for i in range(20)}
    assert tasks == {0, 2}
    with pytest.raises(ValueError, match="unknown salad task"):
        SaladKitchen("A", task="pizza")
    with pytest.raises(ValueError, match="unknown salad map 'C'"):
        SaladKitchen("C")
    with pytest.raises(ValueError, match="max_steps"):
        SaladKitchen("A", max_steps=0)


def test_registry_stats_through_array_env():
    aenv = envs.make_array_env("salad:A", task="tomato salad")
    _, state = aenv.reset(KEY)
    final = run_scripted(aenv.env, state.env_state)
    stats = aenv.episode_stats(final)
    assert set(stats) == {"steps", "success", "collisions", "wrong_deliveries"}
    assert float(stats["steps"]) == 37 and float(stats["success"]) == 1.0
    assert bool(aenv.won(final))
    scripted = envs.require(aenv, envs.capabilities.ScriptedPolicy, needed_by="the test")
    np.testing.assert_array_equal(scripted.greedy_actions(state.env_state), [GET_TOMATO, WAIT])

"""TWOSOME's macro-action Overcooked salad kitchen for two cooks, in pure JAX.

A jaxmarl ``MultiAgentEnv`` after gym-macro-overcooked's ``Overcooked_MA_V1`` as the
Verco paper uses it: two agents in a 7x7 kitchen (``maps.py``) make the episode's salad
(one of ``TASKS``, drawn at reset from ``tasks`` or fixed by ``task``). Food must sit on a
knife and be chopped 3 times; chopped food goes on the plate; the plate with exactly the
task's food goes to the delivery counter. The episode ends at a correct delivery or after
``max_steps`` (200) steps.

One env step is one primitive move of every agent. A macro-action (``MACRO_ACTIONS``; map B
adds "go to counter") runs over several steps: the agent walks a shortest path to its
target's neighbouring floor cell, then acts on the target (pick up, put down, combine,
deliver, chop). While a macro-action runs the agent's only available action is that
macro-action (``get_avail_actions``); an agent is free again after the step that
finishes it. A free agent's mask (ours: the original allows everything) drops only
actions that cannot do anything: getting an item someone holds or a food in the plate,
delivering or using the wall counter empty-handed, chopping while holding something or
away from a knife with unchopped food; "wait" is always available. Semantics follow the original:

* get tomato / lettuce / onion: walk to the food wherever it lies and act on it: pick it
  up when empty-handed, scoop it into a held plate when it is chopped; when the food is
  unchopped on a knife the agent stops next to the knife instead (ready to chop). Done at
  once when the food is in a plate or held by an agent.
* get plate: pick up the plate (with its contents); holding chopped food, first put it in
  the plate (one step), then pick the plate up (the next step), as the original does;
  holding unchopped food, stop next to the plate. A plate on a knife is picked up with the
  held chopped food put in it, in one step.
* go to knife 1 / 2: walk there; holding something, put it on the empty knife, or scoop
  the knife's chopped food into the held plate, or pick up the knife's plate with the held
  chopped food in it.
* deliver: hand the held item over; the right dish (+1) ends the episode; anything else
  (-0.1) goes back, unchopped, to where it started.
* chop: chop the unchopped food on a neighbouring knife, one chop a step; the
  macro-action ends after ``CHOPS_NEEDED`` (3) tries, as the original counts them, or at
  once when no neighbouring knife holds unchopped food; +0.2 when a food of the task
  becomes chopped. Only an empty-handed cook chops (a held item blocks the knife), so the
  mask offers chop only to an empty-handed cook next to such a knife.
* go to counter (map B): walk to the first empty counter of the dividing wall (rows 3, 2,
  4, 1, 5) and put the held item on it.
* wait: stay one step.

Moves resolve in agent order as in the original (two agents may swap cells; an agent may
step into a cell its teammate leaves in the same step; of two agents stepping into the
same cell the lower index gets it). A **collision** is a step in which an agent's move is
blocked by its teammate: it costs -0.01 once per step and ends the blocked agent's
macro-action ("the way is blocked"). Every step costs -0.001. The reward is the team's,
the same for both agents.

Navigation follows a shortest path to a floor cell next to the target. As the original's
A*, which treats the other agent as passable and prefers, among equally long paths, one
that avoids it, a cook walks through a teammate that moves this step (it may leave the
cell or swap); a teammate that stands still is walked around when some path avoids it
(``maps.Kitchen.distance``, precomputed BFS fields). Two cooks walking toward each other
both walk through, so they swap or one is blocked; they never both step aside and mirror
each other. Every macro-action ends within ``max_macro_steps`` steps (twice the kitchen's
longest shortest path plus 2; under random play no macro-action reaches it,
``tests/envs/test_salad.py``): a walk that has not arrived by then counts as blocked.

Where this differs from the original, and why:

* The original never ends a blocked walk (its collision list stays empty), so two cooks
  in each other's way can stand forever; its two hard-coded escapes near the knives
  (step right when the teammate stands on knife 2's access cell) are not reproduced,
  since ending the blocked walk frees both cooks.
* The original's chop does not check that the cook is empty-handed (three tries chop
  nothing) and carries its try count over to the next chop when the food finishes
  early; here the count restarts with every chop, and the mask drops chop for a cook
  that holds something.
* Navigation reads the items' true positions (the original walks to where the agent last
  saw an item).
* Map A has one plate, as in TWOSOME's textual kitchen (``Overcooked_LLMA_V3``, "delete
  one plate"), which Verco extends to two agents; the original two-agent map
  (``Overcooked_MA_V1``) has a second plate at (5, 6). So there is one "get plate".
* The original's primitive moves (right, down, left, up) are left out, as in TWOSOME's
  text version, and so is its per-step observation refresh of a busy agent: the
  original refreshes an agent's policy observation only when its macro-action ends.
  Here observations refresh every step; a busy agent's only available action is its
  running macro-action, so the policy reads only the observations of decision steps,
  which are the same under both rules.

Observation (the original's vector, masked to the 5x5 window around the agent, zeros
outside): per food ``(row/7, col/7, chops/3)``, the plate, the two knives, the delivery
counter, the agent, then its teammate as ``(row/7, col/7)``, then the one-hot task: 28
numbers. ``world_state`` is the same vector unmasked with the agents in fixed order.
"""

from __future__ import annotations

import chex
import jax
import jax.numpy as jnp
import numpy as np
from flax import struct
from jaxmarl.environments.multi_agent_env import MultiAgentEnv
from jaxmarl.environments.spaces import Box, Discrete

from envs import fast_random
from envs.salad import maps
from envs.salad.maps import DELIVERY, KNIFE, NUM_CELLS, PLATE, SIZE, UNREACHABLE

TASKS = (
    "tomato salad",
    "lettuce salad",
    "onion salad",
    "lettuce-tomato salad",
    "onion-tomato salad",
    "lettuce-onion salad",
    "lettuce-onion-tomato salad",
)
# which of tomato, lettuce, onion each task's dish holds
TASK_FOODS = np.array(
    [[f in t.removesuffix(" salad").split("-") for f in maps.FOOD_NAMES] for t in TASKS], bool
)

WAIT, GET_TOMATO, GET_LETTUCE, GET_ONION, GET_PLATE = 0, 1, 2, 3, 4
GO_KNIFE_1, GO_KNIFE_2, DELIVER, CHOP, GO_COUNTER = 5, 6, 7, 8, 9
MACRO_ACTIONS = (
    "wait",
    "get tomato",
    "get lettuce",
    "get onion",
    "get plate",
    "go to knife 1",
    "go to knife 2",
    "deliver",
    "chop",
    "go to counter",
)

CHOPS_NEEDED = 3
OBS_RADIUS = 2
OBS_DIM = 3 * 3 + 2 * 4 + 2 * 2 + len(TASKS)

REWARD_CHOP = 0.2
REWARD_DISH = 1.0
REWARD_WRONG_DELIVERY = -0.1
REWARD_COLLISION = -0.01
REWARD_STEP = -0.001

NOBODY = -1


@struct.dataclass
class SaladState:
    agent_pos: chex.Array  # [2, 2] int32 (row, col)
    item_cell: chex.Array  # [4] int32 cell an item rests on (when not held, not in plate)
    item_holder: chex.Array  # [4] int32 agent holding the item, NOBODY if none
    in_plate: chex.Array  # [3] bool food in the plate
    chops: chex.Array  # [3] int32
    macro: chex.Array  # [2] int32 the running (or last) macro-action
    busy: chex.Array  # [2] bool a macro-action is running
    macro_steps: chex.Array  # [2] int32 steps the running macro-action has taken
    task: chex.Array  # [] int32 index into TASKS
    step: chex.Array  # [] int32
    delivered: chex.Array  # [] bool the right dish was delivered
    collisions: chex.Array  # [] int32
    wrong_deliveries: chex.Array  # [] int32


def _cell(pos):
    return pos[..., 0] * SIZE + pos[..., 1]


def _pos(cell):
    return jnp.stack([cell // SIZE, cell % SIZE], -1)


class SaladKitchen(MultiAgentEnv):
    """Two cooks, one salad: ``SaladKitchen("A" | "B", tasks=..., task=..., max_steps=200)``.

    Args:
        map_name: "A" (one room) or "B" (a counter wall between the agents).
        tasks: the task names a reset draws from, uniformly (default: all of ``TASKS``).
        task: one task name for every episode (overrides ``tasks``).
        max_steps: episode limit in primitive steps.
    """

    def __init__(
        self,
        map_name: str = "A",
        tasks: tuple[str, ...] | list[str] | None = None,
        task: str | None = None,
        max_steps: int = 200,
    ):
        super().__init__(num_agents=2)
        self.kitchen = k = maps.kitchen(map_name)
        self.map_name = map_name
        chosen = (task,) if task is not None else tuple(tasks) if tasks is not None else TASKS
        unknown = [t for t in chosen if t not in TASKS]
        if unknown or not chosen:
            raise ValueError(
                f"unknown salad task(s) {unknown or chosen!r}; known tasks: {', '.join(TASKS)}"
            )
        if max_steps < 1:
            raise ValueError(f"max_steps must be >= 1, got {max_steps}")
        self.task_ids = np.array([TASKS.index(t) for t in chosen], np.int32)
        self.max_steps = int(max_steps)
        longest = k.distance[:, NUM_CELLS, :][k.distance[:, NUM_CELLS, :] < UNREACHABLE].max()
        # a walk that has not arrived after twice the kitchen's longest shortest path (plus
        # the act and a plate's second step) counts as blocked and ends
        self.max_macro_steps = int(2 * longest + 2)
        self.num_actions = len(MACRO_ACTIONS) if map_name == "B" else len(MACRO_ACTIONS) - 1
        self.agents = ["agent_0", "agent_1"]
        self.observation_spaces = {a: Box(0.0, 1.0, (OBS_DIM,)) for a in self.agents}
        self.action_spaces = {a: Discrete(self.num_actions) for a in self.agents}
        k = self.kitchen
        self._tiles = jnp.asarray(k.tiles)
        self._distance = jnp.asarray(k.distance)
        self._knives = jnp.asarray(k.knives)
        self._item_start = jnp.asarray(k.item_start)
        self._walls = jnp.asarray(
            k.wall_counters if len(k.wall_counters) else np.zeros(1, np.int32)
        )
        self._task_foods = jnp.asarray(TASK_FOODS)
        self._fixed = np.concatenate(
            [np.stack(np.divmod(k.knives, SIZE), -1).reshape(-1), np.divmod(k.delivery, SIZE)]
        ).astype(np.float32)  # knife 1, knife 2, delivery (row, col)

    # ----- reset --------------------------------------------------------------------
    def reset(self, key: chex.PRNGKey):
        if len(self.task_ids) == 1:
            task = jnp.int32(self.task_ids[0])
        else:
            u = fast_random.uniform(key, 1)[0]
            n = len(self.task_ids)
            task = jnp.asarray(self.task_ids)[jnp.minimum((u * n).astype(jnp.int32), n - 1)]
        k = self.kitchen
        state = SaladState(
            agent_pos=jnp.asarray(k.agent_start),
            item_cell=jnp.asarray(k.item_start),
            item_holder=jnp.full((4,), NOBODY, jnp.int32),
            in_plate=jnp.zeros((3,), bool),
            chops=jnp.zeros((3,), jnp.int32),
            macro=jnp.zeros((2,), jnp.int32),
            busy=jnp.zeros((2,), bool),
            macro_steps=jnp.zeros((2,), jnp.int32),
            task=task,
            step=jnp.int32(0),
            delivered=jnp.bool_(False),
            collisions=jnp.int32(0),
            wrong_deliveries=jnp.int32(0),
        )
        return self.get_obs(state), state

    # ----- where things are -------------------------------------------------------------
    def item_positions(self, state: SaladState) -> jax.Array:
        """[4, 2] (row, col) of tomato, lettuce, onion, plate: a held item is where its
        holder stands, a food in the plate where the plate is."""
        held_pos = state.agent_pos[jnp.maximum(state.item_holder, 0)]
        pos = jnp.where((state.item_holder >= 0)[:, None], held_pos, _pos(state.item_cell))
        return pos.at[:3].set(jnp.where(state.in_plate[:, None], pos[PLATE], pos[:3]))

    def _loose(self, state: SaladState) -> jax.Array:
        """[4] items lying on a tile by themselves (not held, not in the plate)."""
        return (state.item_holder == NOBODY) & jnp.append(~state.in_plate, True)

    def _top_item(self, state: SaladState, cell) -> tuple[jax.Array, jax.Array]:
        here = self._loose(state) & (state.item_cell == cell)
        return here.any(), jnp.argmax(here)

    def _held_item(self, state: SaladState, agent) -> tuple[jax.Array, jax.Array]:
        mine = state.item_holder == agent
        return mine.any(), jnp.argmax(mine)

    def first_empty_wall_counter(self, state: SaladState) -> tuple[jax.Array, jax.Array]:
        """(exists, cell) of the first empty counter of map B's wall, in preference order."""
        taken = (
            self._loose(state)[None, :] & (state.item_cell[None, :] == self._walls[:, None])
        ).any(1)
        free = ~taken & (self.map_name == "B")
        return free.any(), self._walls[jnp.argmax(free)]

    def _neighbours(self, pos) -> tuple[jax.Array, jax.Array]:
        """[4] cells right, left, down, up of ``pos`` (clipped) and whether each is on the grid."""
        nbrs = pos[None, :] + jnp.asarray(maps.DIRECTIONS)
        return _cell(jnp.clip(nbrs, 0, SIZE - 1)), ((nbrs >= 0) & (nbrs < SIZE)).all(1)

    def _chop_target(self, state: SaladState, agent: int):
        """(can chop, knife cell, food) of the first neighbouring knife with unchopped food."""
        nbr_cells, on_grid = self._neighbours(state.agent_pos[agent])
        loose = self._loose(state)
        food_here = loose[None, :3] & (state.item_cell[None, :3] == nbr_cells[:, None])  # [4, 3]
        unchopped_here = (food_here & (state.chops[None, :] < CHOPS_NEEDED)).any(1)
        choppable = on_grid & (self._tiles[nbr_cells] == KNIFE) & unchopped_here
        first = jnp.argmax(choppable)
        return choppable.any(), nbr_cells[first], jnp.argmax(food_here[first])

    # ----- one agent's primitive intent -------------------------------------------------
    def _navigation(self, state: SaladState, agent: int, macro):
        """(target cell, navigates?, item unreachable?) of one agent's macro-action: the
        cell it walks next to, and whether the macro-action walks at all."""
        my_cell = _cell(state.agent_pos[agent])
        is_get_food = (macro >= GET_TOMATO) & (macro <= GET_ONION)
        food = jnp.clip(macro - GET_TOMATO, 0, 2)
        wall_free, wall_cell = self.first_empty_wall_counter(state)
        item = jnp.where(macro == GET_PLATE, PLATE, food)
        item_pos = self.item_positions(state)[item]
        item_unreachable = (state.item_holder[item] != NOBODY) | (
            is_get_food & state.in_plate[food]
        )
        target = jnp.select(
            [
                is_get_food | (macro == GET_PLATE),
                macro == GO_KNIFE_1,
                macro == GO_KNIFE_2,
                macro == DELIVER,
                macro == GO_COUNTER,
            ],
            [_cell(item_pos), self._knives[0], self._knives[1], self.kitchen.delivery, wall_cell],
            my_cell,
        )
        navigates = (
            is_get_food
            | (macro == GET_PLATE)
            | (macro == GO_KNIFE_1)
            | (macro == GO_KNIFE_2)
            | (macro == DELIVER)
            | ((macro == GO_COUNTER) & wall_free)
        ) & ~((is_get_food | (macro == GET_PLATE)) & item_unreachable)
        return target, navigates

    def _wants_move(self, state: SaladState, agent: int, target, navigates) -> jax.Array:
        """Whether the agent's macro-action (its ``_navigation``) steps to another cell this
        step, before any blocking: it walks, its target is reachable and it has not arrived."""
        here = self._distance[target, NUM_CELLS, _cell(state.agent_pos[agent])]
        return navigates & (here < UNREACHABLE) & (here > 0)

    def _intent(self, state: SaladState, agent: int, macro, navigation, teammate_moves):
        """(target cell, move?, act?, done) of one agent's running macro-action this step.

        ``move``: step to the target cell (a floor cell); ``act``: act on the target cell
        (a neighbouring non-floor cell); neither: stay. ``teammate_moves``: whether the
        teammate steps this step (``_wants_move``), which decides the route;
        ``navigation``: ``_navigation`` of this agent's macro-action."""
        me = state.agent_pos[agent]
        my_cell = _cell(me)
        other_cell = _cell(state.agent_pos[1 - agent])
        holding, held = self._held_item(state, agent)
        held_is_food = holding & (held < PLATE)
        held_chopped = held_is_food & (state.chops[jnp.minimum(held, 2)] >= CHOPS_NEEDED)
        is_get_food = (macro >= GET_TOMATO) & (macro <= GET_ONION)
        target, navigates = navigation

        nbr_cells, on_grid = self._neighbours(me)
        can_chop, chop_cell, chop_food = self._chop_target(state, agent)

        # navigation: a shortest path; around a teammate that stands still where a path
        # avoids it, through a teammate that moves (it may leave the cell or swap)
        d_avoid = self._distance[target, other_cell]
        d_any = self._distance[target, NUM_CELLS]
        around = ~teammate_moves & (d_avoid[my_cell] < UNREACHABLE)
        dist = jnp.where(around, d_avoid, d_any)
        here = dist[my_cell]
        step_ok = on_grid & (dist[nbr_cells] == here - 1)
        next_cell = nbr_cells[jnp.argmax(step_ok)]
        arrived = here == 0
        reachable = here < UNREACHABLE

        # what happens on arrival, per the original's special cases
        target_has, target_item = self._top_item(state, target)
        target_is_knife = self._tiles[target] == KNIFE
        unchopped_food_on_knife = (
            is_get_food
            & target_is_knife
            & target_has
            & (target_item < PLATE)
            & (state.chops[jnp.minimum(target_item, 2)] < CHOPS_NEEDED)
        )
        plate_with_unchopped = (macro == GET_PLATE) & held_is_food & ~held_chopped
        knife_empty_handed = ((macro == GO_KNIFE_1) | (macro == GO_KNIFE_2)) & ~holding
        stop_short = unchopped_food_on_knife | plate_with_unchopped | knife_empty_handed
        # get plate with chopped food on a counter plate: put it in now, pick the plate up next
        plate_two_steps = (macro == GET_PLATE) & held_chopped & ~target_is_knife

        is_chop = macro == CHOP
        move = navigates & reachable & ~arrived & ~is_chop
        act = (navigates & reachable & arrived & ~stop_short & ~is_chop) | (is_chop & can_chop)
        target = jnp.where(is_chop, chop_cell, jnp.where(move, next_cell, target))
        # a chop takes CHOPS_NEEDED tries, as the original counts them, or ends at once when
        # there is nothing to chop
        tries = state.macro_steps[agent] + 1
        chop_finishes = is_chop & can_chop & (state.chops[chop_food] + 1 >= CHOPS_NEEDED)
        done = jnp.where(
            is_chop,
            ~can_chop | chop_finishes | (tries >= CHOPS_NEEDED),
            ~move & ~(act & plate_two_steps),
        )
        done = done | (tries >= self.max_macro_steps)
        return target, move, act, done

    # ----- acting on a cell -------------------------------------------------------------
    def _act(self, state: SaladState, agent: int, cell, enabled):
        """Apply one agent's action on a neighbouring non-floor ``cell``; returns the new
        state and the reward it earned."""
        holding, held = self._held_item(state, agent)
        has_top, top = self._top_item(state, cell)
        tile = self._tiles[cell]
        chopped = state.chops >= CHOPS_NEEDED
        needed = self._task_foods[state.task]
        top_food = has_top & (top < PLATE)
        top_f = jnp.minimum(top, 2)
        held_f = jnp.minimum(held, 2)
        held_food = holding & (held < PLATE)
        on_surface = (tile != DELIVERY) & (tile != maps.FLOOR)

        # empty-handed
        chop = enabled & ~holding & top_food & (tile == KNIFE) & ~chopped[top_f]
        pick = enabled & ~holding & has_top & on_surface & ~chop
        # holding
        put_down = enabled & holding & ~has_top & on_surface
        into_counter_plate = (
            enabled & held_food & chopped[held_f] & has_top & (top == PLATE) & (tile != KNIFE)
        )
        take_knife_plate = (
            enabled & held_food & chopped[held_f] & has_top & (top == PLATE) & (tile == KNIFE)
        )
        scoop = enabled & holding & (held == PLATE) & top_food & chopped[top_f]
        deliver = enabled & holding & (tile == DELIVERY)
        dish = jnp.where(held == PLATE, state.in_plate, jnp.zeros(3, bool))
        right_dish = deliver & (held == PLATE) & (dish == needed).all() & dish.any()
        wrong = deliver & ~right_dish

        chops = state.chops.at[top_f].add(chop.astype(jnp.int32))
        newly_chopped = chop & (chops[top_f] == CHOPS_NEEDED)
        reward = (
            jnp.where(newly_chopped & needed[top_f], REWARD_CHOP, 0.0)
            + jnp.where(right_dish, REWARD_DISH, 0.0)
            + jnp.where(wrong, REWARD_WRONG_DELIVERY, 0.0)
        )

        holder = state.item_holder
        item_cell = state.item_cell
        in_plate = state.in_plate
        holder = jnp.where(pick, holder.at[top].set(agent), holder)
        holder = jnp.where(put_down | into_counter_plate, holder.at[held].set(NOBODY), holder)
        item_cell = jnp.where(put_down, item_cell.at[held].set(cell), item_cell)
        in_plate = jnp.where(
            into_counter_plate | take_knife_plate, in_plate.at[held_f].set(True), in_plate
        )
        holder = jnp.where(
            take_knife_plate, holder.at[held].set(NOBODY).at[PLATE].set(agent), holder
        )
        in_plate = jnp.where(scoop, in_plate.at[top_f].set(True), in_plate)
        # the right dish stays on the delivery counter; anything else goes back, unchopped
        holder = jnp.where(right_dish, holder.at[PLATE].set(NOBODY), holder)
        item_cell = jnp.where(right_dish, item_cell.at[PLATE].set(cell), item_cell)
        returned = wrong & (
            (jnp.arange(4) == held) | ((held == PLATE) & jnp.append(in_plate, False))
        )
        holder = jnp.where(returned, NOBODY, holder)
        item_cell = jnp.where(returned, self._item_start, item_cell)
        chops = jnp.where(returned[:3], 0, chops)
        in_plate = jnp.where(returned[:3] | (wrong & (held == PLATE)), False, in_plate)
        state = state.replace(
            item_holder=holder,
            item_cell=item_cell,
            in_plate=in_plate,
            chops=chops,
            delivered=state.delivered | right_dish,
            wrong_deliveries=state.wrong_deliveries + wrong.astype(jnp.int32),
        )
        return state, reward

    # ----- step ---------------------------------------------------------------------------
    def step_env(self, key: chex.PRNGKey, state: SaladState, actions: dict):
        chosen = jnp.stack([jnp.asarray(actions[a], jnp.int32) for a in self.agents])
        macro = jnp.where(state.busy, state.macro, jnp.clip(chosen, 0, self.num_actions - 1))
        navs = [self._navigation(state, i, macro[i]) for i in range(2)]
        wants = [self._wants_move(state, i, *navs[i]) for i in range(2)]
        intents = [self._intent(state, i, macro[i], navs[i], wants[1 - i]) for i in range(2)]
        (t0, m0, a0, d0), (t1, m1, a1, d1) = intents
        p0, p1 = _cell(state.agent_pos[0]), _cell(state.agent_pos[1])
        # agent 0 first, unless it walks into agent 1's cell: then agent 1 goes first and
        # agent 0 follows if agent 1 left (a swap included)
        zero_waits = m0 & (t0 == p1)
        one_moves = m1 & jnp.where(zero_waits, True, t1 != jnp.where(m0, t0, p0))
        zero_moves = jnp.where(zero_waits, one_moves, m0)
        blocked = (m0 & ~zero_moves) | (m1 & ~one_moves)
        new_cells = jnp.stack([jnp.where(zero_moves, t0, p0), jnp.where(one_moves, t1, p1)])
        done = jnp.stack([d0 | (m0 & ~zero_moves), d1 | (m1 & ~one_moves)])

        state = state.replace(agent_pos=_pos(new_cells).astype(jnp.int32))
        state, r0 = self._act(state, 0, t0, a0)
        state, r1 = self._act(state, 1, t1, a1)
        reward = (REWARD_STEP + r0 + r1 + jnp.where(blocked, REWARD_COLLISION, 0.0)).astype(
            jnp.float32
        )
        state = state.replace(
            macro=macro,
            busy=~done,
            macro_steps=jnp.where(done, 0, state.macro_steps + 1),
            step=state.step + 1,
            collisions=state.collisions + blocked.astype(jnp.int32),
        )
        over = state.delivered | (state.step >= self.max_steps)
        dones = {a: over for a in self.agents}
        dones["__all__"] = over
        rewards = {a: reward for a in self.agents}
        return self.get_obs(state), state, rewards, dones, {}

    # ----- observations ---------------------------------------------------------------------
    def _vector(self, state: SaladState, agent_order, viewer=None) -> jax.Array:
        pos = self.item_positions(state).astype(jnp.float32)
        agents = state.agent_pos[jnp.asarray(agent_order)].astype(jnp.float32)
        fixed = jnp.asarray(self._fixed).reshape(3, 2)
        all_pos = jnp.concatenate([pos, fixed, agents])  # [9, 2]
        if viewer is None:
            seen = jnp.ones((9,), bool)
        else:
            seen = (jnp.abs(all_pos - state.agent_pos[viewer]) <= OBS_RADIUS).all(1)
        xy = jnp.where(seen[:, None], all_pos / SIZE, 0.0)
        chops = jnp.where(seen[:3], state.chops / CHOPS_NEEDED, 0.0)
        foods = jnp.concatenate([xy[:3], chops[:, None]], 1).reshape(-1)
        task = jax.nn.one_hot(state.task, len(TASKS))
        return jnp.concatenate([foods, xy[3:].reshape(-1), task]).astype(jnp.float32)

    def get_obs(self, state: SaladState) -> dict:
        return {
            "agent_0": self._vector(state, (0, 1), viewer=0),
            "agent_1": self._vector(state, (1, 0), viewer=1),
        }

    def world_state(self, state: SaladState) -> jax.Array:
        """The unmasked observation vector, agents in fixed order: [OBS_DIM]."""
        return self._vector(state, (0, 1))

    def get_avail_actions(self, state: SaladState) -> dict:
        """A busy agent may only go on with its running macro-action. A free agent may
        always wait and walk to a knife; it may get a food or the plate that nobody holds
        (and, for food, that is not in the plate), deliver or use the wall counter only
        while holding something (the counter only while one of it is empty), and chop only
        next to a knife with unchopped food."""
        ids = jnp.arange(self.num_actions)
        free_items = (state.item_holder == NOBODY) & jnp.append(~state.in_plate, True)
        wall_free, _ = self.first_empty_wall_counter(state)
        out = {}
        for i, a in enumerate(self.agents):
            holding, _ = self._held_item(state, i)
            chop_act, *_ = self._chop_target(state, i)
            allowed = jnp.array(
                [True, *free_items, True, True, holding, chop_act & ~holding, holding & wall_free]
            )[: self.num_actions]
            out[a] = jnp.where(state.busy[i], ids == state.macro[i], allowed)
        return out

    def won(self, state: SaladState) -> jax.Array:
        return state.delivered


def episode_stats(state: SaladState) -> dict:
    """Statistics of a terminal state: steps taken, success, collisions, wrong deliveries."""
    return {
        "steps": state.step,
        "success": state.delivered,
        "collisions": state.collisions,
        "wrong_deliveries": state.wrong_deliveries,
    }

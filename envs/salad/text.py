"""Host-side text for the salad kitchen, in the style of TWOSOME's ``obs2text``.

Everything here reads a batch of ``SaladState`` as numpy (outside jit):

* ``action_phrases(env)``: the macro-actions as short phrases ("pick up the tomato").
* ``text_observations(env, states)``: per env and agent, what the agent sees in its 5x5
  window, what it and its teammate hold, the task and the phrases of its available
  actions (a busy agent's only action is to go on with its running one).
* ``global_description(env, states)``: the symbolic full state a scripted teacher reads.
* ``SaladText(env)``: the first two as the salad entries' ``TextObservations``.
"""

from __future__ import annotations

import functools

import jax
import numpy as np

from envs.salad import maps
from envs.salad.env import CHOPS_NEEDED, NOBODY, OBS_RADIUS, TASK_FOODS, TASKS, SaladKitchen
from envs.salad.maps import PLATE, SIZE

PHRASES = (
    "wait",
    "pick up the tomato",
    "pick up the lettuce",
    "pick up the onion",
    "pick up the plate",
    "go to knife 1",
    "go to knife 2",
    "serve the dish",
    "chop the food",
    "put it on the middle counter",
)


def action_phrases(env: SaladKitchen) -> list[str]:
    """One short phrase per macro-action of ``env``, in action order."""
    return list(PHRASES[: env.num_actions])


def _batched(states) -> dict[str, np.ndarray]:
    s = jax.tree.map(np.asarray, states)
    fields = {k: getattr(s, k) for k in s.__dataclass_fields__}
    if fields["agent_pos"].ndim == 2:
        fields = {k: v[None] for k, v in fields.items()}
    return fields


def _item_positions(f: dict) -> np.ndarray:
    """[B, 4, 2]: numpy twin of ``SaladKitchen.item_positions``."""
    holder = f["item_holder"]
    cell = f["item_cell"]
    rest = np.stack([cell // SIZE, cell % SIZE], -1)
    held = np.take_along_axis(f["agent_pos"], np.maximum(holder, 0)[..., None], 1)
    pos = np.where((holder >= 0)[..., None], held, rest)
    pos[:, :3] = np.where(f["in_plate"][..., None], pos[:, PLATE : PLATE + 1], pos[:, :3])
    return pos


def global_description(env: SaladKitchen, states) -> dict[str, np.ndarray]:
    """Symbolic full state of a batch (or one) of states, numpy with a leading batch axis:
    ``agent_pos [B,2,2]``, ``holding [B,2]`` (item index 0-3 = tomato, lettuce, onion,
    plate; -1 nothing), ``item_pos [B,4,2]``, ``item_holder [B,4]``, ``chops [B,3]``,
    ``chopped [B,3]``, ``in_plate [B,3]``, ``task [B]``, ``task_foods [B,3]``,
    ``busy [B,2]``, ``macro [B,2]``, ``step [B]``, ``knives [2,2]``, ``delivery [2]``."""
    f = _batched(states)
    holder = f["item_holder"]
    holding = np.full(holder.shape[:1] + (2,), NOBODY, np.int32)
    for agent in range(2):
        mine = holder == agent
        holding[:, agent] = np.where(mine.any(1), mine.argmax(1), NOBODY)
    k = env.kitchen
    return {
        "agent_pos": f["agent_pos"],
        "holding": holding,
        "item_pos": _item_positions(f),
        "item_holder": holder,
        "chops": f["chops"],
        "chopped": f["chops"] >= CHOPS_NEEDED,
        "in_plate": f["in_plate"],
        "task": f["task"],
        "task_foods": TASK_FOODS[f["task"]],
        "busy": f["busy"],
        "macro": f["macro"],
        "step": f["step"],
        "knives": np.stack(np.divmod(k.knives, SIZE), -1),
        "delivery": np.array(np.divmod(k.delivery, SIZE)),
    }


def _food(name: str, chops: int) -> str:
    if chops >= CHOPS_NEEDED:
        return f"chopped {name}"
    if chops > 0:
        return f"half-chopped {name}"
    return f"raw {name}"


def _join(words: list[str]) -> str:
    return words[0] if len(words) == 1 else ", ".join(words[:-1]) + " and " + words[-1]


def _plate(in_plate: np.ndarray) -> str:
    foods = [maps.FOOD_NAMES[i] for i in range(3) if in_plate[i]]
    return f"plate with chopped {_join(foods)}" if foods else "empty plate"


def _item(g: dict, b: int, item: int) -> str:
    if item == PLATE:
        return _plate(g["in_plate"][b])
    return _food(maps.FOOD_NAMES[item], int(g["chops"][b, item]))


def _place(env: SaladKitchen, pos: np.ndarray) -> str:
    """Where an item lies, as a suffix ("" for an ordinary counter)."""
    cell = int(pos[0]) * SIZE + int(pos[1])
    k = env.kitchen
    if cell in k.knives:
        return f" on knife {int(np.flatnonzero(k.knives == cell)[0]) + 1}"
    if cell == k.delivery:
        return " on the delivery counter"
    if cell in k.wall_counters:
        return " on the middle counter"
    return ""


def text_observations(env: SaladKitchen, states) -> list[list[str]]:
    """``[env][agent]`` text of each agent's partial view, holdings, task and actions."""
    g = global_description(env, states)
    avail = _avail(env, states)
    phrases = action_phrases(env)
    out = []
    for b in range(g["task"].shape[0]):
        rows = []
        for agent in range(2):
            me = g["agent_pos"][b, agent]
            held = g["holding"][b, agent]
            mate_held = g["holding"][b, 1 - agent]
            words = [f"Task: {TASKS[int(g['task'][b])]}."]
            words.append(
                f"You hold {_item(g, b, int(held))}." if held != NOBODY else "You hold nothing."
            )
            seen = []
            for item in range(4):
                if g["item_holder"][b, item] != NOBODY or (item < PLATE and g["in_plate"][b, item]):
                    continue
                pos = g["item_pos"][b, item]
                if np.abs(pos - me).max() <= OBS_RADIUS:
                    seen.append(_item(g, b, item) + _place(env, pos))
            if seen:
                words.append(f"You see {_join(seen)}.")
            if (
                mate_held != NOBODY
                and np.abs(g["agent_pos"][b, 1 - agent] - me).max() <= OBS_RADIUS
            ):
                words.append(f"Your teammate holds {_item(g, b, int(mate_held))}.")
            names = [phrases[a] for a in np.flatnonzero(avail[b, agent])]
            if g["busy"][b, agent]:
                words.append(f"You are busy; go on: {names[0]}.")
            else:
                words.append(f"Actions: {'; '.join(names)}.")
            rows.append(" ".join(words))
        out.append(rows)
    return out


@functools.cache
def _avail_fn(env: SaladKitchen):
    stacked = lambda st: jax.numpy.stack([env.get_avail_actions(st)[a] for a in env.agents])
    return jax.jit(stacked), jax.jit(jax.vmap(stacked))


def _avail(env: SaladKitchen, states) -> np.ndarray:
    """[B, 2, A] ``env.get_avail_actions`` of a batch (or one) of states."""
    one, batched = _avail_fn(env)
    if np.ndim(states.step) == 0:
        return np.asarray(one(states))[None]
    return np.asarray(batched(states))


class SaladText:
    """The salad entries' ``TextObservations`` (``envs.capabilities``): this module's text
    of ``env``."""

    def __init__(self, env: SaladKitchen):
        self.env = env

    def action_phrases(self) -> list[str]:
        return action_phrases(self.env)

    def text_observations(self, states) -> list[list[str]]:
        return text_observations(self.env, states)

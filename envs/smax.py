"""SMAX (JaxMARL's StarCraft Multi-Agent Challenge in JAX) as ``smax:<map>`` entries.

Learners control the allies; the enemies are driven by jaxmarl's heuristic policy
(``HeuristicEnemySMAX``), with the kwargs JaxMARL's own baselines use
(``see_enemy_actions=True``, ``walls_cause_death=True``, ``attack_mode="closest"``) and
jaxmarl's defaults otherwise; any kwarg to ``make`` overrides them (e.g. ``max_steps``).

Maps: every scenario in jaxmarl's ``MAP_NAME_TO_SCENARIO`` at import time (3m, 8m, 25m,
2s3z, 3s5z, 5m_vs_6m, 10m_vs_11m, 27m_vs_30m, 3s5z_vs_3s6z, 3s_vs_5z, 6h_vs_8z and the
SMACv2-style ``smacv2_{5,10,20}_units``), plus ``2m_vs_1z`` and ``3s_vs_3z`` built here
from SMAX unit types, and DPM's SMACv2 maps with one unit type per race and SMACv2's
random start positions: ``terran_5_vs_5`` (marines), ``protoss_5_vs_5`` (stalkers),
``zerg_5_vs_5`` (hydralisks). Each entry reports a win (all enemies dead, at least one ally
alive), jaxmarl's world state as the centralized state, and groups the allies by unit
type (one group on the random-unit SMACv2 maps).

What SMAX cannot express, and how it differs from SMAC on StarCraft II:

* Units: only marine, marauder, stalker, zealot, zergling and hydralisk. Maps that need
  anything else have no SMAX version: 2s_vs_1sc (a spine crawler, a static building),
  MMM/MMM2 (medivacs that heal), 1c3s5z and 2c_vs_64zg (colossi), bane_vs_bane and
  so_many_baneling (banelings, splash damage).
* Terrain: a flat, empty 32x32 square; no cliffs, high ground, ramps, chokes or vision
  blockers (so nothing like the corridor map or 2c_vs_64zg's cliff), and touching the
  map edge kills a unit (``walls_cause_death``). Every map starts the two teams as
  clusters at x = W/4 and x = 3W/4 (random noise of +-2), not SMAC's map-specific spots.
* Combat: no armour, bonus damage, splash, upgrades or projectile travel; protoss
  shields are folded into health and never regenerate; movement is continuous with a
  simple push-apart instead of SC2 pathing. Actions resolve simultaneously, so draws
  (both teams wiped out in the same step) happen and do not count as wins.
* Actions: 4 moves, stop, then one attack per enemy (``num_enemies + 5``); SMAC has an
  extra no-op for dead units, here a dead unit may only "stop". Attacks are legal only
  on living enemies inside the unit's attack range.
* Observations: per-unit features (health, relative position, last move, last target,
  weapon cooldown, unit-type one-hot) within sight range; no distance or separate shield
  features. The world state is jaxmarl's: for every unit (allies first) health fraction,
  raw map position (0..32, not normalised), weapon cooldown (seconds) and type one-hot,
  then every unit's team and raw type id: ``12 * (num_allies + num_enemies)`` floats.
  ``world_state="normalized"`` keeps that layout with SMAC's scales (positions about the
  map centre in [-1, 1], cooldowns as a fraction of the unit type's, type ids / 5); it
  reaches every consumer of the world state (QMIX's mixer, MAPPO's critic, DPM's
  reward model). ``state_last_action=True`` appends each ally's last action one-hot
  (``num_allies x (num_enemies + 5)``, all zero at reset and for dead allies), as
  PyMARL's SMAC config does by default (``state_last_action``); jaxmarl's state leaves it
  out.
* Reward: enemy health fraction removed per step divided by the number of enemies,
  plus 1 for a win, so a perfect episode returns about 2 (SMAC scales to 20). That is the
  ``reward="dense"`` setting; ``reward="weak_sparse"`` and ``reward="strong_sparse"`` are
  DPM's Table 1 settings (+200 for a win, +10 per enemy killed, -5 per ally lost; or +200
  for a win only), divided by 200 so that a win is worth 1 as in the dense setting (a
  kill 0.05, a loss -0.025). Every ally gets the same reward.
* Time: one env step is 8 world steps of 1/16 s; every map uses ``max_steps=100``
  (SMAC's limits are per map), and jaxmarl checks the limit before counting the step,
  so a time-out episode lasts ``max_steps + 1`` steps.
* Enemy AI: jaxmarl's heuristic (attack the closest unit in range, else chase a visible
  enemy or head across the map), not SC2's built-in AI at difficulty 7.
* SMACv2 maps draw every ally's type uniformly from all six types regardless of race
  (SMACv2 samples per race with fixed probabilities and includes medivacs, colossi and
  banelings), the enemies mirror the allies' types, and positions use jaxmarl's
  surround-or-reflect start distribution.
"""

from __future__ import annotations

import functools

import jax
import jax.numpy as jnp
import numpy as np
from jaxmarl.environments.smax import HeuristicEnemySMAX
from jaxmarl.environments.smax.smax_env import MAP_NAME_TO_SCENARIO, Scenario

from envs.capabilities import SceneDescriber, SmaxUnits, YoloTaskSet, provides
from envs.registry import EnvSpec, register
from envs.smax_text import SmaxDescriber
from envs.smax_unit_types import HYDRALISK, MARINE, STALKER, UNIT_TYPES, ZEALOT

# Kwargs of JaxMARL's SMAX baselines; jaxmarl's defaults hold for everything else.
BASELINE_KWARGS = {"see_enemy_actions": True, "walls_cause_death": True, "attack_mode": "closest"}


def _fixed_scenario(allies: list[int], enemies: list[int], random_positions=False) -> Scenario:
    return Scenario(
        jnp.array(allies + enemies, dtype=jnp.uint8),
        len(allies),
        len(enemies),
        random_positions,  # SMACv2's surround-or-reflect start positions
        False,
    )


EXTRA_SCENARIOS: dict[str, Scenario] = {
    "2m_vs_1z": _fixed_scenario([MARINE] * 2, [ZEALOT]),
    "3s_vs_3z": _fixed_scenario([STALKER] * 3, [ZEALOT] * 3),
    # SMACv2 5 vs 5 with one unit type per race, as DPM runs them (appendix A.1.2)
    "terran_5_vs_5": _fixed_scenario([MARINE] * 5, [MARINE] * 5, random_positions=True),
    "protoss_5_vs_5": _fixed_scenario([STALKER] * 5, [STALKER] * 5, random_positions=True),
    "zerg_5_vs_5": _fixed_scenario([HYDRALISK] * 5, [HYDRALISK] * 5, random_positions=True),
}


def scenarios() -> dict[str, Scenario]:
    """Every SMAX map this module knows: jaxmarl's and ours."""
    return {**MAP_NAME_TO_SCENARIO, **EXTRA_SCENARIOS}


REWARD_SETTINGS = ("dense", "weak_sparse", "strong_sparse")
WORLD_STATE_SCALINGS = ("raw", "normalized")
# DPM Table 1, divided by SPARSE_SCALE so that a win is worth 1 (as in SMAX's dense reward).
SPARSE_WIN, SPARSE_KILL, SPARSE_LOSS, SPARSE_SCALE = 200.0, 10.0, -5.0, 200.0


class RewardSettingSMAX(HeuristicEnemySMAX):
    """SMAX with the heuristic enemy, a reward setting of DPM's Table 1 and a choice of
    world-state scaling (``world_state="raw"``: jaxmarl's; ``"normalized"``: SMAC's)."""

    def __init__(
        self,
        reward: str = "dense",
        world_state: str = "raw",
        state_last_action: bool = False,
        **kwargs,
    ):
        if reward not in REWARD_SETTINGS:
            raise ValueError(f"unknown SMAX reward setting {reward!r}; valid: {REWARD_SETTINGS}")
        if world_state not in WORLD_STATE_SCALINGS:
            raise ValueError(
                f"unknown SMAX world_state {world_state!r}; valid: {WORLD_STATE_SCALINGS}"
            )
        super().__init__(**kwargs)
        self.reward_setting = reward
        self.world_state_scaling = world_state
        self.state_last_action = bool(state_last_action)
        if self.state_last_action:  # the vector SMAX records for each move 0-3, to read it back
            moves = jnp.arange(self._env.num_movement_actions - 1)
            self.move_directions = np.asarray(self._env._decode_discrete_actions(moves)[0])

    def step_env(self, key, state, actions, **kwargs):
        obs, next_state, rewards, dones, infos = super().step_env(key, state, actions, **kwargs)
        if self.reward_setting == "dense":
            return obs, next_state, rewards, dones, infos
        n = self.num_allies
        before, after = _inner_state(state).unit_alive, _inner_state(next_state).unit_alive
        won = jnp.any(after[:n]) & ~jnp.any(after[n:])
        r = SPARSE_WIN * won
        if self.reward_setting == "weak_sparse":
            killed = jnp.sum(before[n:] & ~after[n:])
            lost = jnp.sum(before[:n] & ~after[:n])
            r = r + SPARSE_KILL * killed + SPARSE_LOSS * lost
        r = (r / SPARSE_SCALE).astype(jnp.float32)
        return obs, next_state, {a: r for a in rewards}, dones, infos


def _make(map_name: str, **kwargs) -> RewardSettingSMAX:
    return RewardSettingSMAX(scenario=scenarios()[map_name], **kwargs)


def _inner_state(env_state):
    # HeuristicEnemySMAX wraps the SMAX state as ``.state``; plain SMAX states have none.
    return getattr(env_state, "state", env_state)


def smax_won(env, env_state) -> jax.Array:
    """All enemies dead and at least one ally alive."""
    alive = _inner_state(env_state).unit_alive
    return jnp.any(alive[: env.num_allies]) & ~jnp.any(alive[env.num_allies :])


def smax_world_state(env, env_state, obs) -> jax.Array:
    """jaxmarl's SMAX world state, ``[12 * (num_allies + num_enemies)]`` float32; scaled
    as SMAC scales its state where the env was made with ``world_state="normalized"``."""
    smax = getattr(env, "_env", env)  # the SMAX inside HeuristicEnemySMAX
    inner = _inner_state(env_state)
    if getattr(env, "world_state_scaling", "raw") == "normalized":
        state = _normalized_world_state(smax, inner)
    else:
        state = smax.get_world_state(inner).astype(jnp.float32)
    if getattr(env, "state_last_action", False):
        last = _last_ally_actions(smax, inner, env.move_directions)
        state = jnp.concatenate([state, last.reshape(-1)])
    return state


def _last_ally_actions(smax, state, directions: np.ndarray) -> jax.Array:
    """Each ally's last discrete action one-hot, ``[num_allies, num_enemies + 5]``, from
    what SMAX keeps of it: the decoded move (a unit vector; zero for stop or an attack) and
    the attack action (0 unless the action was an attack). All zero at reset (step 0) and
    for dead allies. ``directions``: the vector recorded for each move action, ``[4, 2]``."""
    n, moves = smax.num_allies, smax.num_movement_actions
    movement = state.prev_movement_actions[:n]
    attack = state.prev_attack_actions[:n]
    moved = jnp.linalg.norm(movement, axis=-1) > 0.5
    action = jnp.where(
        attack > 0,
        attack,
        jnp.where(moved, jnp.argmax(movement @ directions.T, axis=-1), moves - 1),
    )
    one_hot = jax.nn.one_hot(action, smax.num_ally_actions, dtype=jnp.float32)
    keep = state.unit_alive[:n] & (state.step > 0)
    return jnp.where(keep[:, None], one_hot, 0.0)


def _normalized_world_state(smax, state) -> jax.Array:
    """jaxmarl's layout with SMAC's scales: positions relative to the map centre in
    [-1, 1] (raw: 0..32), weapon cooldowns as a fraction of the unit type's (raw: seconds),
    unit type ids divided by the largest (raw: 0..5); health, type one-hots and teams as
    jaxmarl has them. Dead units stay all zero."""
    half = jnp.array([smax.map_width, smax.map_height], jnp.float32) / 2
    types = state.unit_types
    health = state.unit_health / smax.unit_type_health[types]
    cooldown = state.unit_weapon_cooldowns / smax.unit_type_weapon_cooldowns[types]
    features = jnp.concatenate(
        [
            health[:, None],
            (state.unit_positions - half) / half,
            cooldown[:, None],
            jax.nn.one_hot(types, smax.unit_type_bits),
        ],
        axis=-1,
    )
    features = jnp.where(state.unit_alive[:, None], features, 0.0).reshape(-1)
    type_ids = types / (smax.unit_type_bits - 1)
    return jnp.concatenate([features, state.unit_teams, type_ids]).astype(jnp.float32)


def smax_groups(env) -> tuple[int, ...]:
    """Ally group per unit type, in order of first appearance; one group for random types."""
    if env.smacv2_unit_type_generation or env.scenario is None:
        return (0,) * env.num_allies
    types = np.asarray(env.scenario)[: env.num_allies].tolist()
    order = list(dict.fromkeys(types))
    return tuple(order.index(t) for t in types)


def _describe(name: str, sc: Scenario) -> str:
    if sc.smacv2_unit_type_generation:
        return (
            f"SMAX {name}: {sc.num_allies} vs {sc.num_enemies} random unit types "
            "(SMACv2-style), heuristic enemy"
        )
    types = np.asarray(sc.unit_types).tolist()

    def team(ts):
        counts = {t: ts.count(t) for t in dict.fromkeys(ts)}
        return " + ".join(f"{n} {UNIT_TYPES[t]}{'s' if n > 1 else ''}" for t, n in counts.items())

    return (
        f"SMAX {name}: {team(types[: sc.num_allies])} vs "
        f"{team(types[sc.num_allies :])} (heuristic enemy)"
    )


for _name, _sc in sorted(scenarios().items()):
    register(
        EnvSpec(
            f"smax:{_name}",
            functools.partial(_make, _name),
            _describe(_name, _sc),
            default_kwargs=dict(BASELINE_KWARGS),
            won_fn=smax_won,
            world_state_fn=smax_world_state,
            world_state_reads_obs=False,
            groups_fn=smax_groups,
            capabilities={
                **provides(SmaxUnits, YoloTaskSet("smax")),
                SceneDescriber: SmaxDescriber,
            },
        )
    )

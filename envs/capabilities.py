"""What an environment offers beyond jaxmarl's interface, and the one lookup methods use.

A capability *kind* is a class: a ``typing.Protocol`` when the provider is an object with
methods (usually the env itself), or a small frozen dataclass when it is plain data; a
Protocol without members (``FootballMatch``) says what the env's states are. The first
line of a kind's docstring is a noun phrase that completes "needs an env with ...";
errors quote it.

An env declares its capabilities once, as a mapping ``kind -> (env -> provider)`` built
with ``provides``: on its registry entry (``EnvSpec(..., capabilities=provides(...))``),
or, for an env class used outside the registry, as the class attribute
``capabilities``. A registry entry's declarations add to (and override) its class's.
Adding a capability to an env is one entry, e.g. ``provides(Renderer)`` when the env
itself has ``render``.

Methods ask with ``capability(env, Kind)`` (the provider, or None) or
``require(env, Kind, needed_by=...)`` (the provider, or a ``ValueError`` naming the env,
the capability and the registered envs that have it). Both accept a jaxmarl env, its
``ArrayEnv`` view or a registry name.
"""

from __future__ import annotations

import dataclasses
import functools
from collections.abc import Callable, Sequence
from typing import Any, Protocol, runtime_checkable

import chex
import jax

from envs import registry
from envs.array_env import ArrayEnv


# ----- kinds ----------------------------------------------------------------------------------
@runtime_checkable
class RankingHeuristic(Protocol):
    """agent-specific state encodings and a ranking heuristic (LCA's state interface)

    Every method is pure and jittable and takes the env's own state (not the
    ``ArrayEnv`` wrapper's). LCA samples state pairs from ``random_state``, ranks them by
    ``heuristic_potential`` (the scripted teacher) and fits state-scoring models on
    ``agent_features``; the hand-crafted baselines read ``individual_reward``.
    """

    #: the action index meaning "stay still / do nothing"; LCA's individual reward is
    #: zero for an agent that takes it (paper eq. 4, "stays still without an action")
    noop_action: int
    #: role name of each agent in ``agents`` order (e.g. ("agent", "agent") or
    #: ("green", "orange")); agents with the same role share a state-scoring model
    roles: tuple[str, ...]

    def agent_features(self, state: Any) -> jax.Array:
        """``[N, F]`` float32: agent ``i``'s agent-specific encoding of ``state``.

        Row ``i`` puts agent ``i`` first ("ego") and the others after it ("teammates"),
        so one state-scoring model can serve every agent of a role.
        """

    def heuristic_potential(self, state: Any) -> jax.Array:
        """``[N]`` float32: the paper's human ranking heuristic from each agent's view.

        The scripted teacher prefers ``s'`` over ``s`` for agent ``i`` when
        ``phi_i(s') > phi_i(s)`` (tie when equal); with the noise models of
        ``jaxmarl_llm.lm.teachers`` this is the paper's "human ranking-heuristic".
        """

    def individual_reward(self, state: Any, actions: jax.Array, next_state: Any) -> jax.Array:
        """``[N]`` float32 hand-crafted individual rewards (the MAPPO team+individual baseline).

        Environments without simple individual rewards (Pistonball) raise
        ``NotImplementedError`` naming the reason.
        """

    def random_state(self, key: chex.PRNGKey) -> Any:
        """A random valid state covering every stage of the task (not only start states)."""

    def won(self, state: Any) -> jax.Array:
        """``[]`` bool: the team task is completed in ``state``."""


@runtime_checkable
class StateDescriber(Protocol):
    """plain-language state descriptions from each agent's view (LCA's ranking prompt)

    Host-side methods; the described agent is called "ego" and every other "teammate".
    """

    def describe(self, state: Any, agent: int) -> str:
        """Plain-language description of ``state`` from agent ``agent``'s view."""

    def prompt_context(self, state: Any, agent: int) -> dict[str, str]:
        """Fields of the LCA ranking prompt for ``agent``: ``task_description``,
        ``team_target``, ``key_steps``, ``dependency`` (constraints between agents' tasks,
        may depend on ``state``) and ``ego_role``."""


@runtime_checkable
class Renderer(Protocol):
    """an RGB picture of a state"""

    def render(self, state: Any) -> jax.Array:
        """``[H, W, 3]`` uint8 picture of ``state`` (pure JAX, so it can be vmapped)."""


@runtime_checkable
class ScriptedPolicy(Protocol):
    """a scripted policy (greedy_actions)"""

    def greedy_actions(self, state: Any) -> jax.Array:
        """``[N]`` int32: the scripted policy's action of every agent in ``state`` (jittable)."""


@runtime_checkable
class ScriptedIntents(Protocol):
    """scripted intents of every player (move, sprint, kick)

    What the env's scripted policy wants every player to do, the learners' players
    included (a football env's, ``envs.football``); ``envs.football.scripted_actions``
    turns the learners' intents into actions.
    """

    #: player index of each agent, in ``agents`` order ``[C]``
    controlled: Any
    #: ``[P]`` bool: the player is an agent's
    is_controlled: jax.Array

    def scripted_intent(self, state: Any) -> tuple[jax.Array, jax.Array, jax.Array]:
        """Move direction ``[P, 2]`` (a unit vector, zero to stand), sprint ``[P]`` bool and
        kick kind ``[P]`` int32 of every player in ``state`` (jittable)."""


@runtime_checkable
class FootballMatch(Protocol):
    """football match states (players, ball, possession, score and match statistics)

    The env's states are ``envs.football.FootballState``s: V-GEPF renders them and reads
    its skill predicates from them, the xT shaper reads the ball's zone and possession.
    """


@runtime_checkable
class TextObservations(Protocol):
    """text observations and action phrases (TWOSOME's text interface)

    Host-side, over a batch of states read as numpy: the prompts and the candidate
    actions of a language-model policy (Verco, TWOSOME).
    """

    def action_phrases(self) -> list[str]:
        """One short phrase per action, in action order."""

    def text_observations(self, states: Any) -> list[list[str]]:
        """``[env][agent]`` text of what each agent sees and holds, its task and the
        phrases of its available actions."""


@runtime_checkable
class SmaxUnits(Protocol):
    """SMAX unit access: health, unit types, movement and attack actions

    A ``HeuristicEnemySMAX``-like env: ``num_allies`` allies come first among the units,
    the first ``num_movement_actions`` actions move (the attacks follow), and states hold
    the SMAX state (units) as ``.state``.
    """

    num_allies: int
    num_movement_actions: int
    #: ``[unit types]`` maximum health of each unit type
    unit_type_health: Any

    def get_avail_actions(self, state: Any) -> dict[str, jax.Array]: ...


@runtime_checkable
class SceneDescriber(Protocol):
    """text scenes of SMAX battles (DPM's prompts)

    Host-side: units are numbered from 1 and dead units are said to be dead.
    """

    def scenario_info(self, state: Any) -> str:
        """The scenario lines (teams, situation, objective) of ``state``'s battle."""

    def scene(
        self, state: Any, actions: Sequence[int] | None = None, agents: Sequence[int] | None = None
    ) -> str:
        """One state: the allies ``agents`` (all when None) with their ``actions``, then
        the enemies."""

    def trajectory(self, first: Any, last: Any, length: int) -> str:
        """A ``length``-step segment by its first and last states."""


@dataclasses.dataclass(frozen=True)
class YoloTaskSet:
    """a YOLO-MARL task set

    ``family`` names the task set of ``jaxmarl_llm.methods.yolo`` that fits the env
    ("lbf", "spread" or "smax"); the method reads its sizes from the env.
    """

    family: str


#: every kind this module defines
KINDS: tuple[type, ...] = (
    RankingHeuristic,
    StateDescriber,
    Renderer,
    ScriptedPolicy,
    ScriptedIntents,
    FootballMatch,
    TextObservations,
    SmaxUnits,
    SceneDescriber,
    YoloTaskSet,
)


# ----- declaring --------------------------------------------------------------------------------
def _itself(env: Any) -> Any:
    return env


def provides(*declared: type | Any) -> dict[type, Callable[[Any], Any]]:
    """Capability declarations: a kind class means the env itself provides it; an instance
    of a dataclass kind (``YoloTaskSet("lbf")``) is the provider for every env. Providers
    computed from the env are added as ``{Kind: fn}`` entries."""
    out: dict[type, Callable[[Any], Any]] = {}
    for d in declared:
        if isinstance(d, type):
            out[d] = _itself
        elif dataclasses.is_dataclass(d):
            out[type(d)] = lambda env, d=d: d
        else:
            raise TypeError(f"provides() takes capability kinds or dataclass providers, got {d!r}")
    return out


# ----- looking up -------------------------------------------------------------------------------
def _raw(env: Any) -> Any:
    """The jaxmarl env behind ``env`` (an ``ArrayEnv`` view is unwrapped)."""
    while isinstance(env, ArrayEnv):
        env = env.env
    return env


def _resolve(env: Any) -> Any:
    """The jaxmarl env for a registry name (made with its default kwargs), a jaxmarl env or
    its ``ArrayEnv`` view."""
    if isinstance(env, str):
        env = registry.make(env)
    return _raw(env)


def members(kind: type) -> list[str]:
    """The attributes and methods a Protocol kind asks for (none for a dataclass kind)."""
    if not getattr(kind, "_is_protocol", False):
        return []
    names: dict[str, None] = {}
    for base in reversed(kind.__mro__):
        if base is object or base is Protocol or not getattr(base, "_is_protocol", False):
            continue
        names.update(dict.fromkeys(getattr(base, "__annotations__", {})))
        names.update(
            (n, None) for n, v in vars(base).items() if callable(v) and not n.startswith("__")
        )
    return list(names)


def _spec_declarations(spec: registry.EnvSpec) -> dict[type, Callable[[Any], Any]]:
    factory = spec.factory
    while isinstance(factory, functools.partial):  # e.g. partial(Football, scenario)
        factory = factory.func
    cls = factory if isinstance(factory, type) else None
    return {**getattr(cls, "capabilities", {}), **spec.capabilities}


def declarations(env: Any) -> dict[type, Callable[[Any], Any]]:
    """Every capability ``env`` (a jaxmarl env or its ``ArrayEnv`` view) declares."""
    raw = _raw(env)
    out = dict(getattr(type(raw), "capabilities", {}))
    name = getattr(raw, registry.SPEC_NAME_ATTR, None)
    if name is not None:
        out.update(registry.spec(name).capabilities)
    return out


def providers(kind: type) -> list[str]:
    """Names of the registered environments that declare ``kind``."""
    return sorted(n for n in registry.names() if kind in _spec_declarations(registry.spec(n)))


def _env_label(raw: Any) -> str:
    name = getattr(raw, registry.SPEC_NAME_ATTR, None)
    return type(raw).__name__ if name is None else f"{name!r} ({type(raw).__name__})"


def capability(env: Any, kind: type) -> Any:
    """The provider of ``kind`` for ``env`` (a jaxmarl env, its ``ArrayEnv`` view or a
    registry name, made with its default kwargs), or None when it does not declare it.

    A declared provider that lacks a member of its Protocol kind is a declaration bug
    and raises ``TypeError``.
    """
    raw = _resolve(env)
    fn = declarations(raw).get(kind)
    if fn is None:
        return None
    provider = fn(raw)
    if not isinstance(provider, kind):
        missing = [m for m in members(kind) if not hasattr(provider, m)]
        raise TypeError(
            f"{_env_label(raw)} declares {kind.__name__} but its provider "
            f"{type(provider).__name__} does not implement it (missing: {missing or '?'})"
        )
    return provider


def _compact(names: list[str]) -> str:
    """``names`` with every registry family ("smax:...") they cover whole written "smax:*"."""
    families: dict[str, list[str]] = {}
    for n in registry.names():
        if ":" in n:
            families.setdefault(n.split(":", 1)[0], []).append(n)
    out, covered = [], set()
    for n in names:
        fam = n.split(":", 1)[0] if ":" in n else None
        members = families.get(fam, [])
        if fam is not None and len(members) > 1 and set(members) <= set(names):
            if fam not in covered:
                out.append(f"{fam}:*")
                covered.add(fam)
        else:
            out.append(n)
    return ", ".join(out) if out else "none"


def summary(kind: type) -> str:
    """The noun phrase of ``kind``'s docstring (its first line)."""
    return (kind.__doc__ or kind.__name__).strip().splitlines()[0]


def require(env: Any, kind: type, needed_by: str, hint: str = "") -> Any:
    """The provider of ``kind`` for ``env``, or a ``ValueError`` saying that ``needed_by``
    needs it, that ``env`` lacks it and which registered envs have it (then ``hint``)."""
    raw = _resolve(env)
    provider = capability(raw, kind)
    if provider is not None:
        return provider
    label = _env_label(raw)
    raise ValueError(
        f"{needed_by} needs an env with {summary(kind)} ({kind.__name__}); {label} lacks it. "
        f"Environments with it: {_compact(providers(kind))}" + (f". {hint}" if hint else "")
    )

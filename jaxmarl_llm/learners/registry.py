"""Every learning algorithm by name: the one place config, runner and feedback read.

An entry names the module that implements the algorithm and the facts the layers above
read instead of testing algorithm names (``AlgoSpec``). The module defines the typed
schema of its ``algo`` config block (a dataclass named by ``schema``),
``check_config(cfg)`` (a ConfigError naming the key) and ``make_learner(cfg, env,
shaper) -> Learner``. Modules are imported when an algorithm is first used, so one
learner's dependencies do not load the others'.

An algorithm with ``host_loop=True`` instead defines ``make_trainer(cfg) -> HostTrainer``
(``runner.host_trainer``), which the runner's host loop drives iteration by iteration.

This project's algorithms are built in (``BUILTIN_ALGORITHMS``). Another package adds
its own as entry points of the group ``jaxmarl_llm.algorithms``, each an ``AlgoSpec`` or
a list of them, read the first time an algorithm is looked up; a test or a script can
call ``register_algorithm``.
"""

from __future__ import annotations

import dataclasses
import importlib
from importlib import metadata
from types import ModuleType

from jaxmarl_llm.errors import ConfigError
from jaxmarl_llm.learners.shards import SINGLE, DataShards

# Entry-point group of other packages' algorithms (``AlgoSpec`` objects, or lists of them)
PLUGIN_GROUP = "jaxmarl_llm.algorithms"


@dataclasses.dataclass(frozen=True)
class AlgoSpec:
    name: str  # the value of algo.name
    module: str  # defines the schema, check_config(cfg) and make_learner(cfg, env, shaper)
    schema: str  # name of the algo block's dataclass in ``module``
    summary: str  # one line for ``run.py --list``
    # its Learner plays the current policy on request (``Learner.collect``): online
    # feedback rounds (iterative LCA, DPM) need it
    collects: bool = True
    # algo keys that, when true, anneal the learning rate to 0 at the budget: a run with
    # one of them set cannot be extended to a larger budget
    budget_annealed_lr: tuple[str, ...] = ()
    # trained on the host by the module's ``make_trainer(cfg) -> HostTrainer`` (language-
    # model policies that read text between env steps), not by a jitted Learner
    host_loop: bool = False
    # ``make_learner`` takes ``shards`` (``learners.shards.DataShards``): the learner can
    # split its envs over a mesh's data axis
    data_parallel: bool = False
    # its data shards can compute what one device computes (``mesh.exact``)
    exact_shards: bool = False
    # its critic reads the env's world state (``world_state``), not the agent's observation
    centralized_critic: bool = False
    # learns from a replay buffer of past env steps (``buffer_size``, ``batch_size``,
    # ``learning_starts`` keys), not from the latest rollout only
    replay: bool = False
    # the value-decomposition mixer of its agents' utilities (``learners.mixers.MIXERS``)
    mixer: str | None = None
    # its policy learns; false: the untrained policy is played as it is
    trains: bool = True
    # its agents exchange messages (``algo.messages`` must name a message source)
    exchanges_messages: bool = False

    def load(self) -> ModuleType:
        return importlib.import_module(self.module)

    def config_class(self) -> type:
        return getattr(self.load(), self.schema)


_PPO = "jaxmarl_llm.learners.ppo"
_Q = "jaxmarl_llm.learners.qlearning"
_VERCO = "jaxmarl_llm.methods.verco.algorithm"
_Q_FACTS = dict(budget_annealed_lr=("lr_linear_decay",), exact_shards=True, replay=True)
_LM_POLICY = dict(collects=False, host_loop=True)

BUILTIN_ALGORITHMS: tuple[AlgoSpec, ...] = tuple(
    dataclasses.replace(spec, data_parallel=not spec.host_loop)
    for spec in (
        AlgoSpec("ippo", _PPO, "PPOConfig", "PPO per agent, critic on the agent's own "
                 "observation", budget_annealed_lr=("anneal_lr",), exact_shards=True),
        AlgoSpec("mappo", _PPO, "PPOConfig", "PPO per agent, critic on the world state",
                 budget_annealed_lr=("anneal_lr",), exact_shards=True,
                 centralized_critic=True),
        AlgoSpec("qmix", _Q, "QLearningConfig", "GRU Q-agents, monotonic mixing "
                 "hypernetwork", mixer="qmix", **_Q_FACTS),
        AlgoSpec("vdn", _Q, "QLearningConfig", "GRU Q-agents, summed team value",
                 mixer="vdn", **_Q_FACTS),
        AlgoSpec("qplex", _Q, "QLearningConfig", "GRU Q-agents, duplex dueling mixer",
                 mixer="qplex", **_Q_FACTS),
        AlgoSpec("maddpg", "jaxmarl_llm.learners.maddpg", "MADDPGConfig",
                 "Gumbel-softmax actors, centralized critics", centralized_critic=True,
                 replay=True),
        AlgoSpec("verco", _VERCO, "VercoConfig", "LM policy, LoRA actor trained by PPO on "
                 "action scores, teammate messages in the prompt", exchanges_messages=True,
                 **_LM_POLICY),
        AlgoSpec("twosome", _VERCO, "VercoConfig", "LM policy, LoRA actor trained by PPO "
                 "on action scores, no messages", **_LM_POLICY),
        AlgoSpec("lm_zero_shot", _VERCO, "VercoConfig", "the base LM's action scores, not "
                 "trained", trains=False, **_LM_POLICY),
        AlgoSpec("happo", "jaxmarl_llm.learners.happo", "HAPPOConfig", "PPO actor per "
                 "agent, updated in a random sequence; critic on the world state",
                 budget_annealed_lr=("anneal_lr",), centralized_critic=True),
    )
)  # fmt: skip

_registered: dict[str, AlgoSpec] = {spec.name: spec for spec in BUILTIN_ALGORITHMS}
_plugins_loaded = False


def _add(spec: AlgoSpec, source: str) -> None:
    known = _registered.get(spec.name)
    # the same spec twice (a built-in one also declared as an entry point) is no clash
    if known is not None and known != spec:
        raise ValueError(f"algorithm {spec.name!r} ({source}) is already registered")
    _registered[spec.name] = spec


def _load_plugins() -> None:
    """Register the algorithms of the group's entry points (once per process)."""
    global _plugins_loaded
    if _plugins_loaded:
        return
    _plugins_loaded = True
    for entry in metadata.entry_points(group=PLUGIN_GROUP):
        loaded = entry.load()
        specs = [loaded] if isinstance(loaded, AlgoSpec) else loaded
        if not isinstance(specs, (list, tuple)) or not all(
            isinstance(spec, AlgoSpec) for spec in specs
        ):
            raise TypeError(
                f"entry point {entry.name!r} of {PLUGIN_GROUP!r} ({entry.value}) must be an "
                f"AlgoSpec or a list of them, not {loaded!r}"
            )
        for spec in specs:
            _add(spec, f"entry point {entry.name!r} of {PLUGIN_GROUP!r}")


def register_algorithm(spec: AlgoSpec) -> None:
    """Add an algorithm from outside this package (a script, a test)."""
    _load_plugins()
    if spec.name in _registered:
        raise ValueError(f"algorithm {spec.name!r} is already registered")
    _registered[spec.name] = spec


def unregister_algorithm(name: str) -> None:
    _registered.pop(name, None)


def algorithms() -> dict[str, AlgoSpec]:
    """Every registered algorithm by name: the built-in ones, then the others."""
    _load_plugins()
    return dict(_registered)


def algo_names() -> list[str]:
    return list(algorithms())


def algo_spec(name) -> AlgoSpec:
    """The entry of ``name`` (an enum or a string), or a ConfigError naming the choices."""
    key = str(getattr(name, "value", name))
    known = algorithms()
    if key not in known:
        raise ConfigError(
            f"bad value for config key 'algo.name': {key!r}; valid choices: {', '.join(known)}"
        )
    return known[key]


def check_config(cfg) -> None:
    """The algorithm's own checks of its ``algo`` block (a ConfigError naming the key)."""
    algo_spec(cfg.name).load().check_config(cfg)


def make_learner(cfg, env, shaper, shards: DataShards = SINGLE):
    """The ``Learner`` of ``cfg`` (an ``algo`` block that ``check_config`` accepted); with
    ``shards``, the program of one of its data shards."""
    spec = algo_spec(cfg.name)
    if not shards.active:
        return spec.load().make_learner(cfg, env, shaper)
    if not spec.data_parallel:
        raise ConfigError(
            f"algo {spec.name!r} cannot split its envs over {shards.count} devices; set "
            "mesh.devices=1, or mesh.seeds to the device count (seeds split over devices)"
        )
    if shards.is_exact and not spec.exact_shards:
        exact = ", ".join(name for name, s in algorithms().items() if s.exact_shards)
        raise ConfigError(
            f"bad value for config key 'mesh.exact': true, but algo {spec.name!r} splits its "
            f"envs over devices only stratified (mesh.exact=false); exact shards: {exact}"
        )
    return spec.load().make_learner(cfg, env, shaper, shards)


def make_train(cfg, env, shaper):
    return make_learner(cfg, env, shaper).train

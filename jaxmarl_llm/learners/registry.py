"""Every learning algorithm by name: the one place config, runner and feedback read.

An entry names the module that implements the algorithm and what the layers above need
to know without building it. The module defines the typed schema of its ``algo`` config
block (a dataclass named by ``schema``), ``check_config(cfg)`` (a ConfigError naming the
key) and ``make_learner(cfg, env, shaper) -> Learner``. Modules are imported when an
algorithm is first used, so one learner's dependencies do not load the others'.

An algorithm with ``host_loop=True`` instead defines ``run(cfg) -> RunResult``, its own
loop over the run (the runner hands it the whole run).

Adding a learner is one module and one ``AlgoSpec`` in ``ALGORITHMS`` below (or, from
outside the package, one ``register_algorithm`` call).
"""

from __future__ import annotations

import dataclasses
import importlib
from types import ModuleType

from jaxmarl_llm.errors import ConfigError
from jaxmarl_llm.learners.shards import SINGLE, DataShards


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
    # trained by the module's own host loop, ``run(cfg) -> RunResult`` (language-model
    # policies that read text between env steps), not by a jitted Learner
    host_loop: bool = False
    # ``make_learner`` takes ``shards`` (``learners.shards.DataShards``): the learner can
    # split its envs over a mesh's data axis
    data_parallel: bool = False
    # its data shards can compute what one device computes (``mesh.exact``)
    exact_shards: bool = False

    def load(self) -> ModuleType:
        return importlib.import_module(self.module)

    def config_class(self) -> type:
        return getattr(self.load(), self.schema)


_PPO = "jaxmarl_llm.learners.ppo"
_Q = "jaxmarl_llm.learners.qlearning"
_VERCO = "jaxmarl_llm.methods.verco.train"

ALGORITHMS: dict[str, AlgoSpec] = {
    spec.name: dataclasses.replace(spec, data_parallel=not spec.host_loop)
    for spec in (
        AlgoSpec("ippo", _PPO, "PPOConfig", "PPO per agent, critic on the agent's own "
                 "observation", budget_annealed_lr=("anneal_lr",), exact_shards=True),
        AlgoSpec("mappo", _PPO, "PPOConfig", "PPO per agent, critic on the world state",
                 budget_annealed_lr=("anneal_lr",), exact_shards=True),
        AlgoSpec("qmix", _Q, "QLearningConfig", "GRU Q-agents, monotonic mixing "
                 "hypernetwork", budget_annealed_lr=("lr_linear_decay",), exact_shards=True),
        AlgoSpec("vdn", _Q, "QLearningConfig", "GRU Q-agents, summed team value",
                 budget_annealed_lr=("lr_linear_decay",), exact_shards=True),
        AlgoSpec("qplex", _Q, "QLearningConfig", "GRU Q-agents, duplex dueling mixer",
                 budget_annealed_lr=("lr_linear_decay",), exact_shards=True),
        AlgoSpec("maddpg", "jaxmarl_llm.learners.maddpg", "MADDPGConfig",
                 "Gumbel-softmax actors, centralized critics"),
        AlgoSpec("verco", _VERCO, "VercoConfig", "LM policy, LoRA actor trained by PPO on "
                 "action scores, teammate messages in the prompt", collects=False,
                 host_loop=True),
        AlgoSpec("twosome", _VERCO, "VercoConfig", "LM policy, LoRA actor trained by PPO "
                 "on action scores, no messages", collects=False, host_loop=True),
        AlgoSpec("lm_zero_shot", _VERCO, "VercoConfig", "the base LM's action scores, not "
                 "trained", collects=False, host_loop=True),
        AlgoSpec("happo", "jaxmarl_llm.learners.happo", "HAPPOConfig", "PPO actor per "
                 "agent, updated in a random sequence; critic on the world state",
                 budget_annealed_lr=("anneal_lr",)),
    )
}  # fmt: skip


def register_algorithm(spec: AlgoSpec) -> None:
    """Add an algorithm from outside this package (a plugin, a test)."""
    if spec.name in ALGORITHMS:
        raise ValueError(f"algorithm {spec.name!r} is already registered")
    ALGORITHMS[spec.name] = spec


def unregister_algorithm(name: str) -> None:
    ALGORITHMS.pop(name, None)


def algo_names() -> list[str]:
    return list(ALGORITHMS)


def algo_spec(name) -> AlgoSpec:
    """The entry of ``name`` (an enum or a string), or a ConfigError naming the choices."""
    key = str(getattr(name, "value", name))
    if key not in ALGORITHMS:
        raise ConfigError(
            f"bad value for config key 'algo.name': {key!r}; valid choices: {', '.join(ALGORITHMS)}"
        )
    return ALGORITHMS[key]


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
        exact = ", ".join(name for name, s in ALGORITHMS.items() if s.exact_shards)
        raise ConfigError(
            f"bad value for config key 'mesh.exact': true, but algo {spec.name!r} splits its "
            f"envs over devices only stratified (mesh.exact=false); exact shards: {exact}"
        )
    return spec.load().make_learner(cfg, env, shaper, shards)


def make_train(cfg, env, shaper):
    return make_learner(cfg, env, shaper).train

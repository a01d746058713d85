"""Experiment configuration: typed schemas, YAML files, dotted command-line overrides.

``load_config(name_or_path, ["algo.lr=3e-4", ...])`` merges a YAML file from
``experiments/configs/`` (or a path) and overrides onto a typed schema, so an unknown
key or a bad value fails here, before anything compiles, with a message naming the key
and what is allowed.
"""

from __future__ import annotations

import difflib
from dataclasses import dataclass, field
from enum import Enum
from pathlib import Path
from typing import Any

from omegaconf import DictConfig, ListConfig, OmegaConf
from omegaconf.errors import ConfigKeyError, OmegaConfBaseException

from jaxmarl_llm.learners.networks import ParamSharing
from jaxmarl_llm.shaping.base import CombineMode

CONFIG_DIR = Path(__file__).resolve().parent.parent / "experiments" / "configs"


class ConfigError(ValueError):
    """A config file or override is wrong; the message names the key."""


class Activation(str, Enum):
    tanh = "tanh"
    relu = "relu"
    gelu = "gelu"


class WandbMode(str, Enum):
    disabled = "disabled"
    offline = "offline"
    online = "online"


class TeamReward(str, Enum):
    sum = "sum"
    mean = "mean"
    first = "first"


class CriticReward(str, Enum):
    """What MADDPG's critic ``i`` learns: agent ``i``'s own reward or the team's."""

    none = "none"
    sum = "sum"
    mean = "mean"


class Mixer(str, Enum):
    qmix = "qmix"
    vdn = "vdn"
    qplex = "qplex"


@dataclass
class EnvConfig:
    name: str = "mpe:simple_spread_3"
    kwargs: dict[str, Any] = field(default_factory=dict)


@dataclass
class ShapingConfig:
    name: str = "identity"
    mode: CombineMode = CombineMode.add
    coef: float = 1.0
    kwargs: dict[str, Any] = field(default_factory=dict)


@dataclass
class WandbConfig:
    mode: WandbMode = WandbMode.disabled
    project: str = "jaxmarl_llm"
    entity: str | None = None
    tags: list[str] = field(default_factory=list)


@dataclass
class EvalConfig:
    """Greedy evaluation between chunks (``jaxmarl_llm/learners/evaluation.py``)."""

    every: int = 0  # chunks (of log_every updates) between evaluations; 0: never
    episodes: int = 32  # per seed, one per parallel env (PyMARL's test_nepisode)
    max_steps: int = 1000  # step cap; an episode still running then is left out


@dataclass
class PPOConfig:
    """IPPO / MAPPO. Defaults are the common PPO setting (CleanRL/PureJaxRL/JaxMARL)."""

    name: str = "ippo"
    total_timesteps: int = 1_000_000
    num_envs: int = 16
    num_steps: int = 128
    lr: float = 2.5e-4
    anneal_lr: bool = True
    update_epochs: int = 4
    num_minibatches: int = 4
    gamma: float = 0.99
    gae_lambda: float = 0.95
    clip_eps: float = 0.2
    clip_value: bool = True
    ent_coef: float = 0.01
    vf_coef: float = 0.5
    max_grad_norm: float = 0.5
    hidden_sizes: list[int] = field(default_factory=lambda: [64, 64])
    activation: Activation = Activation.tanh
    recurrent: bool = False
    gru_hidden_dim: int = 128
    param_sharing: ParamSharing = ParamSharing.shared
    agent_ids: bool = True
    normalize_advantages: bool = True
    # EPyMARL's standardise_rewards: training rewards (env + shaping) minus their running
    # mean, over their running std, before GAE (its MAPPO/IPPO default on LBF)
    standardize_rewards: bool = False
    # Agent-rows per gradient chunk: each minibatch's gradient is accumulated over
    # chunks of about this size: the same gradient, but activations stay in cache (a
    # 98k-row forward+backward of the 64-64 actor-critic: 143 -> 73 ms on a 2-core CPU).
    # 0 = the whole minibatch at once. null = by backend: 8192 on CPU, 0 on GPU/TPU,
    # where chunking serializes the step (IPPO on MPE at 65,536 envs on an H200:
    # 5.0M env steps/s chunked vs 28.5M whole).
    grad_chunk_rows: int | None = None


@dataclass
class QLearningConfig:
    """QMIX / VDN (one learner, the mixer is a parameter) with GRU agents."""

    name: str = "qmix"
    total_timesteps: int = 1_000_000
    num_envs: int = 8
    num_steps: int = 128  # env steps per env collected per update (one buffer item)
    buffer_size: int = 5_000  # buffer capacity in items of num_steps transitions
    batch_size: int = 32  # items per gradient step
    learning_starts: int = 10_000  # env steps before the first gradient step
    updates_per_rollout: int = 4  # gradient steps per update
    lr: float = 5e-3
    lr_linear_decay: bool = False
    optimizer: str = "adam"
    max_grad_norm: float = 10.0
    gamma: float = 0.99
    td_lambda: float | None = None  # None: one-step targets; a float: TD(lambda) targets
    double_q: bool = True
    # store each item's GRU carry at its first step and unroll the learner from it (R2D2's
    # stored state); False: from zeros, so an item's first, partial episode starts cold
    stored_hidden: bool = False
    eps_start: float = 1.0
    eps_finish: float = 0.05
    eps_decay: float = 0.1  # fraction of total_timesteps over which epsilon anneals
    # the budget eps_decay is a fraction of; None: total_timesteps. Set by extending a
    # finished run (resume=RUN_DIR algo.total_timesteps=MORE), so that the run keeps the
    # epsilon schedule it started with, and by configs whose schedule must not change with
    # the budget (a shorter run anneals over the same env steps; a longer one than this
    # budget need not end its annealing)
    schedule_timesteps: int | None = None
    target_update_interval: int = 10  # updates between hard target copies (tau = 1)
    tau: float = 1.0
    hidden_dim: int = 64
    mixer_embed_dim: int = 32
    mixer_hypernet_dim: int = 64
    # gain of the QMIX hypernetworks' orthogonal init (JaxMARL's MIXER_INIT_SCALE): small, so
    # Q_tot starts near 0 even on unnormalised world states (SMAX positions run to 32)
    mixer_init_scale: float = 0.001
    param_sharing: ParamSharing = ParamSharing.shared
    agent_ids: bool = True
    team_reward: TeamReward = TeamReward.sum


@dataclass
class MADDPGConfig:
    """MADDPG with Gumbel-softmax actors and centralized critics (EPyMARL's settings)."""

    name: str = "maddpg"
    total_timesteps: int = 1_000_000
    num_envs: int = 16
    num_steps: int = 8  # env steps per env collected per update
    buffer_size: int = 200_000  # transitions
    batch_size: int = 256  # transitions per gradient step
    learning_starts: int = 10_000  # env steps before the first gradient step
    updates_per_rollout: int = 1  # gradient steps per update
    actor_lr: float = 5e-4
    critic_lr: float = 5e-4
    max_grad_norm: float = 10.0
    gamma: float = 0.99
    tau: float = 0.01  # Polyak factor of the target networks, every gradient step
    temperature: float = 1.0  # Gumbel-softmax temperature
    actor_reg: float = 1e-3  # weight of the mean squared logit in the actor loss
    hidden_sizes: list[int] = field(default_factory=lambda: [128, 128])
    activation: Activation = Activation.relu
    param_sharing: ParamSharing = ParamSharing.shared
    agent_ids: bool = True
    team_reward: CriticReward = CriticReward.none  # none: agent i's own reward


ALGO_SCHEMAS: dict[str, type] = {
    "ippo": PPOConfig,
    "mappo": PPOConfig,
    "qmix": QLearningConfig,
    "vdn": QLearningConfig,
    "qplex": QLearningConfig,
    "maddpg": MADDPGConfig,
}


@dataclass
class ExperimentConfig:
    name: str = "experiment"
    env: EnvConfig = field(default_factory=EnvConfig)
    algo: Any = None  # filled with the algorithm's schema
    shaping: ShapingConfig = field(default_factory=ShapingConfig)
    num_seeds: int = 1
    seed: int = 0
    out_dir: str | None = None  # default: runs/<name>
    resume: str | None = None  # a run folder to continue
    log_every: int = 10  # updates per jitted chunk (one metrics row per update)
    checkpoint_every: int = 1  # chunks between checkpoints
    keep_checkpoints: int = 2
    progress: bool = True
    plot: bool = True
    wandb: WandbConfig = field(default_factory=WandbConfig)
    eval: EvalConfig = field(default_factory=EvalConfig)
    # configs (names or YAML paths) also run, with this run's seeds, into
    # <run_dir>/compare/<name>; comparison.png shows every curve together
    compare_with: list[str] = field(default_factory=list)


def resolve_config_path(name_or_path: str) -> Path:
    p = Path(name_or_path)
    if p.suffix in (".yaml", ".yml") and p.exists():
        return p
    candidate = CONFIG_DIR / f"{name_or_path}.yaml"
    if candidate.exists():
        return candidate
    known = available_configs()
    close = difflib.get_close_matches(name_or_path, known, n=3)
    hint = f" Did you mean {', '.join(map(repr, close))}?" if close else ""
    raise ConfigError(
        f"no config named {name_or_path!r} (looked for {p} and {candidate}).{hint} "
        f"Available in {CONFIG_DIR}: {', '.join(known) or '(none)'}"
    )


def available_configs() -> list[str]:
    return sorted(p.stem for p in CONFIG_DIR.glob("*.yaml"))


def _valid_keys(schema_node) -> list[str]:
    try:
        return sorted(str(k) for k in schema_node.keys())
    except Exception:
        return []


def _explain(err: OmegaConfBaseException, schema: DictConfig) -> ConfigError:
    key = getattr(err, "full_key", None) or "?"
    if isinstance(err, ConfigKeyError):
        parent = key.rsplit(".", 1)[0] if "." in key else ""
        node = OmegaConf.select(schema, parent) if parent else schema
        valid = _valid_keys(node) if isinstance(node, DictConfig) else []
        leaf = key.rsplit(".", 1)[-1]
        close = difflib.get_close_matches(leaf, valid, n=3)
        hint = f" Did you mean {', '.join(map(repr, close))}?" if close else ""
        where = f"under '{parent}'" if parent else "at the top level"
        return ConfigError(
            f"unknown config key '{key}'.{hint} Valid keys {where}: {', '.join(valid)}"
        )
    msg = str(err).splitlines()[0]
    return ConfigError(f"bad value for config key '{key}': {msg}")


def _parse_overrides(overrides: list[str]) -> DictConfig:
    for o in overrides:
        if "=" not in o or o.startswith("="):
            raise ConfigError(f"override {o!r} is not of the form key=value (e.g. algo.lr=3e-4)")
    try:
        return OmegaConf.from_dotlist(list(overrides))
    except OmegaConfBaseException as e:
        raise ConfigError(f"cannot parse overrides {overrides}: {e}") from e


def build_config(raw: DictConfig | dict, overrides: list[str] | None = None) -> DictConfig:
    """Merge ``raw`` and ``overrides`` onto the typed schema and check cross-field rules."""
    raw = OmegaConf.create(raw) if isinstance(raw, dict) else raw
    over = _parse_overrides(overrides or [])
    algo_name = OmegaConf.select(over, "algo.name") or OmegaConf.select(raw, "algo.name")
    if algo_name not in ALGO_SCHEMAS:
        raise ConfigError(
            f"bad value for config key 'algo.name': {algo_name!r}; "
            f"valid choices: {', '.join(ALGO_SCHEMAS)}"
        )
    schema = OmegaConf.structured(ExperimentConfig(algo=ALGO_SCHEMAS[algo_name](name=algo_name)))
    cfg = schema
    for part in (raw, over):
        _coerce_integral_floats(schema, part)
        try:
            cfg = OmegaConf.merge(cfg, part)
        except OmegaConfBaseException as e:
            raise _explain(e, schema) from e
    _check(cfg)
    return cfg


def _coerce_integral_floats(schema: DictConfig, node: DictConfig) -> None:
    """Let ``total_timesteps=1e6`` mean the integer it names (YAML and dotlists read floats)."""
    for key in list(node.keys()):
        if key not in schema:
            continue  # unknown keys are reported by the merge
        value = node[key]
        typ = OmegaConf.get_type(schema, key)
        if isinstance(value, DictConfig) and isinstance(schema[key], DictConfig):
            _coerce_integral_floats(schema[key], value)
        elif typ is int and isinstance(value, float) and value.is_integer():
            node[key] = int(value)


def load_config(name_or_path: str, overrides: list[str] | None = None) -> DictConfig:
    return build_config(_compose(resolve_config_path(name_or_path)), overrides)


def _compose(path: Path, seen: tuple[Path, ...] = ()) -> DictConfig:
    """The file at ``path`` merged over its ``base`` configs, each composed the same way.

    ``base: NAME`` or ``base: [NAME, ...]`` (merged in order, the file last): a config
    name from ``experiments/configs/`` or its ``base/`` folder (partial blocks), or a YAML
    path relative to the naming file. A base's ``name`` is not inherited.
    """
    path = path.resolve()
    if path in seen:
        chain = " -> ".join(p.name for p in (*seen, path))
        raise ConfigError(f"config file {seen[-1]} has a cycle of bases: {chain}")
    try:
        raw = OmegaConf.load(path)
    except Exception as e:
        raise ConfigError(f"cannot read config file {path}: {e}") from e
    if not isinstance(raw, DictConfig):
        what = f"base of {seen[-1]}" if seen else "config file"
        raise ConfigError(f"{what} {path} must hold a mapping at the top level")
    bases = raw.pop("base", None) or []
    bases = [bases] if isinstance(bases, str) else bases
    if not isinstance(bases, (list, ListConfig)):
        raise ConfigError(f"config file {path}: 'base' must be a config name or a list of them")
    merged = OmegaConf.create()
    for base in bases:
        part = _compose(_find_base(str(base), path), (*seen, path))
        part.pop("name", None)
        merged = OmegaConf.merge(merged, part)
    return OmegaConf.merge(merged, raw) if bases else raw


def _find_base(name: str, naming: Path) -> Path:
    if name.endswith((".yaml", ".yml")):
        candidates = [naming.parent / name]
    else:
        candidates = [CONFIG_DIR / f"{name}.yaml", CONFIG_DIR / "base" / f"{name}.yaml"]
    found = [p for p in candidates if p.is_file()]
    if len(found) != 1:
        problem = "is ambiguous" if found else "is unknown"
        where = " and ".join(str(p) for p in (found or candidates))
        raise ConfigError(f"config file {naming}: base {name!r} {problem} (looked for {where})")
    return found[0]


def _positive(cfg: DictConfig, *keys: str) -> None:
    for k in keys:
        v = OmegaConf.select(cfg, k)
        if v is None or v <= 0:
            raise ConfigError(f"bad value for config key '{k}': {v!r}; must be > 0")


def _check(cfg: DictConfig) -> None:
    import envs  # late: envs registers on import

    if cfg.env.name not in envs.names():
        try:
            envs.spec(cfg.env.name)
        except envs.UnknownEnvError as e:
            raise ConfigError(f"bad value for config key 'env.name': {e}") from e
    from jaxmarl_llm.shaping.registry import shaper_names

    if cfg.shaping.name not in shaper_names():
        raise ConfigError(
            f"bad value for config key 'shaping.name': {cfg.shaping.name!r}; "
            f"valid choices: {', '.join(shaper_names())}"
        )
    _check_shaping_kwargs(cfg)
    _positive(
        cfg, "num_seeds", "log_every", "checkpoint_every", "algo.total_timesteps", "algo.num_envs"
    )
    _positive(cfg, "eval.episodes", "eval.max_steps")
    if cfg.eval.every < 0:
        raise ConfigError(
            f"bad value for config key 'eval.every': {cfg.eval.every} (chunks between greedy "
            "evaluations; 0 turns them off)"
        )
    a = cfg.algo
    _positive(cfg, "algo.num_steps")
    if cfg.algo.name == "maddpg":
        _positive(cfg, "algo.actor_lr", "algo.critic_lr")
    else:
        _positive(cfg, "algo.lr")
    if cfg.algo.name in ("ippo", "mappo"):
        _positive(cfg, "algo.update_epochs", "algo.num_minibatches")
        if a.grad_chunk_rows is not None and a.grad_chunk_rows < 0:
            raise ConfigError(
                f"bad value for config key 'algo.grad_chunk_rows': {a.grad_chunk_rows} "
                "(need >= 0; 0 = no chunking, null = by backend)"
            )
        units = a.num_envs if a.recurrent else a.num_envs * a.num_steps
        if units % a.num_minibatches:
            what = "algo.num_envs" if a.recurrent else "algo.num_envs * algo.num_steps"
            raise ConfigError(
                f"bad value for config key 'algo.num_minibatches': {a.num_minibatches} does not "
                f"divide {what} = {units}"
            )
    else:
        _positive(cfg, "algo.buffer_size", "algo.batch_size", "algo.updates_per_rollout")
    if cfg.algo.name in ("qmix", "vdn", "qplex"):
        if not 0.0 <= a.eps_finish <= a.eps_start <= 1.0:
            raise ConfigError(
                "bad value for config keys 'algo.eps_start'/'algo.eps_finish': need "
                f"0 <= eps_finish <= eps_start <= 1, got {a.eps_start}, {a.eps_finish}"
            )
    for other in cfg.compare_with:
        try:
            resolve_config_path(other)
        except ConfigError as e:
            raise ConfigError(f"bad value in config key 'compare_with': {e}") from e
    if cfg.resume is not None and not Path(cfg.resume).is_dir():
        raise ConfigError(f"bad value for config key 'resume': {cfg.resume!r} is not a run folder")


def _check_shaping_kwargs(cfg: DictConfig) -> None:
    """Validate ``shaping.kwargs`` against the shaper's schema and fill in its defaults."""
    from jaxmarl_llm.shaping.registry import shaper_schema

    schema_type = shaper_schema(cfg.shaping.name)
    if schema_type is None:
        return
    schema = OmegaConf.structured(schema_type)
    raw = cfg.shaping.kwargs
    given = OmegaConf.to_container(raw, resolve=True) if raw is not None else {}
    migrate = getattr(schema_type, "migrate", None)  # keys of saved runs to today's form
    if migrate is not None:
        try:
            given = migrate(given)
        except ValueError as e:
            raise ConfigError(f"bad shaping.kwargs for shaper {cfg.shaping.name!r}: {e}") from e
    given = OmegaConf.create(given)
    try:
        _coerce_integral_floats(schema, given)
        merged = OmegaConf.merge(schema, given)
    except OmegaConfBaseException as e:
        err = _explain(e, schema)
        raise ConfigError(str(err).replace("config key '", "config key 'shaping.kwargs.")) from e
    missing = sorted(OmegaConf.missing_keys(merged))
    if missing:
        raise ConfigError(f"missing value for config key 'shaping.kwargs.{missing[0]}'")
    check = getattr(schema_type, "check", None)
    if check is not None:
        try:
            check(OmegaConf.to_object(merged))
        except ValueError as e:
            raise ConfigError(f"bad shaping.kwargs for shaper {cfg.shaping.name!r}: {e}") from e
    cfg.shaping.kwargs = OmegaConf.to_container(merged, resolve=True)


def to_yaml(cfg: DictConfig) -> str:
    return OmegaConf.to_yaml(cfg)

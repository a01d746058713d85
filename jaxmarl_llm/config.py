"""Experiment configuration: typed schemas, YAML files, dotted command-line overrides.

``load_config(name_or_path, ["algo.lr=3e-4", ...])`` merges a YAML file from the
package's ``configs/`` folder (or a path) and overrides onto a typed schema, so an unknown
key or a bad value fails here, before anything compiles, with a message naming the key
and what is allowed.
"""

from __future__ import annotations

import difflib
import functools
from dataclasses import dataclass, field
from enum import Enum
from importlib import resources
from pathlib import Path
from typing import Any

from omegaconf import DictConfig, ListConfig, OmegaConf
from omegaconf.errors import ConfigKeyError, OmegaConfBaseException

from jaxmarl_llm.errors import ConfigError
from jaxmarl_llm.learners.registry import algo_spec
from jaxmarl_llm.learners.registry import check_config as check_algo_config
from jaxmarl_llm.shaper import CombineMode

__all__ = ["ConfigError", "build_config", "load_config", "to_yaml"]

# package data, so a checkout and an installed wheel name the same configs (an installed
# package is a folder on disk, so the folder is an ordinary path)
CONFIG_DIR = Path(str(resources.files("jaxmarl_llm") / "configs"))


class WandbMode(str, Enum):
    disabled = "disabled"
    offline = "offline"
    online = "online"


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
    # also play the sampled policy (eval_sampled_* columns), as EPyMARL's actor-critic
    # test episodes do; learners with a stochastic policy only
    sampled: bool = False


@dataclass
class MeshConfig:
    """The devices a run trains on (``jaxmarl_llm/runner/mesh.py``)."""

    devices: Any = "all"  # "all" visible devices (of every process), or the first N
    seeds: int = 1  # devices along the seeds axis (splitting num_seeds); the rest split envs
    # data shards compute what one device computes (global env keys and minibatches, each
    # rollout gathered on every device); false: each shards its own envs' keys and shuffles
    exact: bool = False


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
    mesh: MeshConfig = field(default_factory=MeshConfig)
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
    schema = _experiment_schema(algo_name)
    cfg = schema
    for part in (raw, over):
        _coerce_integral_floats(schema, part)
        try:
            cfg = OmegaConf.merge(cfg, part)
        except OmegaConfBaseException as e:
            raise _explain(e, schema) from e
    _check(cfg)
    return cfg


# Building a typed schema from its dataclasses is most of a config's build time (~40 ms);
# a merge copies the schema, and nothing writes to it, so each is built once per process.
@functools.cache
def _experiment_schema(algo_name: str) -> DictConfig:
    algo_schema = algo_spec(algo_name).config_class()
    return OmegaConf.structured(ExperimentConfig(algo=algo_schema(name=algo_name)))


@functools.cache
def _shaper_schema(schema_type: type) -> DictConfig:
    return OmegaConf.structured(schema_type)


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
    name from the package's ``configs/`` or its ``base/`` folder (partial blocks), or a YAML
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
    _positive(cfg, "num_seeds", "log_every", "checkpoint_every")
    _positive(cfg, "eval.episodes", "eval.max_steps")
    if cfg.eval.every < 0:
        raise ConfigError(
            f"bad value for config key 'eval.every': {cfg.eval.every} (chunks between greedy "
            "evaluations; 0 turns them off)"
        )
    check_algo_config(cfg.algo)
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
    schema = _shaper_schema(schema_type)
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

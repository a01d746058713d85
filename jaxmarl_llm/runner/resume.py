"""Which folder and config a run uses: a new run folder, or a resumed run's saved config
(its budget extended where a larger one is asked for), and the chunk boundaries that a
resumed run keeps."""

from __future__ import annotations

from pathlib import Path

from omegaconf import DictConfig, OmegaConf

from jaxmarl_llm.config import to_yaml
from jaxmarl_llm.distributed import write_text
from jaxmarl_llm.errors import ConfigError
from jaxmarl_llm.learners import algo_spec

# Keys a resumed run may change; anything else must match the run being resumed.
RESUMABLE_OVERRIDES = ("resume", "progress", "plot", "wandb", "mesh")


def load_run_config(run_dir: Path) -> DictConfig:
    """A run folder's saved config, checked against today's schema (keys added since the
    run was made get their defaults)."""
    from jaxmarl_llm.config import build_config

    path = Path(run_dir) / "config.yaml"
    if not path.exists():
        raise ConfigError(f"{run_dir} is not a run folder (no config.yaml)")
    return build_config(OmegaConf.load(path))


def default_run_dir(cfg: DictConfig) -> Path:
    return Path("runs") / cfg.name


def new_run_dir(cfg: DictConfig) -> Path:
    """The folder of a new run (``cfg.out_dir`` or the default), made and holding its
    config; a ConfigError where it already holds another run's checkpoints."""
    run_dir = Path(cfg.out_dir) if cfg.out_dir else default_run_dir(cfg)
    if (run_dir / "checkpoints").exists() and any((run_dir / "checkpoints").iterdir()):
        raise ConfigError(
            f"run folder {run_dir} already holds checkpoints: pass resume={run_dir} to "
            "continue it, or out_dir=... for a new run"
        )
    run_dir.mkdir(parents=True, exist_ok=True)
    write_text(run_dir / "config.yaml", to_yaml(cfg))
    return run_dir


def resolve_resume(cfg: DictConfig) -> tuple[DictConfig, int | None]:
    """The config a run trains with and, where it extends a resumed run, the old budget
    in env steps (else None). A new run keeps ``cfg``; a resumed one (``cfg.resume``) its
    saved config with the resumable overrides of ``cfg`` and a budget raised to ``cfg``'s."""
    if not cfg.resume:
        return cfg, None
    run_dir = Path(cfg.resume)
    saved = load_run_config(run_dir)
    check_resume_config(saved, cfg)
    extended_from = None
    if int(cfg.algo.total_timesteps) != int(saved.algo.total_timesteps):
        extended_from = int(saved.algo.total_timesteps)
        saved = extend_budget(saved, int(cfg.algo.total_timesteps))
    for k in RESUMABLE_OVERRIDES:
        if k != "resume":
            saved[k] = cfg[k]
    saved.resume = str(run_dir)
    return saved, extended_from


def check_resume_config(saved: DictConfig, requested: DictConfig) -> None:
    """A resumed run keeps its saved config; refuse overrides that would change it."""
    a = OmegaConf.to_container(saved, resolve=True)
    b = OmegaConf.to_container(requested, resolve=True)

    def walk(x, y, prefix=""):
        for k in sorted(set(x) | set(y)):
            key = f"{prefix}{k}"
            if key.split(".")[0] in RESUMABLE_OVERRIDES or key == "out_dir":
                continue
            xv, yv = x.get(k), y.get(k)
            # a larger budget extends the run (extend_budget), which sets schedule_timesteps
            if key == "algo.total_timesteps" or (key == "algo.schedule_timesteps" and yv is None):
                continue
            if isinstance(xv, dict) and isinstance(yv, dict):
                walk(xv, yv, key + ".")
            elif xv != yv:
                raise ConfigError(
                    f"resume: config key '{key}' is {yv!r} but the run being resumed used {xv!r} "
                    "(its config.yaml); a resumed run keeps its config: give the command the run "
                    "was started with, overrides included, plus resume=, or start a new run"
                )

    walk(a, b)


def extend_budget(saved: DictConfig, total: int) -> DictConfig:
    """``saved`` (a run's config) with its budget raised to ``total`` env steps, keeping
    the schedules the run has followed: epsilon still anneals over its share of the old
    budget (``algo.schedule_timesteps``), so the extended run is the run a fresh start
    with the returned config would make. A ConfigError where that cannot be."""
    old = int(saved.algo.total_timesteps)
    if total < old:
        raise ConfigError(
            f"resume: algo.total_timesteps={total} is less than the {old} of the run being "
            "resumed; a run can be extended, not shortened"
        )
    if total == old:
        return saved
    # an extended run would go on at learning rate 0 past the old budget
    for key in algo_spec(saved.algo.name).budget_annealed_lr:
        if saved.algo.get(key):
            raise ConfigError(
                f"resume: cannot extend the run from {old} to {total} env steps: its "
                f"algo.{key} anneals the learning rate to 0 at {old}; start a new run with "
                f"algo.total_timesteps={total}"
            )
    cfg = saved.copy()
    cfg.algo.total_timesteps = total
    if "schedule_timesteps" in cfg.algo and cfg.algo.schedule_timesteps is None:
        cfg.algo.schedule_timesteps = old
    return cfg


def chunk_lengths(done: int, total: int, chunk: int) -> list[int]:
    """The updates of each chunk from ``done`` to ``total``: chunks end on multiples of
    ``chunk`` (the last one at ``total``), so a resumed or extended run logs, evaluates
    and checkpoints at the update counts a fresh run does."""
    lengths = []
    while done < total:
        n = min(chunk - done % chunk, total - done)
        lengths.append(n)
        done += n
    return lengths

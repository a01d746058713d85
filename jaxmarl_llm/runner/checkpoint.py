"""Orbax checkpoints of the whole train state: the manager a run writes with, a restore
that checks every array's shape and dtype first, and ``load_trained`` (a finished or
stopped run's env, learner and latest state, for evaluation and analysis)."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

import jax
import orbax.checkpoint as ocp
from omegaconf import DictConfig

from jaxmarl_llm.errors import ConfigError
from jaxmarl_llm.runner.build import make_env, make_shaper_and_learner, seed_keys
from jaxmarl_llm.runner.resume import load_run_config


def checkpoint_manager(path: Path, **options) -> ocp.CheckpointManager:
    """A manager that can read its items' metadata (for restore_checkpoint's check)."""
    return ocp.CheckpointManager(
        path.absolute(),
        options=ocp.CheckpointManagerOptions(**options),
        item_handlers=ocp.StandardCheckpointHandler(),
    )


def save_checkpoint(mgr: ocp.CheckpointManager, step: int, state: Any) -> None:
    """Save ``state`` at ``step`` and wait until it is on disk."""
    mgr.save(step, args=ocp.args.StandardSave(state))
    mgr.wait_until_finished()


def _path_names(path) -> tuple[str, ...]:
    """A pytree path as plain names, so that a checkpoint's metadata (nested dicts) and
    the train state (dataclasses) compare."""

    def name(entry) -> str:
        for attr in ("key", "name", "idx"):
            if hasattr(entry, attr):
                return str(getattr(entry, attr))
        return str(entry)

    return tuple(name(e) for e in path)


def _leaf_specs(tree: Any) -> dict[tuple[str, ...], tuple[tuple[int, ...], str]]:
    """``{path: (shape, dtype)}`` of a tree's array leaves."""
    return {
        _path_names(path): (tuple(leaf.shape), str(leaf.dtype))
        for path, leaf in jax.tree_util.tree_flatten_with_path(tree)[0]
    }


def restore_checkpoint(mgr: ocp.CheckpointManager, step: int, abstract: Any, run_dir: Path):
    """The checkpoint at ``step`` restored into ``abstract``'s structure, or a ConfigError
    naming the arrays that differ (a checkpoint written by another version of the code or
    config) before anything is read; the checkpoint itself is left as it is."""
    saved = _leaf_specs(mgr.item_metadata(step))
    wanted = _leaf_specs(abstract)
    show = lambda path: ".".join(path)
    problems = [f"{show(p)} is only in the checkpoint" for p in saved.keys() - wanted.keys()]
    problems += [f"{show(p)} is missing from the checkpoint" for p in wanted.keys() - saved.keys()]
    problems += [
        f"{show(p)} is {saved[p][0]} {saved[p][1]} in the checkpoint, {wanted[p][0]} "
        f"{wanted[p][1]} now"
        for p in sorted(saved.keys() & wanted.keys())
        if saved[p] != wanted[p]
    ]
    if problems:
        more = f" (and {len(problems) - 5} more)" if len(problems) > 5 else ""
        raise ConfigError(
            f"{run_dir}: the checkpoint at update {step} does not fit the train state this "
            f"code and config build: {'; '.join(sorted(problems)[:5])}{more}. It was written "
            "by another version of the code; load it with that version, or start a new run "
            "in another out_dir"
        )
    # Read in the checkpoint's own tree structure, then place every array by its path: a
    # field the code added since, empty (None) in this run, has no leaves and no entry
    # in an older checkpoint, and orbax refuses a target whose structure differs.
    meta = mgr.item_metadata(step)
    meta = getattr(meta, "tree", meta)
    wanted_leaves = {
        _path_names(path): leaf for path, leaf in jax.tree_util.tree_flatten_with_path(abstract)[0]
    }
    target = jax.tree_util.tree_map_with_path(lambda p, _: wanted_leaves[_path_names(p)], meta)
    restored = mgr.restore(step, args=ocp.args.StandardRestore(target))
    got = {
        _path_names(path): leaf for path, leaf in jax.tree_util.tree_flatten_with_path(restored)[0]
    }
    return jax.tree_util.tree_map_with_path(lambda p, _: got[_path_names(p)], abstract)


def restore_latest(mgr: ocp.CheckpointManager, like: Any, run_dir: Path) -> tuple[Any, int]:
    """A resumed run's latest checkpoint restored into ``like``'s structure (a freshly
    initialised train state), and the update count it was saved at."""
    latest = mgr.latest_step()
    if latest is None:
        raise ConfigError(f"resume: {run_dir} has no checkpoint to continue from")
    abstract = jax.tree.map(ocp.utils.to_shape_dtype_struct, like)
    return restore_checkpoint(mgr, latest, abstract, run_dir), int(latest)


@dataclass
class TrainedRun:
    cfg: DictConfig
    env: Any
    learner: Any
    state: Any  # the train state of every seed, leaves [seeds, ...]
    updates: int  # updates done at the checkpoint


def load_trained(run_dir: Path) -> TrainedRun:
    """Rebuild a run's env, shaper and learner and restore its latest checkpoint, whole,
    on this process's first device (whatever devices the run trained on)."""
    run_dir = Path(run_dir)
    cfg = load_run_config(run_dir)
    env = make_env(cfg)
    _, learner = make_shaper_and_learner(cfg, env, run_dir)
    # without a sharding, orbax would restore onto the devices the run was saved from
    device = jax.sharding.SingleDeviceSharding(jax.local_devices()[0])
    abstract = jax.tree.map(
        lambda x: jax.ShapeDtypeStruct(x.shape, x.dtype, sharding=device),
        jax.eval_shape(jax.vmap(learner.init), seed_keys(cfg)),
    )
    ckpt = (run_dir / "checkpoints").absolute()
    if not ckpt.is_dir():
        raise ConfigError(f"{run_dir} has no checkpoints/ folder to load")
    with checkpoint_manager(ckpt) as mgr:
        step = mgr.latest_step()
        if step is None:
            raise ConfigError(f"{run_dir} has no checkpoint to load")
        state = restore_checkpoint(mgr, step, abstract, run_dir)
    return TrainedRun(cfg=cfg, env=env, learner=learner, state=state, updates=int(step))

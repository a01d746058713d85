"""The chunked host loop shared by every experiment.

A jitted, seed-vmapped function runs ``log_every`` updates under ``lax.scan``; between
chunks the host writes metrics, checkpoints, the progress bar and wandb. Nothing host
side runs inside the scan. A run folder holds::

    config.yaml     the resolved config
    metrics.csv     one row per update: env steps, per-seed return / win rate, losses, steps/s
    summary.json    final return mean/std over seeds, env steps, wall and compile time
    eval.csv        greedy evaluations (``eval.every`` > 0): one row per evaluation
    curve.png       return against env steps, mean and min-max over seeds
    win_curve.png   the same for the win rate, where the env reports wins
    compare/        runs of ``compare_with`` (baselines) with the same seeds, and
    comparison.png  every curve in one plot
    checkpoints/    orbax checkpoints of the whole train state (resume=RUN_DIR continues)
"""

from __future__ import annotations

import csv
import json
import math
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import jax
import numpy as np
import orbax.checkpoint as ocp
from omegaconf import DictConfig, OmegaConf

import envs
from jaxmarl_llm.config import to_yaml
from jaxmarl_llm.errors import ConfigError
from jaxmarl_llm.learners import algo_spec, make_learner, run_chunk
from jaxmarl_llm.learners.base import check_train_state
from jaxmarl_llm.learners.evaluation import make_evaluate
from jaxmarl_llm.plotting import plot_run, plot_runs
from jaxmarl_llm.shaping.feedback import check_feedback, due_round
from jaxmarl_llm.shaping.registry import ShaperContext, build_shaper

PER_SEED_METRICS = ("episode_return", "win_rate", "eval_return", "eval_win_rate")
# Keys a resumed run may change; anything else must match the run being resumed.
RESUMABLE_OVERRIDES = ("resume", "progress", "plot", "wandb")


@dataclass
class RunResult:
    run_dir: Path
    summary: dict
    state: Any = field(repr=False, default=None)


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
                    f"resume: config key '{key}' is {yv!r} but the run being resumed used {xv!r}; "
                    "a resumed run keeps its config (drop the override or start a new run)"
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


def _checkpoints(path: Path, **options) -> ocp.CheckpointManager:
    """A manager that can read its items' metadata (for restore_checkpoint's check)."""
    return ocp.CheckpointManager(
        path.absolute(),
        options=ocp.CheckpointManagerOptions(**options),
        item_handlers=ocp.StandardCheckpointHandler(),
    )


class MetricsWriter:
    """Appends one CSV row per update; on resume, drops rows past the checkpoint."""

    def __init__(self, path: Path, keep_updates: int | None):
        self.path = path
        self.header: list[str] | None = None
        if keep_updates is not None and path.exists():
            with path.open() as f:
                rows = list(csv.reader(f))
            if rows:
                self.header = rows[0]
                kept = [r for r in rows[1:] if int(r[0]) <= keep_updates]
                with path.open("w", newline="") as f:
                    csv.writer(f).writerows([self.header, *kept])
        elif path.exists():
            path.unlink()

    def write(self, rows: list[dict]) -> None:
        if not rows:
            return
        if self.header is None:
            self.header = list(rows[0])
            with self.path.open("w", newline="") as f:
                csv.writer(f).writerow(self.header)
        with self.path.open("a", newline="") as f:
            w = csv.writer(f)
            for r in rows:
                w.writerow([_fmt(r.get(k, float("nan"))) for k in self.header])


def _fmt(x) -> str:
    if isinstance(x, (int, np.integer)):
        return str(int(x))
    return f"{float(x):.6g}"


def metric_rows(
    metrics: dict, first_update: int, steps_per_update: int, wall_s: float, sps: float
) -> list[dict]:
    """Per-update rows from chunk metrics shaped ``[seeds, updates]``."""
    num_updates = next(iter(metrics.values())).shape[1]
    rows = []
    for u in range(num_updates):
        update = first_update + u + 1
        row = {
            "update": update,
            "env_steps": update * steps_per_update,
            "wall_s": wall_s,
            "steps_per_s": sps,
        }
        for k, v in metrics.items():
            col = np.asarray(v[:, u], float)
            row[k] = float(np.nanmean(col)) if not np.all(np.isnan(col)) else float("nan")
            if k in PER_SEED_METRICS:
                for s, x in enumerate(col):
                    row[f"{k}/seed{s}"] = float(x)
        rows.append(row)
    return rows


def final_values(
    csv_path: Path, metric: str = "episode_return", fraction: float = 0.1
) -> np.ndarray:
    """Per-seed mean of ``metric`` over its last ``fraction`` of logged values.

    Updates in which no episode ended log NaN; they are skipped, so each seed averages
    its last ``ceil(fraction * rows)`` real values (at least one).
    """
    with csv_path.open() as f:
        rows = list(csv.DictReader(f))
    cols = [c for c in rows[0] if c.startswith(f"{metric}/seed")] if rows else []
    k = max(1, math.ceil(len(rows) * fraction))
    out = []
    for c in cols:
        vals = [float(r[c]) for r in rows if not math.isnan(float(r[c]))]
        out.append(float(np.mean(vals[-k:])) if vals else float("nan"))
    return np.array(out)


class _Wandb:
    def __init__(self, cfg: DictConfig, run_dir: Path):
        self.run = None
        mode = str(getattr(cfg.wandb.mode, "value", cfg.wandb.mode))
        if mode == "disabled":
            return
        try:
            import wandb
        except ImportError as e:
            raise ConfigError(
                f"wandb.mode={mode} needs wandb: pip install 'jaxmarl_llm[wandb]'"
            ) from e
        self.run = wandb.init(
            project=cfg.wandb.project,
            entity=cfg.wandb.entity,
            name=cfg.name,
            mode=mode,
            dir=str(run_dir),
            tags=list(cfg.wandb.tags),
            config=OmegaConf.to_container(cfg, resolve=True),
            resume="allow",
            id=run_dir.name,
        )

    def log(self, rows: list[dict]) -> None:
        if self.run is not None:
            for r in rows:
                self.run.log(
                    {k: v for k, v in r.items() if not _isnan(v)}, step=int(r["env_steps"])
                )

    def finish(self) -> None:
        if self.run is not None:
            self.run.finish()


def _isnan(v) -> bool:
    return isinstance(v, float) and math.isnan(v)


def _progress(total: int, initial: int, enabled: bool):
    from tqdm.auto import tqdm

    return tqdm(
        total=total,
        initial=initial,
        unit="step",
        unit_scale=True,
        disable=not enabled,
        dynamic_ncols=True,
        desc="train",
    )


def make_env(cfg: DictConfig) -> envs.ArrayEnv:
    """``cfg.env``'s environment; a ConfigError naming ``env.kwargs`` where the
    environment refuses its kwargs (an unknown kwarg, or a value it does not accept)."""
    kwargs = OmegaConf.to_container(cfg.env.kwargs, resolve=True)
    try:
        return envs.make_array_env(cfg.env.name, **kwargs)
    except ValueError as e:  # the registry reports an unknown kwarg as one too
        raise ConfigError(f"bad value for config key 'env.kwargs' ({kwargs}): {e}") from e


def run_experiment(
    cfg: DictConfig,
    on_chunk: Callable[[int, Any, list[dict]], None] | None = None,
) -> RunResult:
    """Train ``cfg`` to completion (or continue ``cfg.resume``) and write the run folder.

    ``on_chunk(updates_done, state, rows)`` is called after each chunk is logged and
    checkpointed (tests use it to interrupt a run).
    """
    extended_from = None  # the old budget, where a resume extends the run
    if cfg.resume:
        run_dir = Path(cfg.resume)
        saved = load_run_config(run_dir)
        check_resume_config(saved, cfg)
        if int(cfg.algo.total_timesteps) != int(saved.algo.total_timesteps):
            extended_from = int(saved.algo.total_timesteps)
            saved = extend_budget(saved, int(cfg.algo.total_timesteps))
        for k in RESUMABLE_OVERRIDES:
            if k != "resume":
                saved[k] = cfg[k]
        cfg = saved
        cfg.resume = str(run_dir)
    # a bad env kwarg stops the run before its folder is written (the algo block was
    # checked when the config was built)
    env = make_env(cfg)
    if not cfg.resume:
        run_dir = Path(cfg.out_dir) if cfg.out_dir else default_run_dir(cfg)
        if (run_dir / "checkpoints").exists() and any((run_dir / "checkpoints").iterdir()):
            raise ConfigError(
                f"run folder {run_dir} already holds checkpoints: pass resume={run_dir} to "
                "continue it, or out_dir=... for a new run"
            )
        run_dir.mkdir(parents=True, exist_ok=True)
        (run_dir / "config.yaml").write_text(to_yaml(cfg))

    shaper = build_shaper(cfg.shaping, env, ShaperContext(run_dir=run_dir, seed=int(cfg.seed)))
    learner = make_learner(cfg.algo, env, shaper)
    steps_per_update = learner.env_steps_per_update
    total_updates = learner.num_updates
    chunk = int(cfg.log_every)
    feedback = shaper.feedback
    if feedback is not None and feedback.rounds:
        check_feedback(feedback, chunk, cfg.algo.name, int(cfg.algo.num_envs))
        collect = jax.jit(jax.vmap(learner.collect, in_axes=(0, 0, None)), static_argnums=2)

    evaluate = _make_evaluate(cfg, env, learner)
    init = jax.jit(jax.vmap(learner.init))
    chunk_fns: dict[int, Any] = {}

    def chunk_fn(n: int):
        if n not in chunk_fns:
            chunk_fns[n] = jax.jit(jax.vmap(lambda s: run_chunk(learner, s, n)), donate_argnums=0)
        return chunk_fns[n]

    keys = jax.random.split(jax.random.PRNGKey(cfg.seed), cfg.num_seeds)
    t_compile = time.perf_counter()
    state = init(keys)
    check_train_state(state, cfg.algo.name)
    mgr = _checkpoints(run_dir / "checkpoints", max_to_keep=cfg.keep_checkpoints, create=True)
    done_updates = 0
    if cfg.resume:
        latest = mgr.latest_step()
        if latest is None:
            raise ConfigError(f"resume: {run_dir} has no checkpoint to continue from")
        abstract = jax.tree.map(ocp.utils.to_shape_dtype_struct, state)
        state = restore_checkpoint(mgr, latest, abstract, run_dir)
        done_updates = int(latest)
        if extended_from is not None:
            (run_dir / "config.yaml").write_text(to_yaml(cfg))
            # the run is unfinished again: a kill from here on must not leave the shorter
            # run's summary to be taken for this one's
            (run_dir / "summary.json").unlink(missing_ok=True)
    writer = MetricsWriter(run_dir / "metrics.csv", done_updates if cfg.resume else None)

    # Compile every chunk length the loop will use up front, so the timed loop measures
    # training only.
    for n in set(chunk_lengths(done_updates, total_updates, chunk)):
        chunk_fns[n] = chunk_fn(n).lower(state).compile()
    if evaluate is not None:
        evaluate = evaluate.lower(state, _eval_keys(cfg, 0)).compile()
    compile_s = time.perf_counter() - t_compile
    eval_writer = MetricsWriter(run_dir / "eval.csv", done_updates if cfg.resume else None)

    logger = _Wandb(cfg, run_dir)
    bar = _progress(total_updates * steps_per_update, done_updates * steps_per_update, cfg.progress)
    run_s = 0.0
    feedback_s = 0.0
    run_steps = 0
    wall0 = time.perf_counter()
    last_return = float("nan")
    eval_s = 0.0
    if extended_from is not None and done_updates == extended_from // steps_per_update:
        # a round due at the old budget's last update was skipped as the run ended there
        round_index = due_round(feedback, done_updates, total_updates)
        if round_index is not None:
            t1 = time.perf_counter()
            state = _feedback_round(cfg, feedback, collect, state, round_index, run_dir)
            feedback_s += time.perf_counter() - t1
            # the checkpoint there predates the round: replace it, so that a kill before
            # the next one resumes with the round held
            mgr.delete(done_updates)
            mgr.save(done_updates, args=ocp.args.StandardSave(state))
            mgr.wait_until_finished()
    try:
        while done_updates < total_updates:
            n = min(chunk - done_updates % chunk, total_updates - done_updates)
            t0 = time.perf_counter()
            state, metrics = chunk_fn(n)(state)
            metrics = jax.device_get(metrics)
            dt = time.perf_counter() - t0
            run_s += dt
            run_steps += n * steps_per_update
            sps = n * steps_per_update / dt
            rows = metric_rows(
                metrics, done_updates, steps_per_update, time.perf_counter() - wall0, sps
            )
            done_updates += n
            writer.write(rows)
            logger.log(rows)
            returns = [r["episode_return"] for r in rows if not _isnan(r.get("episode_return"))]
            if returns:
                last_return = returns[-1]
            postfix = {"return": f"{last_return:.3g}", "sps": f"{sps:,.0f}"}
            if "win_rate" in rows[-1] and not _isnan(rows[-1]["win_rate"]):
                postfix["win"] = f"{rows[-1]['win_rate']:.2f}"
            if evaluate is not None and (
                done_updates % (chunk * cfg.eval.every) == 0 or done_updates >= total_updates
            ):
                t1 = time.perf_counter()
                row = eval_row(
                    jax.device_get(evaluate(state, _eval_keys(cfg, done_updates))),
                    done_updates,
                    steps_per_update,
                )
                eval_s += time.perf_counter() - t1
                eval_writer.write([row])
                logger.log([row])
                postfix["eval"] = f"{row['eval_return']:.3g}"
            bar.set_postfix(postfix, refresh=False)
            bar.update(n * steps_per_update)
            round_index = due_round(feedback, done_updates, total_updates)
            if round_index is not None:
                t1 = time.perf_counter()
                state = _feedback_round(cfg, feedback, collect, state, round_index, run_dir)
                feedback_s += time.perf_counter() - t1
            after_chunk = getattr(feedback, "after_chunk", None)
            if after_chunk is not None:
                state = state.replace(
                    shaper_params=after_chunk(done_updates, state.shaper_params, metrics)
                )
            if done_updates % (chunk * cfg.checkpoint_every) == 0 or done_updates >= total_updates:
                mgr.save(done_updates, args=ocp.args.StandardSave(state))
                mgr.wait_until_finished()
            if on_chunk is not None:
                on_chunk(done_updates, state, rows)
    except BaseException:
        # a failure between checkpoints (a backend error in a feedback round, Ctrl-C)
        # keeps the chunks finished since the last one; the state is the last whole chunk's
        if done_updates > 0 and done_updates not in mgr.all_steps():
            mgr.save(done_updates, args=ocp.args.StandardSave(state))
            mgr.wait_until_finished()
            print(f"saved a checkpoint at update {done_updates}: resume={run_dir}", file=sys.stderr)
        raise
    finally:
        bar.close()
        mgr.wait_until_finished()
        mgr.close()
        logger.finish()

    finals = final_values(run_dir / "metrics.csv")
    summary = {
        "name": cfg.name,
        "algo": cfg.algo.name,
        "env": cfg.env.name,
        "num_seeds": int(cfg.num_seeds),
        "final_return_mean": float(np.nanmean(finals)) if finals.size else None,
        "final_return_std": float(np.nanstd(finals)) if finals.size else None,
        "final_return_per_seed": [float(x) for x in finals],
        "env_steps": int(done_updates * steps_per_update),
        "env_steps_per_seed": int(done_updates * steps_per_update),
        "env_steps_all_seeds": int(done_updates * steps_per_update * cfg.num_seeds),
        "wall_s": time.perf_counter() - wall0 + compile_s,
        "compile_s": compile_s,
        "run_s": run_s,
        "feedback_s": feedback_s,  # online shaper refits between chunks (not in run_s)
        "eval_s": eval_s,  # greedy evaluations between chunks (not in run_s)
        # all seeds together; per-seed throughput is this divided by num_seeds
        "env_steps_per_s": run_steps * cfg.num_seeds / run_s if run_s else None,
        "device": str(jax.devices()[0]),
    }
    wins = final_values(run_dir / "metrics.csv", "win_rate")
    if wins.size:
        summary["final_win_rate_mean"] = float(np.nanmean(wins))
        summary["final_win_rate_per_seed"] = [float(x) for x in wins]
    summary.update(final_eval(run_dir / "eval.csv"))
    (run_dir / "summary.json").write_text(json.dumps(summary, indent=2))
    if cfg.plot:
        plot_run(run_dir)
        if "final_win_rate_mean" in summary:
            plot_run(run_dir, "win_rate", "win_curve.png")
    if cfg.compare_with:
        summary["compare"] = run_comparisons(cfg, run_dir)
        (run_dir / "summary.json").write_text(json.dumps(summary, indent=2))
    return RunResult(run_dir=run_dir, summary=summary, state=state)


@dataclass
class TrainedRun:
    cfg: DictConfig
    env: Any
    learner: Any
    state: Any  # the train state of every seed, leaves [seeds, ...]
    updates: int  # updates done at the checkpoint


def load_trained(run_dir: Path) -> TrainedRun:
    """Rebuild a run's env, shaper and learner and restore its latest checkpoint."""
    run_dir = Path(run_dir)
    cfg = load_run_config(run_dir)
    env = make_env(cfg)
    shaper = build_shaper(cfg.shaping, env, ShaperContext(run_dir=run_dir, seed=int(cfg.seed)))
    learner = make_learner(cfg.algo, env, shaper)
    keys = jax.random.split(jax.random.PRNGKey(cfg.seed), cfg.num_seeds)
    abstract = jax.eval_shape(jax.vmap(learner.init), keys)
    ckpt = (run_dir / "checkpoints").absolute()
    if not ckpt.is_dir():
        raise ConfigError(f"{run_dir} has no checkpoints/ folder to load")
    with _checkpoints(ckpt) as mgr:
        step = mgr.latest_step()
        if step is None:
            raise ConfigError(f"{run_dir} has no checkpoint to load")
        state = restore_checkpoint(mgr, step, abstract, run_dir)
    return TrainedRun(cfg=cfg, env=env, learner=learner, state=state, updates=int(step))


def _make_evaluate(cfg: DictConfig, env, learner):
    """The jitted, seed-vmapped greedy evaluation, or None when ``eval.every`` is 0."""
    if not cfg.eval.every:
        return None
    if learner.policy is None:
        raise ConfigError(
            f"eval.every={cfg.eval.every}: algo {cfg.algo.name!r} has no greedy policy to "
            "evaluate; set eval.every=0"
        )
    fn = make_evaluate(env, learner.policy, int(cfg.eval.episodes), int(cfg.eval.max_steps))
    return jax.jit(jax.vmap(fn))


def _eval_keys(cfg: DictConfig, updates_done: int) -> jax.Array:
    """Evaluation keys per seed, fixed by the seed and the update count (so a resumed
    run evaluates exactly as an uninterrupted one)."""
    key = jax.random.fold_in(jax.random.PRNGKey(cfg.seed), 0xE7A1)
    return jax.random.split(jax.random.fold_in(key, updates_done), cfg.num_seeds)


def eval_row(metrics: dict, updates_done: int, steps_per_update: int) -> dict:
    """One ``eval.csv`` row from evaluation metrics shaped ``[seeds]``."""
    row = {"update": updates_done, "env_steps": updates_done * steps_per_update}
    for k, v in metrics.items():
        col = np.asarray(v, float)
        row[k] = float(np.nanmean(col)) if not np.all(np.isnan(col)) else float("nan")
        if k in PER_SEED_METRICS:
            for s, x in enumerate(col):
                row[f"{k}/seed{s}"] = float(x)
    return row


def final_eval(csv_path: Path) -> dict:
    """The last greedy evaluation of a run as summary fields (none without ``eval.csv``)."""
    if not csv_path.exists():
        return {}
    with csv_path.open() as f:
        rows = list(csv.DictReader(f))
    if not rows:
        return {}
    last = rows[-1]
    out = {"final_eval_env_steps": int(last["env_steps"])}
    for metric in ("eval_return", "eval_win_rate"):
        seeds = [float(last[c]) for c in last if c.startswith(f"{metric}/seed")]
        if seeds:
            out[f"final_{metric}_mean"] = float(np.nanmean(seeds))
            out[f"final_{metric}_per_seed"] = seeds
    return out


def _feedback_round(cfg, feedback, collect, state, round_index: int, run_dir: Path):
    """Play each seed's policy, let ``feedback`` refit the shaper, put the result in the
    state; the round's report goes to ``feedback.json`` (by round, so a resumed run that
    repeats a round replaces its entry)."""
    keys = jax.random.split(
        jax.random.fold_in(jax.random.PRNGKey(cfg.seed), 0xFEED + round_index), cfg.num_seeds
    )
    batch = collect(state, keys, int(feedback.collect_steps))
    params, report = feedback.refit(round_index, batch, state.shaper_params)
    state = state.replace(shaper_params=params)
    path = run_dir / "feedback.json"
    rounds = json.loads(path.read_text()) if path.exists() else {}
    rounds[str(round_index)] = report
    path.write_text(json.dumps(rounds, indent=2))
    return state


def finished_summary(config: str, overrides: list[str], out: Path) -> dict | None:
    """The summary of the run in ``out`` if it finished ``config`` with ``overrides``'
    budget (or a larger one), else None."""
    from jaxmarl_llm.config import load_config

    out = Path(out)
    if not (out / "summary.json").exists():
        return None
    wanted = load_config(config, overrides).algo.total_timesteps
    if wanted > load_run_config(out).algo.total_timesteps:
        return None
    return json.loads((out / "summary.json").read_text())


def run_into(config: str, overrides: list[str], out: Path, note: str | None = None) -> dict:
    """Run ``config`` (a name or YAML path) with ``overrides`` into ``out`` and return its
    summary: a finished run there is reused, a killed one resumed, else it starts."""
    from jaxmarl_llm.config import load_config

    out = Path(out)
    if (summary := finished_summary(config, overrides, out)) is not None:
        return summary
    # a finished run with a smaller budget than asked for is extended (resume) below
    ckpt = out / "checkpoints"
    where = f"resume={out}" if ckpt.exists() and any(ckpt.iterdir()) else f"out_dir={out}"
    if note:
        print(note, flush=True)
    return run_experiment(load_config(config, [*overrides, where])).summary


def run_comparisons(cfg: DictConfig, run_dir: Path) -> dict[str, dict]:
    """Run (or resume, or reuse) each of ``cfg.compare_with`` with this run's seeds and
    env-step budget."""
    dirs = {cfg.name: run_dir}
    finals = {}
    for other in cfg.compare_with:
        out = run_dir / "compare" / Path(other).stem
        overrides = [
            f"num_seeds={cfg.num_seeds}",
            f"seed={cfg.seed}",
            f"algo.total_timesteps={cfg.algo.total_timesteps}",
            f"progress={cfg.progress}",
            f"plot={cfg.plot}",
            "compare_with=[]",
        ]
        summary = run_into(other, overrides, out, f"comparison: {other} -> {out}")
        dirs[summary["name"]] = out
        finals[str(other)] = {
            k: summary.get(k)
            for k in ("name", "algo", "final_return_mean", "final_return_std", "env_steps")
        }
    if cfg.plot:
        plot_runs(dirs, run_dir / "comparison.png", title=f"{cfg.env.name}")
    return finals

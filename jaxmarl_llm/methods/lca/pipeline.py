"""LCA before training: sample pairs, rank them per agent, fit the state-scoring models.

``prepare(env, cfg, seed, artifact_dir)`` returns the reward model, its parameters and
a report (label accuracy against the heuristic, model accuracy on held-out pairs, how
the labels were obtained). With an ``artifact_dir`` everything is written there
(``pairs.npz``, ``reward_model.msgpack``, ``report.json``) under a fingerprint of the
settings, so a rerun or a resumed run reuses it instead of labelling and fitting again;
language-model answers are also kept one by one in the label store, so a run killed
during labelling asks only for what is missing.
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
import math
import time
from pathlib import Path
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np
from flax import serialization, struct

from envs.array_env import ArrayEnv
from envs.capabilities import RankingHeuristic, StateDescriber, require
from envs.credit import CreditAssignmentEnv
from jaxmarl_llm import preferences as prefs
from jaxmarl_llm.errors import RunError
from jaxmarl_llm.lm.labeling import LabelingPolicy
from jaxmarl_llm.methods.lca.answers import TeamGoal
from jaxmarl_llm.methods.lca.config import LCAConfig
from jaxmarl_llm.methods.lca.labels import (
    TextQuery,
    backend_labels,
    heuristic_labels,
    heuristic_values,
    label_accuracy,
)
from jaxmarl_llm.methods.lca.on_path import model_score, on_path_agreement
from jaxmarl_llm.methods.lca.pairs import both_states, sample_transitions
from jaxmarl_llm.methods.lca.potential import PotentialParams, role_groups
from jaxmarl_llm.methods.lca.team_goal import GOAL_FILE, infer_team_goal
from jaxmarl_llm.transitions import TransitionBatch

ARTIFACT_VERSION = 2  # 2: pairs.npz holds the features (online rounds refit on them)
ON_PATH_SEED = 0  # the same scripted starts for every run's on-path agreement


@dataclasses.dataclass
class LCAResult:
    model: prefs.RewardModel
    params: PotentialParams
    report: dict[str, Any]
    data: PairData  # the labelled pairs the model was fitted on


def reward_model(env: CreditAssignmentEnv, cfg: LCAConfig) -> prefs.RewardModel:
    return prefs.RewardModel(
        hidden=tuple(cfg.hidden),
        ensemble_size=1,
        num_agents=len(env.roles),
        agent_groups=role_groups(env),
    )


def fingerprint(env: ArrayEnv, cfg: LCAConfig, seed: int) -> str:
    raw = env.env
    lca = {k: v for k, v in dataclasses.asdict(cfg).items() if not k.startswith("online_")}
    if cfg.team_goal == "written":  # the prompts of every run made before the option
        lca = {k: v for k, v in lca.items() if k not in ("team_goal", "goal_max_tokens")}
    if cfg.pair_source != "completion":  # the horizon draws nothing for the other sources
        lca.pop("completion_horizon")
    ident = {
        "version": ARTIFACT_VERSION,
        "env": type(raw).__name__,
        "env_config": {k: repr(v) for k, v in sorted(vars(raw).items()) if _plain(v)},
        # online rounds come after this model: changing them must not refit it
        "lca": lca,
        "seed": seed,
    }
    return hashlib.sha256(json.dumps(ident, sort_keys=True, default=str).encode()).hexdigest()[:16]


def _plain(v: Any) -> bool:
    return isinstance(v, int | float | str | bool | tuple) and len(repr(v)) < 200


def _backend(cfg: LCAConfig, artifact_dir: Path | None, goal_query: bool = False):
    """The configured backend in the label store; for ``goal_query`` the scripted one
    answers with the env's written team goal."""
    from jaxmarl_llm.lm.factory import make_backend

    store = cfg.store or (str(artifact_dir / "labels.sqlite") if artifact_dir else None)
    options = dict(cfg.backend_options)
    if cfg.backend == "scripted" and goal_query:
        options = {"teacher": "written_answer"}
    elif cfg.backend == "scripted":
        options.setdefault("teacher", "pair_choice")
        options.setdefault("noise", {"mistake": 1.0 - cfg.accuracy})
    return make_backend(cfg.backend, store=store, cache_mode=cfg.cache_mode, **options)


def inferred_goal(env: ArrayEnv, cfg: LCAConfig, seed: int, artifact_dir: Path | None) -> TeamGoal:
    """The backend's team goal for a sampled trajectory (``team_goal: infer``), its query
    and answers written to ``artifact_dir/team_goal.json``; a ``RunError`` when every
    answer was malformed."""
    backend = _backend(cfg, artifact_dir, goal_query=True)
    try:
        goal, record = infer_team_goal(
            env, backend, seed, cfg.goal_max_tokens, LabelingPolicy(cfg.max_retries)
        )
    finally:
        backend.close()
    if artifact_dir is not None:
        artifact_dir.mkdir(parents=True, exist_ok=True)
        (artifact_dir / GOAL_FILE).write_text(json.dumps(record, indent=2))
    if goal is None:
        raise RunError(
            f"the {cfg.backend!r} backend gave no team goal in the asked form after "
            f"{cfg.max_retries} retries: {record['labeling']['example_failures']}"
        )
    return goal


def label_transitions(
    env: ArrayEnv,
    cfg: LCAConfig,
    key: jax.Array,
    t: TransitionBatch,
    seed: int,
    artifact_dir: Path | None,
    progress: bool,
) -> tuple[np.ndarray, np.ndarray, dict[str, Any]]:
    """``(confidence, num_answers, info)`` ``[M, N]``: every agent's ranking of every
    transition of ``t``, from the heuristic (arrays) or the configured backend (text)."""
    raw = env.env
    info: dict[str, Any] = {"labeler": cfg.labeler, "transitions": int(t.actions.shape[0])}
    t0 = time.perf_counter()
    if cfg.labeler == "heuristic":
        conf, count = heuristic_labels(raw, key, t, cfg.accuracy, cfg.num_queries)
        conf, count = np.asarray(conf), np.asarray(count)
    else:
        goal = inferred_goal(env, cfg, seed, artifact_dir) if cfg.team_goal == "infer" else None
        if goal is not None:
            info["team_goal"] = {"goal": goal.goal, "steps": list(goal.steps)}
        backend = _backend(cfg, artifact_dir)
        query = TextQuery(
            query_mode=cfg.query_mode,
            num_queries=cfg.num_queries,
            temperature=cfg.temperature,
            max_tokens=cfg.max_tokens,
            shuffle_order=cfg.shuffle_order,
        )
        try:
            conf, count, report = backend_labels(
                raw,
                backend,
                t,
                query,
                seed=seed,
                policy=LabelingPolicy(cfg.max_retries),
                progress=progress,
                goal=goal,
            )
        finally:
            backend.close()
        info["backend"] = cfg.backend
        info["labeling"] = report.as_dict()
        if hasattr(backend, "stats"):
            info["cache"] = backend.stats()
        usage = getattr(getattr(backend, "backend", backend), "usage", None)
        if usage is not None:  # tokens and cost of an http backend
            info["usage"] = usage.as_dict()
    info["label_seconds"] = time.perf_counter() - t0
    return conf, count, info


def collect_labels(
    env: ArrayEnv,
    cfg: LCAConfig,
    key: jax.Array,
    seed: int,
    artifact_dir: Path | None,
    progress: bool,
) -> tuple[TransitionBatch, np.ndarray, np.ndarray, dict[str, Any]]:
    num_transitions = math.ceil(cfg.num_pairs / env.num_agents)
    k_pairs, k_labels = jax.random.split(key)
    t = sample_transitions(
        env,
        k_pairs,
        num_transitions,
        cfg.pair_source,
        cfg.rollout_envs,
        cfg.scripted_epsilon,
        cfg.completion_horizon,
    )
    conf, count, info = label_transitions(env, cfg, k_labels, t, seed, artifact_dir, progress)
    return t, conf, count, info


@struct.dataclass
class PairData:
    """Labelled pairs as arrays, ``[M, N, ...]``: what a state-scoring model is fitted on
    (features, answers) and checked against (the heuristic's values)."""

    features: jax.Array  # [M, N, D] agent-specific encodings of s
    next_features: jax.Array  # [M, N, D] ... of s'
    confidence: jax.Array  # [M, N] P(s' preferred) from the answers
    num_answers: jax.Array  # [M, N] (0: no usable answer)
    phi: jax.Array  # [M, N] heuristic potential of s (evaluation only)
    phi_next: jax.Array  # [M, N]
    moving: jax.Array  # [M, N] bool, the agent did not take the no-op


def pair_data(
    env: CreditAssignmentEnv, t: TransitionBatch, conf: np.ndarray, count: np.ndarray
) -> PairData:
    f, f_next = both_states(env.agent_features, t)
    phi, phi_next = heuristic_values(env, t)
    return PairData(
        features=f,
        next_features=f_next,
        confidence=jnp.asarray(conf, jnp.float32),
        num_answers=jnp.asarray(count, jnp.int32),
        phi=phi,
        phi_next=phi_next,
        moving=t.actions != env.noop_action,
    )


def concat_pairs(parts: list[PairData]) -> PairData:
    return jax.tree.map(lambda *x: jnp.concatenate(x), *parts)


def fit_pairs(
    model: prefs.RewardModel,
    params: Any,
    data: PairData,
    k_split: jax.Array,
    k_fit: jax.Array,
    cfg: LCAConfig,
    num_steps: int,
) -> tuple[PotentialParams, dict[str, jax.Array]]:
    """Fit ``model`` from ``params`` on ``data`` (pure, so it vmaps over seeds): the new
    potential parameters and the fit's metrics as arrays. ``k_split`` draws the held-out
    pairs, ``k_fit`` the minibatches."""
    pairs = prefs.per_agent_state_pairs(
        data.next_features, data.features, data.confidence, valid=data.num_answers > 0
    )
    train, val = prefs.train_val_split(k_split, pairs, cfg.val_fraction)
    fit_cfg = prefs.FitConfig(
        num_steps=num_steps,
        batch_size=cfg.batch_size,
        learning_rate=cfg.lr,
        weight_decay=cfg.weight_decay,
    )
    params, losses = prefs.fit(model, params, train, k_fit, fit_cfg)

    # Accuracy against the clean heuristic (not the possibly noisy labels it was fit on).
    phi, phi_next = data.phi.reshape(-1), data.phi_next.reshape(-1)
    clean = jnp.where(phi_next > phi, 1.0, jnp.where(phi_next < phi, 0.0, 0.5))
    score_next = model.apply_agents(params, data.next_features).reshape(-1)
    score = model.apply_agents(params, data.features).reshape(-1)
    moving = data.moving.reshape(-1)
    step = jnp.abs(score_next - score)
    mean_step = jnp.where(moving.any(), (step * moving).sum() / jnp.maximum(moving.sum(), 1), 0.0)
    if cfg.step_scale > 0:
        scale = cfg.step_scale / jnp.maximum(mean_step, cfg.min_step)
    else:
        scale = jnp.ones(())
    metrics = {
        "final_loss": losses[-50:].mean(),
        "train_pairs": train.valid.sum(),
        "val_pairs": val.valid.sum(),
        "train_accuracy_vs_heuristic": prefs.preference_accuracy(
            score_next, score, clean, train.valid
        ),
        "val_accuracy_vs_heuristic": prefs.preference_accuracy(score_next, score, clean, val.valid),
        "mean_abs_potential_step": mean_step,
        "scale": scale,
    }
    return PotentialParams(params, scale.astype(jnp.float32)), metrics


def fit_potential(
    env: ArrayEnv, cfg: LCAConfig, key: jax.Array, data: PairData
) -> tuple[prefs.RewardModel, PotentialParams, dict[str, Any]]:
    raw = env.env
    k_split, k_init, k_fit = jax.random.split(key, 3)
    model = reward_model(raw, cfg)
    params = model.init(k_init, data.features.shape[-1])
    t0 = time.perf_counter()
    potential, metrics = fit_pairs(model, params, data, k_split, k_fit, cfg, cfg.fit_steps)
    jax.block_until_ready(potential)
    report = {"fit_seconds": time.perf_counter() - t0, **_host(metrics)}
    return model, potential, report


def _host(metrics: dict[str, jax.Array]) -> dict[str, Any]:
    return {k: np.asarray(v).tolist() for k, v in metrics.items()}


def prepare(
    env: ArrayEnv,
    cfg: LCAConfig,
    seed: int = 0,
    artifact_dir: Path | None = None,
    progress: bool = True,
) -> LCAResult:
    """Labels and a fitted potential for ``env`` (loaded from ``artifact_dir`` when there)."""
    raw = require(env, RankingHeuristic, needed_by="the lca shaper")
    require(env, StateDescriber, needed_by="the lca shaper")  # the ranking prompts
    LCAConfig.check(cfg)
    model = reward_model(raw, cfg)
    fp = fingerprint(env, cfg, seed)
    if artifact_dir is not None:
        loaded = _load(artifact_dir, fp, model)
        if loaded is not None:
            return loaded
    key = jax.random.PRNGKey(seed)
    k_labels, k_fit = jax.random.split(jax.random.fold_in(key, 0x1CA))
    t, conf, count, info = collect_labels(env, cfg, k_labels, seed, artifact_dir, progress)
    data = pair_data(raw, t, conf, count)
    phi, phi_next = np.asarray(data.phi), np.asarray(data.phi_next)
    info["pairs"] = int(conf.size)
    info["answered_pairs"] = int((count > 0).sum())
    info["label_accuracy_vs_heuristic"] = label_accuracy(conf, count, phi, phi_next)
    info["heuristic_tie_fraction"] = float((phi == phi_next).mean())
    model, params, fit_report = fit_potential(env, cfg, k_fit, data)
    report = {"fingerprint": fp, **info, **fit_report}
    key = jax.random.PRNGKey(ON_PATH_SEED)
    path = on_path_agreement(env, model_score(env, model), key, params=params.model)
    if path is not None:
        report["on_path"] = path
    if artifact_dir is not None:
        _save(artifact_dir, fp, params, report, data)
    return LCAResult(model, params, report, data)


def save_pairs(path: Path, data: PairData) -> None:
    np.savez_compressed(path, **{k: np.asarray(v) for k, v in vars(data).items()})


def load_pairs(path: Path) -> PairData:
    with np.load(path) as f:
        return PairData(**{k: jnp.asarray(f[k]) for k in f.files})


def _save(d: Path, fp, params, report, data: PairData) -> None:
    d.mkdir(parents=True, exist_ok=True)
    save_pairs(d / "pairs.npz", data)
    (d / "reward_model.msgpack").write_bytes(serialization.to_bytes(params))
    (d / "report.json").write_text(json.dumps(report, indent=2))
    (d / "fingerprint").write_text(fp)


def _load(d: Path, fp: str, model: prefs.RewardModel) -> LCAResult | None:
    files = [d / n for n in ("fingerprint", "reward_model.msgpack", "report.json", "pairs.npz")]
    if not all(p.exists() for p in files) or files[0].read_text().strip() != fp:
        return None
    data = load_pairs(files[3])
    template = PotentialParams(
        model.init(jax.random.PRNGKey(0), data.features.shape[-1]), jnp.zeros((), jnp.float32)
    )
    params = serialization.from_bytes(template, files[1].read_bytes())
    report = json.loads(files[2].read_text())
    report["loaded_from"] = str(d)
    return LCAResult(model, params, report, data)

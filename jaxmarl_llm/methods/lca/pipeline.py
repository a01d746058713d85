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
from flax import serialization

from envs.array_env import ArrayEnv
from envs.credit import CreditAssignmentEnv, require_credit_env
from jaxmarl_llm import preferences as prefs
from jaxmarl_llm.lm.labeling import LabelingPolicy
from jaxmarl_llm.methods.lca.config import LCAConfig
from jaxmarl_llm.methods.lca.labels import (
    TextQuery,
    backend_labels,
    heuristic_labels,
    heuristic_values,
    label_accuracy,
)
from jaxmarl_llm.methods.lca.pairs import Transitions, both_states, sample_transitions
from jaxmarl_llm.methods.lca.potential import PotentialParams, role_groups

ARTIFACT_VERSION = 1


@dataclasses.dataclass
class LCAResult:
    model: prefs.RewardModel
    params: PotentialParams
    report: dict[str, Any]


def reward_model(env: CreditAssignmentEnv, cfg: LCAConfig) -> prefs.RewardModel:
    return prefs.RewardModel(
        hidden=tuple(cfg.hidden),
        ensemble_size=1,
        num_agents=len(env.roles),
        agent_groups=role_groups(env),
    )


def fingerprint(env: ArrayEnv, cfg: LCAConfig, seed: int) -> str:
    raw = env.env
    ident = {
        "version": ARTIFACT_VERSION,
        "env": type(raw).__name__,
        "env_config": {k: repr(v) for k, v in sorted(vars(raw).items()) if _plain(v)},
        "lca": dataclasses.asdict(cfg),
        "seed": seed,
    }
    return hashlib.sha256(json.dumps(ident, sort_keys=True, default=str).encode()).hexdigest()[:16]


def _plain(v: Any) -> bool:
    return isinstance(v, int | float | str | bool | tuple) and len(repr(v)) < 200


def _backend(cfg: LCAConfig, artifact_dir: Path | None):
    from jaxmarl_llm.lm.factory import make_backend

    store = cfg.store or (str(artifact_dir / "labels.sqlite") if artifact_dir else None)
    options = dict(cfg.backend_options)
    if cfg.backend == "scripted":
        options.setdefault("teacher", "pair_choice")
        options.setdefault("noise", {"mistake": 1.0 - cfg.accuracy})
    return make_backend(cfg.backend, store=store, cache_mode=cfg.cache_mode, **options)


def collect_labels(
    env: ArrayEnv,
    cfg: LCAConfig,
    key: jax.Array,
    seed: int,
    artifact_dir: Path | None,
    progress: bool,
) -> tuple[Transitions, np.ndarray, np.ndarray, dict[str, Any]]:
    raw = env.env
    num_transitions = math.ceil(cfg.num_pairs / env.num_agents)
    k_pairs, k_labels = jax.random.split(key)
    t = sample_transitions(
        env, k_pairs, num_transitions, cfg.pair_source, cfg.rollout_envs, cfg.scripted_epsilon
    )
    info: dict[str, Any] = {"labeler": cfg.labeler, "transitions": num_transitions}
    t0 = time.perf_counter()
    if cfg.labeler == "heuristic":
        conf, count = heuristic_labels(raw, k_labels, t, cfg.accuracy, cfg.num_queries)
        conf, count = np.asarray(conf), np.asarray(count)
    else:
        backend = _backend(cfg, artifact_dir)
        query = TextQuery(
            query_mode=cfg.query_mode,
            num_queries=cfg.num_queries,
            temperature=cfg.temperature,
            max_tokens=cfg.max_tokens,
            shuffle_order=cfg.shuffle_order,
        )
        conf, count, report = backend_labels(
            raw,
            backend,
            t,
            query,
            seed=seed,
            policy=LabelingPolicy(cfg.max_retries),
            progress=progress,
        )
        info["backend"] = cfg.backend
        info["labeling"] = report.as_dict()
        if hasattr(backend, "stats"):
            info["cache"] = backend.stats()
        backend.close()
    info["label_seconds"] = time.perf_counter() - t0
    return t, conf, count, info


def fit_potential(
    env: ArrayEnv,
    cfg: LCAConfig,
    key: jax.Array,
    t: Transitions,
    conf: np.ndarray,
    count: np.ndarray,
) -> tuple[prefs.RewardModel, PotentialParams, dict[str, Any]]:
    raw = env.env
    f, f_next = both_states(raw.agent_features, t)
    data = prefs.per_agent_state_pairs(f_next, f, jnp.asarray(conf), valid=jnp.asarray(count) > 0)
    k_split, k_init, k_fit = jax.random.split(key, 3)
    train, val = prefs.train_val_split(k_split, data, cfg.val_fraction)
    model = reward_model(raw, cfg)
    params = model.init(k_init, f.shape[-1])
    fit_cfg = prefs.FitConfig(
        num_steps=cfg.fit_steps,
        batch_size=cfg.batch_size,
        learning_rate=cfg.lr,
        weight_decay=cfg.weight_decay,
    )
    t0 = time.perf_counter()
    params, losses = prefs.fit(model, params, train, k_fit, fit_cfg)
    jax.block_until_ready(params)
    fit_s = time.perf_counter() - t0

    # Accuracy against the clean heuristic (not the possibly noisy labels it was fit on).
    phi, phi_next = heuristic_values(raw, t)
    clean = jnp.where(phi_next > phi, 1.0, jnp.where(phi_next < phi, 0.0, 0.5)).reshape(-1)
    score_next = model.apply_agents(params, f_next).reshape(-1)
    score = model.apply_agents(params, f).reshape(-1)
    moving = (t.actions != raw.noop_action).reshape(-1)
    diff = (score_next - score)[moving]
    mean_step = float(jnp.mean(jnp.abs(diff))) if diff.size else 0.0
    scale = cfg.step_scale / max(mean_step, cfg.min_step) if cfg.step_scale > 0 else 1.0
    report = {
        "fit_seconds": fit_s,
        "final_loss": float(losses[-50:].mean()),
        "train_pairs": int(train.valid.sum()),
        "val_pairs": int(val.valid.sum()),
        "train_accuracy_vs_heuristic": float(
            prefs.preference_accuracy(score_next, score, clean, train.valid)
        ),
        "val_accuracy_vs_heuristic": float(
            prefs.preference_accuracy(score_next, score, clean, val.valid)
        ),
        "mean_abs_potential_step": mean_step,
        "scale": scale,
    }
    return model, PotentialParams(params, jnp.asarray(scale, jnp.float32)), report


def prepare(
    env: ArrayEnv,
    cfg: LCAConfig,
    seed: int = 0,
    artifact_dir: Path | None = None,
    progress: bool = True,
) -> LCAResult:
    """Labels and a fitted potential for ``env`` (loaded from ``artifact_dir`` when there)."""
    raw = require_credit_env(env, "the lca shaper")
    LCAConfig.check(cfg)
    model = reward_model(raw, cfg)
    fp = fingerprint(env, cfg, seed)
    if artifact_dir is not None:
        loaded = _load(artifact_dir, fp, model, env)
        if loaded is not None:
            return loaded
    key = jax.random.PRNGKey(seed)
    k_labels, k_fit = jax.random.split(jax.random.fold_in(key, 0x1CA))
    t, conf, count, info = collect_labels(env, cfg, k_labels, seed, artifact_dir, progress)
    phi, phi_next = (np.asarray(x) for x in heuristic_values(raw, t))
    info["pairs"] = int(conf.size)
    info["answered_pairs"] = int((count > 0).sum())
    info["label_accuracy_vs_heuristic"] = label_accuracy(conf, count, phi, phi_next)
    info["heuristic_tie_fraction"] = float((phi == phi_next).mean())
    model, params, fit_report = fit_potential(env, cfg, k_fit, t, conf, count)
    report = {"fingerprint": fp, **info, **fit_report}
    if artifact_dir is not None:
        _save(artifact_dir, fp, params, report, conf, count, phi, phi_next, t)
    return LCAResult(model, params, report)


def _save(d: Path, fp, params, report, conf, count, phi, phi_next, t: Transitions) -> None:
    d.mkdir(parents=True, exist_ok=True)
    np.savez_compressed(
        d / "pairs.npz",
        confidence=conf,
        num_answers=count,
        phi=phi,
        phi_next=phi_next,
        actions=np.asarray(t.actions),
    )
    (d / "reward_model.msgpack").write_bytes(serialization.to_bytes(params))
    (d / "report.json").write_text(json.dumps(report, indent=2))
    (d / "fingerprint").write_text(fp)


def _load(d: Path, fp: str, model: prefs.RewardModel, env: ArrayEnv) -> LCAResult | None:
    files = [d / n for n in ("fingerprint", "reward_model.msgpack", "report.json")]
    if not all(p.exists() for p in files) or files[0].read_text().strip() != fp:
        return None
    raw = env.env
    feat_dim = jax.eval_shape(
        raw.agent_features, jax.eval_shape(raw.random_state, jax.random.PRNGKey(0))
    ).shape[-1]
    template = PotentialParams(
        model.init(jax.random.PRNGKey(0), feat_dim), jnp.zeros((), jnp.float32)
    )
    params = serialization.from_bytes(template, files[1].read_bytes())
    report = json.loads(files[2].read_text())
    report["loaded_from"] = str(d)
    return LCAResult(model, params, report)

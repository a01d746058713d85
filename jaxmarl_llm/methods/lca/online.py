"""Iterative LCA: rank pairs from the learner's own rollouts between training chunks.

The paper ranks one batch of pairs before training. Pairs from random play cover the
late stages of a task thinly (on Victim-Rubble the model then ranks moves after the
first rubble barely better than chance), and a team that has
learned the early stages spends its time exactly there. Each round takes pairs from the
states every seed's policy now visits, ranks them with the same labeler, and refits that
seed's model, warm, on everything ranked so far (the first batch plus this seed's rounds).
Rounds are kept in ``<run>/lca/online/round_K.npz`` so a resumed run refits identically.
"""

from __future__ import annotations

import math
import time
from pathlib import Path
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np

from envs.array_env import ArrayEnv
from jaxmarl_llm import preferences as prefs
from jaxmarl_llm.methods.lca.config import LCAConfig
from jaxmarl_llm.methods.lca.labels import label_accuracy
from jaxmarl_llm.methods.lca.on_path import model_score, on_path_agreement
from jaxmarl_llm.methods.lca.pipeline import (
    ON_PATH_SEED,
    PairData,
    concat_pairs,
    fit_pairs,
    label_transitions,
    load_pairs,
    pair_data,
    save_pairs,
)
from jaxmarl_llm.transitions import TransitionBatch


class LCAFeedback:
    """The ``Feedback`` (shaping/feedback.py) of an LCA shaper with online rounds."""

    def __init__(
        self,
        env: ArrayEnv,
        cfg: LCAConfig,
        model: prefs.RewardModel,
        first: PairData,
        seed: int,
        artifact_dir: Path | None,
        progress: bool = True,
    ):
        self.env, self.cfg, self.model, self.first = env, cfg, model, first
        self.seed, self.progress = seed, progress
        self.dir = None if artifact_dir is None else Path(artifact_dir) / "online"
        self.every = cfg.online_every
        self.rounds = cfg.online_rounds
        self.collect_steps = cfg.online_collect_steps
        self._rounds: dict[int, PairData] = {}  # round -> pairs, leaves [seeds, M, ...]
        num_steps = cfg.online_fit_steps

        def fit_one(potential, data, k_split, k_fit):
            return fit_pairs(model, potential.model, data, k_split, k_fit, cfg, num_steps)

        self._fit = jax.jit(jax.vmap(fit_one))

    def _round_path(self, index: int) -> Path | None:
        return None if self.dir is None else self.dir / f"round_{index}.npz"

    def _earlier(self, index: int) -> list[PairData]:
        out = []
        for k in range(index):
            if k not in self._rounds:
                path = self._round_path(k)
                if path is None or not path.exists():
                    raise FileNotFoundError(
                        f"LCA online round {k} is needed to refit round {index} but "
                        f"{path or 'no artifact folder'} holds no pairs for it"
                    )
                self._rounds[k] = load_pairs(path)
            out.append(self._rounds[k])
        return out

    def _sample(self, key: jax.Array, batch: TransitionBatch, seeds: int) -> TransitionBatch:
        """``ceil(online_pairs / N)`` transitions per seed, uniformly over the batch."""
        n = math.ceil(self.cfg.online_pairs / self.env.num_agents)
        flat = jax.tree.map(
            lambda x: x.reshape(seeds, -1, *x.shape[3:]),
            TransitionBatch(actions=batch.actions, state=batch.state, next_state=batch.next_state),
        )
        available = flat.actions.shape[1]
        if n > available:
            raise ValueError(
                f"online_pairs={self.cfg.online_pairs} needs {n} transitions per seed but a "
                f"round collects {available} (online_collect_steps x num_envs); raise "
                "online_collect_steps or lower online_pairs"
            )
        index = jax.vmap(lambda k: jax.random.choice(k, available, (n,), replace=False))(
            jax.random.split(key, seeds)
        )
        rows = jnp.arange(seeds)[:, None]
        return jax.tree.map(lambda x: x[rows, index], flat)

    def refit(self, round_index: int, batch: TransitionBatch, params: Any) -> tuple[Any, dict]:
        raw = self.env.env
        seeds = batch.actions.shape[0]
        earlier = self._earlier(round_index)
        key = jax.random.fold_in(jax.random.PRNGKey(self.seed), 0x0A11 + round_index)
        k_pick, k_labels, k_split, k_fit = jax.random.split(key, 4)
        t = self._sample(k_pick, batch, seeds)

        t0 = time.perf_counter()
        parts, infos = [], []
        for s in range(seeds):
            ts = jax.tree.map(lambda x, s=s: x[s], t)
            conf, count, info = label_transitions(
                self.env,
                self.cfg,
                jax.random.fold_in(k_labels, s),
                ts,
                self.seed,
                None if self.dir is None else self.dir.parent,
                self.progress,
            )
            parts.append(pair_data(raw, ts, conf, count))
            infos.append(info)
        new = jax.tree.map(lambda *x: jnp.stack(x), *parts)
        label_s = time.perf_counter() - t0
        self._rounds[round_index] = new
        path = self._round_path(round_index)
        if path is not None:
            path.parent.mkdir(parents=True, exist_ok=True)
            save_pairs(path, new)

        first = jax.tree.map(lambda x: jnp.broadcast_to(x, (seeds, *x.shape)), self.first)
        data = jax.vmap(lambda *p: concat_pairs(list(p)))(first, *earlier, new)
        t1 = time.perf_counter()
        potential, metrics = self._fit(
            params, data, jax.random.split(k_split, seeds), jax.random.split(k_fit, seeds)
        )
        jax.block_until_ready(potential)
        path_key = jax.random.PRNGKey(ON_PATH_SEED)
        paths = [
            on_path_agreement(
                self.env,
                model_score(self.env, self.model),
                path_key,
                params=jax.tree.map(lambda x, s=s: x[s], potential.model),
            )
            for s in range(seeds)
        ]
        report = {
            "pairs": int(np.asarray(new.confidence).size),
            "pairs_total_per_seed": int(np.asarray(data.confidence[0]).size),
            "label_seconds": label_s,
            "fit_seconds": time.perf_counter() - t1,
            "label_accuracy_vs_heuristic": [
                label_accuracy(
                    np.asarray(p.confidence),
                    np.asarray(p.num_answers),
                    np.asarray(p.phi),
                    np.asarray(p.phi_next),
                )
                for p in parts
            ],
            "heuristic_tie_fraction": float(np.mean(np.asarray(new.phi == new.phi_next))),
            "labeler": infos[0]["labeler"],
            **{k: np.asarray(v).tolist() for k, v in metrics.items()},
        }
        if paths[0] is not None:  # each seed's refitted potential along scripted play
            report["on_path_agreement"] = [p["agreement"] for p in paths]
            report["on_path_worst_stage"] = [p["worst_stage"] for p in paths]
        return potential, report

"""DPM's feedback rounds: pick queries, label them, refit the ensemble (between chunks).

Each round every seed's learner plays ``collect_steps`` steps of its current policy (the
runner's ``collect``). From those steps DPM builds two kinds of queries:

- trajectory comparisons: windows of ``segment_length`` steps of one env that do not
  cross an episode end, or with ``segments: episode`` whole episodes that start and end in
  the collected steps (padded to ``segment_length`` and masked), paired up and labelled by
  the teacher from their first and last states (the paper's prompt shows just those two);
- agent comparisons: single steps whose allies the teacher ranks by contribution.

With ``selection: kendall`` a candidate qualifies when the ensemble members' rankings of
its agents agree little (mean pairwise Kendall tau, averaged over a segment's steps, below
a threshold that falls over the rounds; appendix C); ``random`` draws uniformly (the
Fig. 8b ablation). The new labels join the seed's datasets (fixed capacity
``rounds x labels``, so the fit compiles once), the ensemble is refitted warm from its
current parameters, and the reward is rescaled. Each round's labelled queries are written
to ``<run>/dpm/round_K.npz`` so that a resumed run rebuilds the datasets from them.

Before fitting, the previous ensemble is scored on the new labels (``heldout_*``: unseen,
but picked because the ensemble disagrees on them, so biased low). After fitting it is
scored on 100 random unseen queries of each kind labelled by the noise-free scripted
teacher (``eval_*_agreement``: the held-out preference agreement of appendix B.1), and
``pearson_dense`` correlates the ensemble's team reward with SMAX's dense reward (enemy
health removed per step) over the round's transitions.
"""

from __future__ import annotations

import collections
import functools
import json
import time
from pathlib import Path
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np
from flax import serialization

from envs.array_env import ArrayEnv
from envs.capabilities import SceneDescriber, require
from jaxmarl_llm import preferences as prefs
from jaxmarl_llm.lm.teachers import PairLabels, TeacherNoise, agent_rankings, pair_preferences
from jaxmarl_llm.methods.dpm.config import DPMConfig
from jaxmarl_llm.methods.dpm.reward import DPMParams, batch_features, ensemble_reward
from jaxmarl_llm.methods.dpm.teacher import agent_contributions, health_fractions, segment_value
from jaxmarl_llm.preferences.losses import segment_scores
from jaxmarl_llm.transitions import TransitionBatch

TIE_MARGIN = 1e-3  # segment values closer than this are "equally preferable" (#0)
EVAL_QUERIES = 100  # held-out queries of each kind per round (appendix B.1 uses 100 pairs)


def _at(tree: Any, *index: int) -> Any:
    return jax.tree.map(lambda x: x[index], tree)


def _merge_report(total: dict, part: dict) -> None:
    for k, v in part.items():
        if isinstance(v, int | float):
            total[k] = total.get(k, 0) + v
        elif isinstance(v, list):
            total[k] = (total.get(k, []) + v)[:5]


def _map_steps(fn, *trees):
    """``fn`` of one step mapped over leading ``[T, E]`` axes."""
    return jax.vmap(jax.vmap(fn))(*trees)


SEGMENT_CROP = 16  # whole-episode segments are cut to the longest one, rounded up to this


def _segments_at_length(seg: Any, length: int) -> Any:
    """Trajectory segments ``[seeds, rows, T, N, ...]`` cut or padded (zeros, masked) along
    time to ``length`` steps."""
    t = seg.mask_a.shape[2]
    if t == length:
        return seg
    if t > length:
        fit = lambda x: x[:, :, :length]
    else:
        fit = lambda x: jnp.pad(x, [(0, 0), (0, 0), (0, length - t)] + [(0, 0)] * (x.ndim - 3))
    return seg.replace(
        features_a=fit(seg.features_a),
        features_b=fit(seg.features_b),
        mask_a=fit(seg.mask_a),
        mask_b=fit(seg.mask_b),
    )


def _crop_segments(data: dict) -> dict:
    """``data`` with the trajectory segments cut, along time, to the longest labelled one
    rounded up to ``SEGMENT_CROP`` steps (at most their padded length).

    Whole-episode segments are padded to the longest possible episode (101 steps on SMAX),
    while a round's episodes mostly end far sooner (an 8m round's 23 steps on average, 39
    at most). The steps cut are masked in every segment, so the loss is the same sum; the
    refit's cost falls with the length (2.4x for 101 -> 48 steps on 8m), and so does the
    memory the rounds' labels hold (each round is cut before it is kept). Rounding keeps the
    number of distinct lengths, each a compile of the refit, small."""
    seg = data.get("trajectory")
    if seg is None:
        return data
    padded = seg.mask_a.shape[2]  # [seeds, rows, T, N]
    used = np.asarray((seg.mask_a | seg.mask_b).any(axis=(0, 1, 3)))
    longest = int(np.flatnonzero(used)[-1]) + 1 if used.any() else 1
    keep = min(padded, -(-longest // SEGMENT_CROP) * SEGMENT_CROP)
    if keep == padded:
        return data
    return {**data, "trajectory": _segments_at_length(seg, keep)}


def _aligned_zeros(shape: tuple[int, ...], dtype: Any, align: int = 64) -> np.ndarray:
    """Zeros whose data starts on an ``align``-byte boundary: ``jax.device_put`` on CPU
    then wraps the host memory instead of copying it (numpy's own allocations are 16-byte
    aligned, and XLA copies those)."""
    dtype = np.dtype(dtype)
    size = int(np.prod(shape)) * dtype.itemsize
    raw = np.zeros(size + align, np.uint8)
    start = -raw.ctypes.data % align
    return raw[start : start + size].view(dtype).reshape(shape)


def _put_rows(buf: np.ndarray, x: np.ndarray, at: slice) -> np.ndarray:
    """``buf`` with rows ``at`` (axis 1) zeroed, then ``x`` written from their start."""
    buf[:, at] = 0
    buf[(slice(None), at, *(slice(0, n) for n in x.shape[2:]))] = x
    return buf


def _quiet_mean(raw: jax.Array, quiet: jax.Array, fallback: jax.Array) -> jax.Array:
    """Per seed, the mean of ``raw [S, T, E, N]`` over the agents of quiet steps
    ``quiet [S, T, E]``; ``fallback [S]`` where a seed's round has none."""
    w = jnp.broadcast_to(quiet[..., None], raw.shape).astype(raw.dtype)
    count = w.sum((1, 2, 3))
    mean = (raw * w).sum((1, 2, 3)) / jnp.maximum(count, 1.0)
    return jnp.where(count > 0, mean, fallback)


class _RoundPrograms:
    """A round's pure functions (queries of the policy's play, agreement of the refit
    ensemble with the labels) and their jitted, seed-vmapped programs. They read only the
    env, the config and the reward model: the feedbacks built on the same env object with
    an equal config and model (a script's or a test's several feedbacks) share one, traced
    and compiled once."""

    def __init__(self, env: ArrayEnv, cfg: DPMConfig, model: prefs.RewardModel):
        self.env, self.cfg, self.model = env, cfg, model
        self.k_traj, self.k_agent = cfg.trajectory_labels, cfg.agent_labels
        self.noise = TeacherNoise(mistake=cfg.mistake, equal_margin=TIE_MARGIN).validate()
        self.round_fn = jax.jit(jax.vmap(self._queries, in_axes=(0, 0, 0, None)))
        fit_cfg = prefs.FitConfig(
            num_steps=cfg.fit_steps, batch_size=cfg.batch_size, learning_rate=cfg.lr
        )
        self.fit_fn = jax.jit(jax.vmap(lambda p, d, k: prefs.fit(model, p, d, k, fit_cfg)))
        self.eval_fn = jax.jit(jax.vmap(self._evaluate))

    def _queries(self, batch: TransitionBatch, params: DPMParams, key, threshold):
        env, cfg, model = self.env, self.cfg, self.model
        n = env.num_agents
        feats = batch_features(env, batch)  # [T, E, N, F]
        members = model.apply_members(params.model, feats, jnp.arange(n))  # [M, T, E, N]
        alive = _map_steps(lambda s: health_fractions(env, s)[:n] > 0, batch.state)
        consensus = prefs.ensemble_rank_consensus(members, alive)  # [T, E]
        k_agent_sel, k_traj_sel, k_agent_lab, k_traj_lab = jax.random.split(key, 4)

        def select(k, cons, valid, num):
            if cfg.selection == "random":
                return prefs.select_uniform(k, valid, num)
            return prefs.select_below_threshold(k, cons, valid, num, threshold, fill=True)

        out: dict[str, Any] = {}
        t_len, e = consensus.shape
        scores, rated = _map_steps(
            lambda s, a: agent_contributions(env, s, a, cfg.idle_out_of_range),
            batch.state,
            batch.actions,
        )
        if cfg.describe_agents:  # only the described allies are ranked
            rated = rated & (jnp.arange(n) < cfg.describe_agents)
        flat = lambda x: x.reshape(t_len * e, *x.shape[2:])
        step_valid = flat(rated).sum(-1) >= 2

        def agent_queries(k_lab, index, picked, noise):
            pairs = agent_rankings(k_lab, flat(scores)[index], noise)
            r = flat(rated)[index]
            pairs = PairLabels(pairs.label, pairs.valid & r[:, :, None] & r[:, None, :])
            return prefs.agent_ranking_dataset(flat(feats)[index], pairs, valid=picked)

        seg = cfg.segment_length
        damage_weight = cfg.enemy_damage_weight
        t_idx = jnp.broadcast_to(jnp.arange(t_len)[:, None], (t_len, e))
        e_idx = jnp.broadcast_to(jnp.arange(e)[None], (t_len, e))
        if cfg.segments == "window":
            # windows [W * E] (window-major) that do not cross an episode end
            w = t_len // seg
            split = lambda x: jnp.swapaxes(x[: w * seg].reshape(w, seg, e, *x.shape[2:]), 1, 2)
            cands = lambda x: split(x).reshape(w * e, seg, *x.shape[2:])
            seg_valid = ~cands(batch.done)[:, :-1].any(-1)
            seg_cons = prefs.trajectory_consensus(cands(consensus))
            starts, envs = t_idx[::seg][:w].reshape(-1), e_idx[::seg][:w].reshape(-1)
            lengths = jnp.full((w * e,), seg, jnp.int32)
        else:
            # candidate (t, e): the episode that starts at step t of env e (the step after
            # an episode end) and ends within the play, in at most seg steps
            start = jnp.concatenate([jnp.zeros((1, e), bool), batch.done[:-1]], 0)
            ends = jax.lax.cummin(jnp.where(batch.done, t_idx, t_len), axis=0, reverse=True)
            length = ends - t_idx + 1
            seg_valid = flat(start & (ends < t_len) & (length <= seg))
            cum = jnp.cumsum(consensus, 0)
            inside = jnp.take_along_axis(cum, jnp.minimum(ends, t_len - 1), 0) - cum + consensus
            seg_cons = flat(inside / jnp.maximum(length, 1))
            starts, envs, lengths = flat(t_idx), flat(e_idx), flat(length)

        def segments_at(index):
            """Features ``[K, seg, N, F]``, step mask and teacher value of candidates."""
            t0, env_i, n_steps = starts[index], envs[index], lengths[index]
            offset = jnp.arange(seg)
            steps = jnp.minimum(t0[:, None] + offset, t_len - 1)
            f = feats[steps, env_i[:, None]]
            mask = jnp.broadcast_to((offset < n_steps[:, None])[..., None], f.shape[:3])
            last_t = jnp.clip(t0 + n_steps - 1, 0, t_len - 1)
            first = jax.tree.map(lambda x: x[t0, env_i], batch.state)
            last = jax.tree.map(lambda x: x[last_t, env_i], batch.next_state)
            value = jax.vmap(lambda a, b: segment_value(env, a, b, damage_weight))(first, last)
            return f, mask, value

        def trajectory_queries(k_lab, index, picked, noise):
            half = index.shape[0] // 2
            a, b = index[:half], index[half:]
            (fa, ma, va), (fb, mb, vb) = segments_at(a), segments_at(b)
            labels = pair_preferences(k_lab, va, vb, noise)
            both = picked[:half] & picked[half:]
            labels = PairLabels(labels.label, labels.valid & both)
            data = prefs.segment_pairs(fa, fb, labels, mask_a=ma, mask_b=mb)
            return data, a, b, both, jnp.stack([va, vb], -1)

        if self.k_agent:
            index, picked = select(k_agent_sel, flat(consensus), step_valid, self.k_agent)
            out["agent"] = agent_queries(k_agent_lab, index, picked, self.noise)
            out["agent_query"] = {"index": index, "picked": picked, "scores": flat(scores)[index]}
        if self.k_traj:
            index, picked = select(k_traj_sel, seg_cons, seg_valid, 2 * self.k_traj)
            out["trajectory"], a, b, both, values = trajectory_queries(
                k_traj_lab, index, picked, self.noise
            )
            out["trajectory_query"] = {
                "start": jnp.stack([starts[a], starts[b]], -1),
                "env": jnp.stack([envs[a], envs[b]], -1),
                "length": jnp.stack([lengths[a], lengths[b]], -1),
                "values": values,
                "picked": both,
            }
        out["candidates"] = {"trajectory": seg_valid.sum(), "agent": step_valid.sum()}
        # Held-out evaluation (appendix B.1): random queries of both kinds, labelled by the
        # noise-free scripted teacher, never trained on.
        k_ea, k_et, k_la, k_lt = jax.random.split(jax.random.fold_in(key, 0xE7A1), 4)
        exact = TeacherNoise(equal_margin=TIE_MARGIN)
        num = min(EVAL_QUERIES, t_len * e)
        index, picked = prefs.select_uniform(k_ea, step_valid, num)
        out["eval"] = {"agent": agent_queries(k_la, index, picked, exact)}
        num = min(EVAL_QUERIES, seg_valid.shape[0] // 2)
        index, picked = prefs.select_uniform(k_et, seg_valid, 2 * num)
        out["eval"]["trajectory"] = trajectory_queries(k_lt, index, picked, exact)[0]

        # per step: SMAX's dense reward (enemy health removed / enemies), for pearson_dense,
        # and whether no unit's health changed (quiet: the teacher's zero, centering: neutral)
        def health_change(s, s_next):
            h0, h1 = health_fractions(env, s), health_fractions(env, s_next)
            return (h0[n:] - h1[n:]).sum() / (h0.shape[0] - n), jnp.all(h0 == h1)

        out["dense"], out["quiet"] = _map_steps(health_change, batch.state, batch.next_state)
        out["features"] = feats
        out["consensus"] = consensus.mean()
        return out

    def _evaluate(self, params: DPMParams, datasets: dict, feats, dense):
        """Agreement of ``params`` with each dataset's labels, and the team reward's
        Pearson correlation with the dense reward."""
        model = self.model
        n = feats.shape[-2]
        out = {}
        if "trajectory" in datasets:
            d = datasets["trajectory"]  # a segment's return: its steps within the episode
            score = lambda f, m: segment_scores(model.apply(params.model, f, jnp.arange(n)), m)
            ra, rb = score(d.features_a, d.mask_a), score(d.features_b, d.mask_b)
            out["trajectory"] = prefs.preference_accuracy(ra, rb, d.label, d.valid)
        if "agent" in datasets:
            d = datasets["agent"]
            r = model.apply(params.model, d.features, jnp.arange(n))  # [C, N]
            diff = r[:, :, None] - r[:, None, :]
            decided = d.pair_valid & (d.label != 0.5) & d.valid[:, None, None]
            right = jnp.where(diff == 0, 0.5, ((diff > 0) == (d.label > 0.5)).astype(jnp.float32))
            count = decided.sum()
            agree = (right * decided).sum() / jnp.maximum(count, 1)
            out["agent"] = jnp.where(count > 0, agree, jnp.nan)  # only ties: undefined
        team = model.apply(params.model, feats, jnp.arange(n)).sum(-1).reshape(-1)
        out["pearson_dense"] = jnp.corrcoef(team, dense.reshape(-1))[0, 1]
        return out


_PROGRAMS: collections.OrderedDict[tuple, _RoundPrograms] = collections.OrderedDict()
_PROGRAMS_KEPT = 8  # configs whose programs stay compiled in one process


def round_programs(env: ArrayEnv, cfg: DPMConfig, model: prefs.RewardModel) -> _RoundPrograms:
    """The round programs of ``env``, ``cfg`` and ``model``, built once per process."""
    key = (env, model, repr(cfg))
    if key not in _PROGRAMS:
        _PROGRAMS[key] = _RoundPrograms(env, cfg, model)
        while len(_PROGRAMS) > _PROGRAMS_KEPT:
            _PROGRAMS.popitem(last=False)
    _PROGRAMS.move_to_end(key)
    return _PROGRAMS[key]


class DPMFeedback:
    """The ``Feedback`` (shaping/feedback.py) of the ``dpm`` shaper."""

    def __init__(
        self,
        env: ArrayEnv,
        cfg: DPMConfig,
        model: prefs.RewardModel,
        seed: int,
        artifact_dir: Path | None,
    ):
        self.env, self.cfg, self.model, self.seed = env, cfg, model, seed
        self.dir = None if artifact_dir is None else Path(artifact_dir)
        self.every, self.rounds, self.collect_steps = cfg.every, cfg.rounds, cfg.collect_steps
        self.every_episodes = cfg.feedback_every_episodes
        self.k_traj, self.k_agent = cfg.trajectory_labels, cfg.agent_labels
        self._new: dict[int, dict] = {}  # the latest round -> its labelled queries [S, K, ...]
        self._rows: dict[str, Any] = {}  # every round's labels so far, host arrays
        self._rows_written = 0  # rounds held in self._rows
        self._programs = round_programs(env, cfg, model)

    def after_chunk(
        self, updates_done: int, params: DPMParams, metrics: dict | None = None
    ) -> DPMParams:
        """``params`` with the intrinsic weight due after ``updates_done`` updates: 1
        until the last round, then falling linearly to 0 over ``fade.updates``; with
        ``fade.after_win`` each seed's fall starts once the chunk's ``metrics`` (leaves
        ``[seeds, updates]``) show it winning that fraction of its training episodes."""
        fade = self.cfg.fade
        if fade is None:
            return params  # no schedule: nothing to write into the train state
        if fade.after_win <= 0:
            return params.replace(weight=jnp.full_like(params.weight, self.weight(updates_done)))
        if self.rounds == 0 or updates_done <= self.every * self.rounds:
            return params
        if metrics is None or "win_rate" not in metrics:
            raise ValueError(
                "fade.after_win needs the chunk's win_rate metric (an env that reports wins, "
                "e.g. SMAX); set fade.after_win=0 to fade every seed from the last round"
            )
        wins = np.asarray(metrics["win_rate"], np.float64)  # [S, n]
        weight = np.asarray(params.weight, np.float64)
        rate = np.array([np.nanmean(w) if np.isfinite(w).any() else -1.0 for w in wins])
        falling = (weight < 1.0) | (rate >= fade.after_win)
        for s in np.flatnonzero(falling & (weight >= 1.0)):
            self._record_fade_start(int(s), updates_done, float(rate[s]))
        step = wins.shape[1] / fade.updates
        weight = np.where(falling, np.maximum(0.0, weight - step), weight)
        return params.replace(weight=jnp.asarray(weight, params.weight.dtype))

    def _record_fade_start(self, seed_index: int, updates_done: int, win_rate: float) -> None:
        """Append to ``<run>/dpm/fade_starts.json`` when a seed's fade begins."""
        if self.dir is None:
            return
        path = self.dir / "fade_starts.json"
        starts = json.loads(path.read_text()) if path.exists() else {}
        starts[str(seed_index)] = {"update": updates_done, "chunk_win_rate": win_rate}
        starts = dict(sorted(starts.items(), key=lambda kv: int(kv[0])))  # seed order
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(json.dumps(starts, indent=1))

    def weight(self, updates_done: int) -> float:
        if self.cfg.fade is None or self.rounds == 0:
            return 1.0
        since_last = updates_done - self.every * self.rounds
        if since_last <= 0:
            return 1.0
        return max(0.0, 1.0 - since_last / self.cfg.fade.updates)

    # ----- the round (host) ----------------------------------------------------------------
    def _path(self, index: int) -> Path | None:
        return None if self.dir is None else self.dir / f"round_{index}.npz"

    def _load_round(self, k: int, index: int, template: dict) -> dict:
        """Round ``k``'s saved labels, cut to its own longest segment (a file may hold a
        round saved uncut)."""
        path = self._path(k)
        if path is None or not path.exists():
            raise FileNotFoundError(
                f"DPM round {index} adds to the labels of round {k}, but "
                f"{path or 'no artifact folder'} does not hold them"
            )
        return _crop_segments(serialization.from_bytes(template, path.read_bytes()))

    def _datasets(self, index: int, new: dict) -> dict:
        """Every round's labels up to round ``index`` (``new``) in fixed-capacity datasets
        (``rounds x labels`` rows, rounds in order, the segments padded to the longest
        round's length).

        The rows live in one host buffer per kind, written in place as rounds arrive (a
        resumed process first reads the earlier rounds from their files); on CPU the
        datasets handed to the fit wrap that memory, so they must be dropped before the
        next round writes. Keeping each round apart and copying them into a new dataset
        every round held several copies at once: on 8m, 150 whole-episode pairs a round
        take 0.6 GB at 101 steps."""
        if index < self._rows_written:  # a round asked again: rebuild from the files
            self._rows, self._rows_written = {}, 0
        for k in range(self._rows_written, index):
            self._write_round(k, self._load_round(k, index, new))
        self._write_round(index, new)
        return {kind: jax.device_put(rows) for kind, rows in self._rows.items()}

    def _write_round(self, k: int, labels: dict) -> None:
        """Write round ``k``'s labels (leaves ``[S, K, ...]``) into rows ``k*K .. k*K+K-1``
        of the host datasets, growing the segments' time axis to the longest round's."""
        cap = {"trajectory": self.k_traj, "agent": self.k_agent}
        for kind, items in labels.items():
            items = jax.tree.map(np.asarray, items)
            c = cap[kind]
            if items.valid.shape[1] != c:
                raise ValueError(f"DPM round {k} has {items.valid.shape[1]} {kind} rows, not {c}")
            rows = self._rows.get(kind)
            longer = kind == "trajectory" and rows is not None
            if rows is None or (longer and rows.mask_a.shape[2] < items.mask_a.shape[2]):
                del rows  # not held here while it grows
                self._grow(kind, items, c * self.cfg.rounds)
            put = functools.partial(_put_rows, at=slice(k * c, (k + 1) * c))
            self._rows[kind] = jax.tree.map(put, self._rows[kind], items)
        self._rows_written = k + 1

    def _grow(self, kind: str, items: Any, capacity: int) -> None:
        """Replace the ``kind`` rows by zeroed ones for ``capacity`` items shaped like
        ``items`` (segments at the longer of both time axes) holding the old rows' contents.
        Leaf by leaf, each old leaf dropped once copied: one old leaf is held beside the
        new ones, not all of them."""
        rows = self._rows.pop(kind, None)
        new_leaves, tree = jax.tree.flatten(items)
        old_leaves = [None] * len(new_leaves) if rows is None else jax.tree.leaves(rows)
        del rows
        out = []
        while new_leaves:
            x, old = new_leaves.pop(0), old_leaves.pop(0)
            shape = (x.shape[0], capacity, *x.shape[2:])
            if old is not None:
                shape = (*shape[:2], *np.maximum(old.shape[2:], x.shape[2:]))
            buf = _aligned_zeros(shape, x.dtype)
            if old is not None:
                buf[tuple(slice(0, n) for n in old.shape)] = old
            out.append(buf)
            del old
        self._rows[kind] = jax.tree.unflatten(tree, out)

    # ----- text labels (labeler: backend) ----------------------------------------------
    def _backends(self) -> dict[str, Any]:
        from jaxmarl_llm.lm.factory import make_backend

        cfg = self.cfg
        store = cfg.store or (str(self.dir / "labels.sqlite") if self.dir else None)
        common = {"store": store, "cache_mode": cfg.cache_mode}
        if cfg.backend != "scripted":
            one = make_backend(cfg.backend, **common, **cfg.backend_options)
            return {"trajectory": one, "agent": one}
        # the scripted backend answers one kind of question per teacher
        noise = {"mistake": cfg.mistake, "equal_margin": TIE_MARGIN, **cfg.backend_options}
        return {
            kind: make_backend("scripted", teacher=teacher, noise=noise, **common)
            for kind, teacher in (("trajectory", "pair_choice_hash"), ("agent", "agent_ranking"))
        }

    def _text_labels(self, batch: TransitionBatch, q: dict, new: dict):
        """Replace the array teacher's labels in ``new`` by the backend's answers."""
        from jaxmarl_llm.lm.backend import SamplingParams
        from jaxmarl_llm.lm.labeling import LabelingPolicy
        from jaxmarl_llm.methods.dpm import text

        cfg, n = self.cfg, self.env.num_agents
        describer = require(self.env, SceneDescriber, needed_by="DPM's text queries")
        host = jax.device_get((batch.state, batch.next_state, batch.actions))
        state, next_state, actions = host
        num_envs = actions.shape[2]
        policy = LabelingPolicy(cfg.max_retries)
        agents = list(range(cfg.describe_agents or n))
        backends = self._backends()
        reports: dict[str, Any] = {}
        t0 = time.perf_counter()
        try:
            out = dict(new)
            for kind in new:
                labels, valids = [], []
                for s in range(actions.shape[0]):
                    st, nx = _at(state, s), _at(next_state, s)
                    params = SamplingParams(
                        max_tokens=cfg.max_tokens, temperature=cfg.temperature, seed=self.seed + s
                    )
                    # only the picked queries are asked: the others (fill-ins, windows
                    # across an episode end) never become labels
                    if kind == "trajectory":
                        qt = jax.device_get(q["trajectory_query"])
                        picked = np.flatnonzero(qt["picked"][s])
                        at = lambda i, j, q=qt, s=s: tuple(
                            int(q[k][s][i, j]) for k in ("start", "env", "length")
                        )
                        pairs = [(at(i, 0), at(i, 1)) for i in picked]
                        prompts = text.trajectory_prompts(
                            describer, st, nx, pairs, episodes=cfg.segments == "episode"
                        )
                        asked = text.ask_trajectories(
                            backends[kind], prompts, qt["values"][s][picked], params, policy
                        )
                        shape = qt["picked"][s].shape
                    else:
                        qa = jax.device_get(q["agent_query"])
                        picked = np.flatnonzero(qa["picked"][s])
                        prompts = []
                        for c in qa["index"][s][picked]:
                            t, e = divmod(int(c), num_envs)
                            prompts.append(
                                text.agent_prompt(
                                    describer,
                                    _at(st, t, e),
                                    _at(nx, t, e),
                                    actions[s, t, e],
                                    agents,
                                )
                            )
                        scores = qa["scores"][s][picked]
                        asked = text.ask_rankings(
                            backends[kind], prompts, scores, agents, n, params, policy
                        )
                        shape = (qa["picked"][s].shape[0], n, n)
                    label = np.full(shape, 0.5, np.float32)
                    valid = np.zeros(shape, bool)
                    label[picked], valid[picked], rep = asked
                    labels.append(label)
                    valids.append(valid)
                    _merge_report(reports.setdefault(kind, {}), rep.as_dict())
                label, valid = jnp.asarray(np.stack(labels)), jnp.asarray(np.stack(valids))
                if kind == "trajectory":
                    out[kind] = new[kind].replace(label=label, valid=valid)
                else:
                    pv = valid & ~jnp.eye(n, dtype=bool)
                    out[kind] = new[kind].replace(
                        label=label, pair_valid=pv, valid=pv.any((-1, -2))
                    )
        finally:
            for b in {id(b): b for b in backends.values()}.values():
                usage = getattr(getattr(b, "backend", b), "usage", None)
                if usage is not None:  # tokens and cost of http backends (Table 3)
                    reports.setdefault("usage", {}).update(usage.as_dict())
                if hasattr(b, "stats"):
                    reports.setdefault("cache", []).append(b.stats())
                b.close()
        for kind in new:
            r = reports[kind]
            r["abstain_rate"] = r.get("abstained", 0) / max(r.get("queries", 0), 1)
        reports["seconds"] = time.perf_counter() - t0
        return out, reports

    def validate(self, num_envs: int) -> None:
        """Called by the runner before training: will each round find enough candidates?"""
        self._check_candidates(self.collect_steps, num_envs)

    def _check_candidates(self, steps: int, num_envs: int) -> None:
        segments = (steps // self.cfg.segment_length) * num_envs
        if self.cfg.segments == "episode":  # at most one episode per two steps
            segments = (steps // 2) * num_envs
        if segments < 2 * self.k_traj or steps * num_envs < self.k_agent:
            raise ValueError(
                f"a DPM round collects {steps} steps x {num_envs} envs: {segments} segments of "
                f"{self.cfg.segment_length} steps and {steps * num_envs} steps, but needs "
                f"{2 * self.k_traj} segments and {self.k_agent} steps for its queries; raise "
                "shaping.kwargs.collect_steps or lower labels_per_round"
            )

    def refit(self, round_index: int, batch: TransitionBatch, params: DPMParams):
        cfg = self.cfg
        seeds, steps, num_envs = batch.actions.shape[:3]
        self._check_candidates(steps, num_envs)
        key = jax.random.fold_in(jax.random.PRNGKey(self.seed), 0xD9 + round_index)
        k_query, k_fit = jax.random.split(key)
        threshold = prefs.linear_schedule(
            round_index, cfg.threshold_start, cfg.threshold_end, max(cfg.rounds - 1, 1)
        )
        t0 = time.perf_counter()
        q = self._programs.round_fn(batch, params, jax.random.split(k_query, seeds), threshold)
        new = {k: q[k] for k in ("trajectory", "agent") if k in q}
        text_report = None
        if cfg.labeler == "backend":
            new, text_report = self._text_labels(batch, q, new)
        new = _crop_segments(new)
        heldout = self._programs.eval_fn(params, new, q["features"], q["dense"])
        data = self._datasets(round_index, new)
        query_s = time.perf_counter() - t0

        t1 = time.perf_counter()
        model_params, losses = self._programs.fit_fn(
            params.model, tuple(data[k] for k in sorted(data)), jax.random.split(k_fit, seeds)
        )
        one, zero = jnp.ones((seeds,), jnp.float32), jnp.zeros((seeds,), jnp.float32)
        fitted = DPMParams(model_params, one, zero, weight=params.weight)
        # the fitted ensemble's raw outputs on the round's transitions [S, T, E, N]
        raw = jax.vmap(lambda p, f: ensemble_reward(self.model, p.model, f, cfg.pessimism))(
            fitted, q["features"]
        )
        flat = raw.reshape(seeds, -1)
        if cfg.centering != "none":  # 0 at the mean (or quantile) of the round's transitions
            at = cfg.center_quantile
            shift = flat.mean(-1) if at is None else jnp.quantile(flat, at, axis=-1)
            if cfg.centering == "neutral":  # ... or of its quiet ones
                shift = _quiet_mean(raw, q["quiet"], shift)
            fitted = fitted.replace(shift=shift)
        if cfg.reward_scale > 0:
            fitted = fitted.replace(scale=cfg.reward_scale / jnp.maximum(flat.std(-1), 1e-6))
        # a seed with no label yet (every answer abstained or unparsable) keeps its reward
        # off: its ensemble was never fitted, and scaled noise is not a reward
        labelled = sum(np.asarray(d.valid).reshape(seeds, -1).sum(-1) for d in data.values())
        fitted = fitted.replace(scale=jnp.where(jnp.asarray(labelled > 0), fitted.scale, 0.0))
        # the intrinsic reward's mean per agent-step over the round: where its zero sits
        # (centring on quiet steps leaves fights paying or costing on average)
        reward_mean = (flat.mean(-1) - fitted.shift) * fitted.scale * fitted.weight
        after = self._programs.eval_fn(fitted, new, q["features"], q["dense"])
        held_out = self._programs.eval_fn(fitted, q["eval"], q["features"], q["dense"])
        jax.block_until_ready(fitted)
        fit_s = time.perf_counter() - t1

        self._new = {round_index: new}
        path = self._path(round_index)
        if path is not None:
            path.parent.mkdir(parents=True, exist_ok=True)
            path.write_bytes(serialization.to_bytes(new))

        host = lambda x: np.asarray(x).tolist()
        report = {
            "threshold": float(threshold),
            "mean_consensus": host(q["consensus"]),
            "labels": {k: int(np.asarray(v.valid).sum()) for k, v in new.items()},
            # valid candidates per seed: Kendall selection chooses among these; fewer than
            # twice the trajectory queries (or the agent queries) leaves labels unasked
            "candidates": {k: host(v) for k, v in q["candidates"].items()},
            "labels_total_per_seed": {
                k: int(np.asarray(v.valid[0]).sum()) for k, v in data.items()
            },
            "query_seconds": query_s,
            "fit_seconds": fit_s,
            "final_loss": host(losses[:, -50:].mean((1, 2))),
            "scale": host(fitted.scale),
            "unlabelled_seeds": [int(i) for i in np.flatnonzero(labelled == 0)],
            "shift": host(fitted.shift),
            "quiet_fraction": host(q["quiet"].reshape(seeds, -1).mean(-1)),
            "reward_mean": host(reward_mean),
            "pearson_dense": host(after["pearson_dense"]),
        }
        if text_report is not None:
            report["text"] = text_report
        # ordered agent pairs the teacher ranked strictly (not a tie), per seed: agreement
        # over few of them is noise (a policy that rarely acts gives mostly ties)
        strict = lambda d: host((d.pair_valid & (d.label != 0.5)).reshape(seeds, -1).sum(-1))
        if "agent" in new:
            report["agent_strict_pairs"] = strict(new["agent"])
        report["eval_agent_strict_pairs"] = strict(q["eval"]["agent"])
        for k in ("trajectory", "agent"):  # after the refit, on random unseen queries
            report[f"eval_{k}_agreement"] = host(held_out[k])
        for k in new:
            report[f"heldout_{k}_agreement"] = host(heldout[k])
            report[f"train_{k}_agreement"] = host(after[k])
        return fitted, report

"""V-GEPF's skill selection rounds between training chunks (the shaper's ``Feedback``).

After every chunk, ``after_chunk`` keeps each seed's per-update records (the metrics
``stat_shots``, mean shots per finished episode, and ``win_rate``; NaN where absent or
where no episode ended) in ``<run>/vgepf/records.json``. Every ``every`` updates the
runner plays each seed's policy for ``collect_steps`` steps and calls ``refit``, which for
each seed:

1. takes the records of the updates since the previous round (the runner calls ``refit``
   before ``after_chunk`` at the same update, so a round sees the records up to the chunk
   before it and the next round starts with that chunk) and the last skill's potential
   record: its mean potential on the batch of the round that chose it (0 by construction
   when normalised) and of every round since;
2. asks the selector for the next skill (with frames of the seed's last finished episode
   in the batch for the vision selector);
3. embeds the skill's instruction and, with ``normalise``, renormalises the potential on
   the batch's states: mean and std of the raw cosine over the states where phi is
   evaluated. This batch is our reading of the paper's "first epoch after each switch":
   the states the current policy visits when the skill takes over.

Each round is written to ``<run>/vgepf/round_K.json`` (records, answers, choice,
normalisation); a resumed run that repeats round K takes its choice from there and
recomputes the rest from the same batch, so it continues identically without asking the
selector again.
"""

from __future__ import annotations

import dataclasses
import io
import json
import math
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np

from jaxmarl_llm.methods.vgepf.config import VGEPFConfig
from jaxmarl_llm.methods.vgepf.potential import (
    VGEPFParams,
    evaluated,
    frames,
    image_embeddings,
    text_embedding,
)
from jaxmarl_llm.methods.vgepf.select import Records, Selector, SkillChoice
from jaxmarl_llm.methods.vgepf.skills import SKILL_NAMES, skill_index
from jaxmarl_llm.transitions import TransitionBatch
from jaxmarl_llm.vision.clip import LoadedCLIP

EMBED_CHUNK = 64  # states per image-tower call on the host (one compilation per size)
MIN_STD = 1e-6


def png(frame: np.ndarray) -> bytes:
    """PNG file of a ``[H, W, 3]`` uint8 frame."""
    from PIL import Image

    out = io.BytesIO()
    Image.fromarray(np.asarray(frame, np.uint8)).save(out, format="PNG")
    return out.getvalue()


def last_episode(done: np.ndarray) -> tuple[int, int]:
    """``[start, end)`` steps of the last finished episode in one env's ``done [T]``: the
    steps after the previous end up to the last end; all steps when none finished."""
    ends = np.flatnonzero(done)
    if len(ends) == 0:
        return 0, len(done)
    start = int(ends[-2]) + 1 if len(ends) > 1 else 0
    return start, int(ends[-1]) + 1


def embed_states(
    embed: Callable[[Any], jax.Array], states: Any, chunk: int = EMBED_CHUNK
) -> np.ndarray:
    """Unit image embeddings ``[B, D]`` of states with leaves ``[B, ...]``, ``chunk`` at a
    time (the last chunk padded), so every batch size compiles ``embed`` once."""
    n = int(jax.tree.leaves(states)[0].shape[0])
    size = min(chunk, n)
    out = []
    for start in range(0, n, size):
        part = jax.tree.map(lambda x, s=start: np.asarray(x[s : s + size]), states)
        pad = size - int(jax.tree.leaves(part)[0].shape[0])
        if pad:
            part = jax.tree.map(lambda x, p=pad: np.concatenate([x, np.repeat(x[-1:], p, 0)]), part)
        out.append(np.asarray(embed(part))[: size - pad])
    return np.concatenate(out)


def evaluated_states(states: Any, every_k: int) -> Any:
    """The states (leaves ``[B, ...]``, host) whose phi is evaluated."""
    keep = np.asarray(evaluated(np.asarray(states.step), every_k))
    return jax.tree.map(lambda x: np.asarray(x)[keep], states)


def normalisation(cos: np.ndarray, normalise: bool) -> tuple[float, float]:
    """``(mean, std)`` of raw cosines (``(0, 1)`` when not normalising or empty)."""
    if not normalise or cos.size == 0:
        return 0.0, 1.0
    return float(cos.mean()), float(max(cos.std(), MIN_STD))


class VGEPFFeedback:
    """Skill selection rounds (``shaping/feedback.py``'s ``Feedback``) of a V-GEPF shaper.

    ``make_selector()`` builds the selector for one round and returns it with a function
    that releases it (a backend's connections and store)."""

    def __init__(
        self,
        cfg: VGEPFConfig,
        clip: LoadedCLIP,
        make_selector: Callable[[], tuple[Selector, Callable[[], None]]],
        artifact_dir: Path | None,
    ):
        sel = cfg.selection
        self.cfg, self.clip, self.make_selector = cfg, clip, make_selector
        self.every, self.rounds, self.collect_steps = sel.every, sel.rounds, sel.collect_steps
        self.dir = None if artifact_dir is None else Path(artifact_dir)
        self.size = int(cfg.image_size or clip.config.image_size)
        self._records: dict[int, dict[str, list[float]]] | None = None
        self._texts: dict[str, np.ndarray] = {}
        self._rounds: dict[int, dict] = {}
        clip_cfg, size = clip.config, self.size
        self._embed = jax.jit(lambda image, states: image_embeddings(clip_cfg, image, states, size))
        self._render = jax.jit(lambda states, s: frames(states, s), static_argnums=1)

    # ----- records ----------------------------------------------------------------------
    def _path(self, name: str) -> Path | None:
        return None if self.dir is None else self.dir / name

    def records(self) -> dict[int, dict[str, list[float]]]:
        """Per-update records by update (1-based), each metric a list over seeds."""
        if self._records is None:
            path = self._path("records.json")
            saved = json.loads(path.read_text()) if path is not None and path.exists() else {}
            self._records = {
                int(u): {k: [math.nan if x is None else x for x in v] for k, v in r.items()}
                for u, r in saved.items()
            }
        return self._records

    def after_chunk(self, updates_done: int, params: VGEPFParams, metrics: dict) -> VGEPFParams:
        """Keep the chunk's per-update records; the parameters are unchanged."""
        leaf = next(iter(jax.tree.leaves(metrics)), None)
        if leaf is None:
            return params
        seeds, n = np.shape(leaf)[:2]

        def column(name: str) -> np.ndarray:
            x = metrics.get(name)
            return np.full((seeds, n), np.nan) if x is None else np.asarray(x, np.float64)

        shots, wins = column("stat_shots"), column("win_rate")
        records = self.records()
        for u in [u for u in records if u > updates_done - n]:  # a crashed run's later ones
            del records[u]
        for i in range(n):
            records[updates_done - n + 1 + i] = {
                "shots": shots[:, i].tolist(),
                "win_rate": wins[:, i].tolist(),
            }
        path = self._path("records.json")
        if path is not None:
            clean = lambda v: [None if math.isnan(x) else x for x in v]
            body = {u: {k: clean(v) for k, v in r.items()} for u, r in sorted(records.items())}
            path.write_text(json.dumps(body))
        return params

    # ----- rounds -----------------------------------------------------------------------
    def _round(self, index: int) -> dict | None:
        if index not in self._rounds:
            path = self._path(f"round_{index}.json")
            if path is None or not path.exists():
                return None
            self._rounds[index] = json.loads(path.read_text())
        return self._rounds[index]

    def _text(self, name: str) -> np.ndarray:
        if name not in self._texts:
            self._texts[name] = text_embedding(self.clip, name)
        return self._texts[name]

    def _window(self, index: int, seeds: int) -> tuple[list[Records], int]:
        """Each seed's records for round ``index`` (potential record aside) and the last
        update they cover."""
        before = self._round(index - 1) if index > 0 else None
        if index > 0 and before is None:
            raise FileNotFoundError(
                f"V-GEPF round {index} continues the records of round {index - 1}, but "
                f"{self._path(f'round_{index - 1}.json') or 'no artifact folder'} does not "
                "hold them"
            )
        start = before["records_end"] if before else 0
        updates = sorted(u for u in self.records() if start < u <= (index + 1) * self.every)
        rows = [self.records()[u] for u in updates]
        out = [
            Records(
                shots=tuple(r["shots"][s] for r in rows),
                win_rate=tuple(r["win_rate"][s] for r in rows),
                potential=(),
            )
            for s in range(seeds)
        ]
        return out, updates[-1] if updates else start

    def _frames(self, batch: TransitionBatch, seed: int) -> list[bytes]:
        """PNG frames of env 0's last finished episode in ``seed``'s batch (evenly spaced)."""
        sel = self.cfg.selection
        start, end = last_episode(np.asarray(batch.done[seed, :, 0]))
        steps = np.unique(np.linspace(start, end - 1, sel.frames).round().astype(int))
        states = jax.tree.map(lambda x: x[seed, steps, 0], batch.state)
        return [png(f) for f in np.asarray(self._render(states, sel.frame_size))]

    def refit(
        self, round_index: int, batch: TransitionBatch, params: VGEPFParams
    ) -> tuple[VGEPFParams, dict]:
        t0 = time.perf_counter()
        cfg = self.cfg
        seeds = int(batch.done.shape[0])
        saved = self._round(round_index)
        before = self._round(round_index - 1) if round_index > 0 else None
        windows, records_end = self._window(round_index, seeds)
        if saved is not None:  # a resumed run repeats this round: same records and choices
            windows = [_records(r) for r in saved["records"]]
            records_end = saved["records_end"]

        texts = np.asarray(params.text).reshape(seeds, -1)
        means, stds = np.asarray(params.mean).reshape(seeds), np.asarray(params.std).reshape(seeds)
        last = [SKILL_NAMES[int(i)] for i in np.asarray(params.skill).reshape(seeds)]
        image = jax.tree.map(lambda x: x[0], params.image)  # the same CLIP on every seed
        embed = lambda states: self._embed(image, states)

        selector, release = (None, lambda: None) if saved else self.make_selector()
        choices, new_text, new_mean, new_std, outgoing, histories = [], [], [], [], [], []
        try:
            for s in range(seeds):
                flat = lambda x, s=s: np.asarray(x[s]).reshape(-1, *x.shape[3:])
                states = jax.tree.map(flat, batch.state)  # [T * E, ...]
                emb = embed_states(embed, evaluated_states(states, cfg.every_k))  # [B, D]
                phi_out = (emb @ texts[s] - means[s]) / stds[s]
                outgoing.append(float(phi_out.mean()) if phi_out.size else math.nan)
                history = [*(before["history"][s] if before else []), outgoing[-1]]
                record = Records(windows[s].shots, windows[s].win_rate, tuple(history))
                if saved is not None:
                    choice = _choice(saved["choices"][s])
                else:
                    shots = self._frames(batch, s) if selector.name == "vision" else []
                    choice = selector.select(record, shots, last[s])
                windows[s] = record
                text = self._text(choice.skill)
                mean, std = normalisation(emb @ text, cfg.normalise)
                new_text.append(text)
                new_mean.append(mean)
                new_std.append(std)
                choices.append(choice)
                histories.append([float(((emb @ text - mean) / std).mean()) if emb.size else 0.0])
        finally:
            release()

        fitted = VGEPFParams(
            image=params.image,
            text=jnp.asarray(np.stack(new_text), jnp.float32),
            mean=jnp.asarray(new_mean, jnp.float32),
            std=jnp.asarray(new_std, jnp.float32),
            skill=jnp.asarray([skill_index(c.skill) for c in choices], jnp.int32),
        )
        clean = lambda v: [None if math.isnan(x) else x for x in v]
        entry = {
            "round": round_index,
            "records_end": records_end,
            "records": [w.as_dict() for w in windows],
            "choices": [dataclasses.asdict(c) for c in choices],
            "history": histories,
            "mean": new_mean,
            "std": new_std,
        }
        path = self._path(f"round_{round_index}.json")
        if path is not None and saved is None:
            path.write_text(json.dumps(entry, indent=2))
        self._rounds[round_index] = entry
        report = {
            "skill": [c.skill for c in choices],
            "last_skill": last,
            "selector": choices[0].selector if choices else None,
            "raw_answer": [c.as_dict()["raw_answer"] for c in choices],
            "parse_retries": [c.retries for c in choices],
            "repeated": [c.repeated for c in choices],
            "mean": new_mean,
            "std": new_std,
            "outgoing_potential_mean": clean(outgoing),
            "records_end": records_end,
            "replayed": saved is not None,
            "seconds": time.perf_counter() - t0,
        }
        return fitted, report


def _records(saved: dict) -> Records:
    return Records(**{k: tuple(math.nan if x is None else x for x in v) for k, v in saved.items()})


def _choice(saved: dict) -> SkillChoice:
    return SkillChoice(**{**saved, "answers": tuple(saved["answers"])})

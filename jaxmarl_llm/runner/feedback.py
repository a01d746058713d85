"""Online feedback rounds between chunks: each seed's current policy plays, the shaper's
``feedback`` refits its parameters from what it played, and the train state takes them."""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path

import jax
from omegaconf import DictConfig

from jaxmarl_llm.distributed import write_text


def feedback_round(
    cfg: DictConfig,
    feedback,
    collect: Callable,
    state,
    round_index: int,
    run_dir: Path,
    note: dict | None = None,
):
    """Play each seed's policy, let ``feedback`` refit the shaper, put the result in the
    state; the round's report, with ``note`` (when the round came), goes to
    ``feedback.json`` (by round, so a resumed run that repeats a round replaces its
    entry)."""
    keys = jax.random.split(
        jax.random.fold_in(jax.random.PRNGKey(cfg.seed), 0xFEED + round_index), cfg.num_seeds
    )
    batch = collect(state, keys, int(feedback.collect_steps))
    params, report = feedback.refit(round_index, batch, state.shaper_params)
    state = state.replace(shaper_params=params)
    report = {**(note or {}), **report}
    path = run_dir / "feedback.json"
    rounds = json.loads(path.read_text()) if path.exists() else {}
    rounds[str(round_index)] = report
    write_text(path, json.dumps(rounds, indent=2))
    return state

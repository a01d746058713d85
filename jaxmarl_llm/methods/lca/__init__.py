"""LCA: LLM-guided credit assignment with agent-specific rankings and potential rewards.

``shaping.name: lca`` in a config samples sequential state pairs, ranks each from every
agent's point of view (heuristic teacher, scripted text teacher, Gemma or an
OpenAI-compatible endpoint), fits one state-scoring model per role with the
confidence-weighted Bradley-Terry loss, and trains on ``r_i = sigma_i(o'_i) - sigma_i(o_i)``
(zero for an agent that stays still) added to the team reward, inside the scan.
"""

from __future__ import annotations

import logging
from pathlib import Path

from omegaconf import OmegaConf

from jaxmarl_llm.methods.lca import answers  # noqa: F401  (registers the prompt templates)
from jaxmarl_llm.methods.lca.config import LCAConfig
from jaxmarl_llm.methods.lca.online import LCAFeedback
from jaxmarl_llm.methods.lca.pipeline import LCAResult, prepare
from jaxmarl_llm.methods.lca.potential import PotentialParams, potential_rewards, potential_shaper
from jaxmarl_llm.shaping.registry import register_shaper

logger = logging.getLogger(__name__)


def lca_config(kwargs) -> LCAConfig:
    """``shaping.kwargs`` of a config as an ``LCAConfig`` (defaults filled in)."""
    return OmegaConf.to_object(OmegaConf.merge(OmegaConf.structured(LCAConfig), kwargs))


def load_run(run_dir: Path):
    """``(array env, run config, LCAResult)`` of an LCA run folder, its fitted
    state-scoring models read from ``run_dir/lca`` (fitted there first if missing)."""
    import envs

    run_dir = Path(run_dir)
    if not (run_dir / "config.yaml").exists():
        raise ValueError(f"{run_dir} is not a run folder (no config.yaml)")
    cfg = OmegaConf.load(run_dir / "config.yaml")
    if cfg.shaping.name != "lca":
        raise ValueError(f"{run_dir} is not an LCA run (shaping.name={cfg.shaping.name})")
    env = envs.make_array_env(cfg.env.name, **OmegaConf.to_container(cfg.env.kwargs))
    result = prepare(
        env, lca_config(cfg.shaping.kwargs), int(cfg.seed), run_dir / "lca", progress=False
    )
    return env, cfg, result


def _build(kwargs, env, mode, coef, context):
    cfg = lca_config(kwargs)
    result = prepare(env, cfg, seed=context.seed, artifact_dir=context.artifact_dir("lca"))
    r = result.report
    logger.info(
        "LCA: %d pairs (%s), labels %.3f accurate, model %.3f on held-out pairs%s",
        r["pairs"],
        r["labeler"],
        r["label_accuracy_vs_heuristic"],
        r["val_accuracy_vs_heuristic"],
        f" (loaded from {r['loaded_from']})" if "loaded_from" in r else "",
    )
    shaper = potential_shaper(env.env, result.model, result.params, mode, coef, cfg.gamma)
    if cfg.online_rounds:
        feedback = LCAFeedback(
            env, cfg, result.model, result.data, context.seed, context.artifact_dir("lca")
        )
        shaper = shaper.replace(feedback=feedback)
    return shaper


register_shaper("lca", _build, schema=LCAConfig)

__all__ = [
    "LCAConfig",
    "LCAFeedback",
    "LCAResult",
    "PotentialParams",
    "potential_rewards",
    "lca_config",
    "load_run",
    "potential_shaper",
    "prepare",
]

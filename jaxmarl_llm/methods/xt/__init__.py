"""MAPPO-xT, V-GEPF's potential-based baseline: an Expected-Threat grid of the football
pitch (``grid``, computed from simulated matches by ``collect`` and ``events``, stored by
``gridfile``) as the potential of the ball's zone (``shaper``; ``shaping.name: xt``)."""

from omegaconf import OmegaConf

from jaxmarl_llm.methods.xt.grid import XTCounts, action_model, expected_threat, solve_xt
from jaxmarl_llm.methods.xt.gridfile import DEFAULT_GRID, load_grid, save_grid
from jaxmarl_llm.methods.xt.shaper import OpponentRule, XTConfig, potential, xt_shaper
from jaxmarl_llm.shaping.registry import register_shaper


def _build(kwargs, env, mode, coef, context):
    cfg = OmegaConf.to_object(OmegaConf.merge(OmegaConf.structured(XTConfig), kwargs))
    return xt_shaper(env, cfg, mode, coef)


register_shaper("xt", _build, schema=XTConfig)

__all__ = [
    "DEFAULT_GRID",
    "OpponentRule",
    "XTConfig",
    "XTCounts",
    "action_model",
    "expected_threat",
    "load_grid",
    "potential",
    "save_grid",
    "solve_xt",
    "xt_shaper",
]

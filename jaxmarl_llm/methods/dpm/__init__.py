"""DPM: dual preferences (trajectory and agent comparisons) for per-agent reward models.

``shaping.name: dpm`` in a QMIX/VDN config trains the learner on the env reward plus an
ensemble's intrinsic per-agent rewards; every ``every`` updates, ``rounds`` times, the
ensemble's least-agreed queries are labelled by the scripted teacher (the paper's human
criteria) and the ensemble is refitted (``online.py``). The reward is computed when the
learner samples from its replay buffer, so the refit re-scores every stored transition.
"""

from __future__ import annotations

import jax
from omegaconf import OmegaConf

from jaxmarl_llm.methods.dpm import answers  # noqa: F401  (registers the prompt templates)
from jaxmarl_llm.methods.dpm.config import DPMConfig
from jaxmarl_llm.methods.dpm.online import DPMFeedback
from jaxmarl_llm.methods.dpm.reward import DPMParams, dpm_shaper, initial_params, reward_model
from jaxmarl_llm.methods.dpm.teacher import require_smax
from jaxmarl_llm.shaping.registry import register_shaper


def dpm_config(kwargs) -> DPMConfig:
    given = OmegaConf.to_container(kwargs) if OmegaConf.is_config(kwargs) else dict(kwargs)
    return OmegaConf.to_object(
        OmegaConf.merge(OmegaConf.structured(DPMConfig), DPMConfig.migrate(given))
    )


def _build(kwargs, env, mode, coef, context):
    cfg = dpm_config(kwargs)
    DPMConfig.check(cfg)
    require_smax(env)  # the scripted teacher reads SMAX units: refuse other envs now
    model = reward_model(env, cfg)
    key = jax.random.fold_in(jax.random.PRNGKey(context.seed), 0xD93)
    params = initial_params(model, env, key)
    feedback = DPMFeedback(env, cfg, model, context.seed, context.artifact_dir("dpm"))
    return dpm_shaper(env, model, params, mode, coef, feedback, cfg.center_on_batch, cfg.pessimism)


register_shaper("dpm", _build, schema=DPMConfig)

__all__ = [
    "DPMConfig",
    "DPMFeedback",
    "DPMParams",
    "dpm_config",
    "dpm_shaper",
    "initial_params",
    "reward_model",
]

"""V-GEPF: a CLIP potential over rendered football frames, with the instruction (skill)
chosen every few epochs by a selector.

``shaping.name: vgepf`` trains on ``r_env + rho * (gamma * phi(s') - phi(s))`` with
``phi(s) = cos(CLIP image(render(s)), CLIP text(skill))``, optionally normalised per skill
(``potential.py``); every ``selection.every`` updates a selector (a scripted rule, a
language model, or a vision-language model shown frames of the last episode) picks the
next skill from the paper's pool of seven (``select.py``, ``online.py``).
"""

from __future__ import annotations

from jaxmarl_llm.methods.vgepf import answers  # noqa: F401  (registers the prompt templates)
from jaxmarl_llm.methods.vgepf.clip_model import default_clip_path, load_vgepf_clip
from jaxmarl_llm.methods.vgepf.config import Selection, VGEPFConfig
from jaxmarl_llm.methods.vgepf.online import VGEPFFeedback
from jaxmarl_llm.methods.vgepf.potential import VGEPFParams, potential, shaping_reward
from jaxmarl_llm.methods.vgepf.select import (
    BackendSelector,
    Records,
    ScriptedSelector,
    SkillChoice,
    SkillChoiceError,
    parse_skill_choice,
)
from jaxmarl_llm.methods.vgepf.shaper import build, vgepf_config, vgepf_shaper
from jaxmarl_llm.shaping.registry import register_shaper

register_shaper("vgepf", build, schema=VGEPFConfig)

__all__ = [
    "BackendSelector",
    "Records",
    "ScriptedSelector",
    "Selection",
    "SkillChoice",
    "SkillChoiceError",
    "VGEPFConfig",
    "VGEPFFeedback",
    "VGEPFParams",
    "default_clip_path",
    "load_vgepf_clip",
    "parse_skill_choice",
    "potential",
    "shaping_reward",
    "vgepf_config",
    "vgepf_shaper",
]

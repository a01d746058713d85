"""YOLO-MARL: a one-time LLM planning function, compiled safely to JAX, whose task
assignments give every agent a small bonus when its action carries out its task
(``shaping.name: yolo``). Task sets: Level-Based Foraging, MPE simple spread, SMAX."""

from omegaconf import OmegaConf

from jaxmarl_llm.methods.yolo import answers  # noqa: F401  (registers the prompt templates)
from jaxmarl_llm.methods.yolo.sandbox import (
    SandboxLimits,
    UnsafeCode,
    check_source,
    compile_function,
    compile_with_retries,
    estimated_cost,
)
from jaxmarl_llm.methods.yolo.shaper import YOLOConfig, planning_bonus, yolo_shaper
from jaxmarl_llm.shaping.registry import register_shaper


def _build(kwargs, env, mode, coef, context):
    cfg = OmegaConf.to_object(OmegaConf.merge(OmegaConf.structured(YOLOConfig), kwargs))
    return yolo_shaper(env, cfg, mode, coef, context.artifact_dir("yolo"))


register_shaper("yolo", _build, schema=YOLOConfig)

__all__ = [
    "SandboxLimits",
    "UnsafeCode",
    "YOLOConfig",
    "check_source",
    "compile_function",
    "compile_with_retries",
    "estimated_cost",
    "planning_bonus",
    "yolo_shaper",
]

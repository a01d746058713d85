"""What the learner registry reads of ``verco``, ``twosome`` and ``lm_zero_shot``: the
``algo`` block's schema and checks, and ``make_trainer`` (a ``HostTrainer``): they train on
the host, not as a jitted ``Learner``."""

from __future__ import annotations

from jaxmarl_llm.errors import ConfigError
from jaxmarl_llm.methods.verco.config import VercoConfig, check_config
from jaxmarl_llm.methods.verco.trainer import make_trainer

__all__ = ["VercoConfig", "check_config", "make_learner", "make_trainer"]


def make_learner(cfg, env, shaper):
    raise ConfigError(
        f"algo.name={cfg.name} trains on the host (make_trainer, driven by "
        "jaxmarl_llm.runner.host_loop), not as a jitted Learner"
    )

"""MPE environments (the PettingZoo multi-particle tasks).

``mpe:simple_spread*`` are ``envs.spread.FastSimpleSpread``: a vectorized
reimplementation of jaxmarl's ``SimpleSpreadMPE`` (whole-array physics, observations
and rewards instead of per-agent dicts and loops), verified step for step against
jaxmarl's (same reset for a key, same observations, rewards, dones and states; see
``tests/envs/test_spread.py``) and several times faster under ``vmap`` on CPU.
``mpe:simple_spread_jaxmarl`` is jaxmarl's original, kept for reference and
cross-checking.
"""

from __future__ import annotations

from jaxmarl.environments.mpe import SimpleSpreadMPE

from envs.capabilities import YoloTaskSet, provides
from envs.registry import EnvSpec, register
from envs.spread import FastSimpleSpread


def _simple_spread(num_agents: int = 3, num_landmarks: int | None = None, **kwargs):
    # The N-agent spread task has as many landmarks as agents unless told otherwise.
    num_landmarks = num_agents if num_landmarks is None else num_landmarks
    return FastSimpleSpread(num_agents=num_agents, num_landmarks=num_landmarks, **kwargs)


def _simple_spread_jaxmarl(num_agents: int = 3, num_landmarks: int | None = None, **kwargs):
    num_landmarks = num_agents if num_landmarks is None else num_landmarks
    return SimpleSpreadMPE(num_agents=num_agents, num_landmarks=num_landmarks, **kwargs)


register(
    EnvSpec(
        "mpe:simple_spread",
        _simple_spread,
        "MPE cooperative navigation: N agents cover N landmarks (num_agents=3 by default); "
        "vectorized, step-for-step equal to jaxmarl's",
        return_reduction="sum",
        capabilities=provides(YoloTaskSet("spread")),
    )
)
for _n in (3, 4):
    register(
        EnvSpec(
            f"mpe:simple_spread_{_n}",
            _simple_spread,
            f"MPE cooperative navigation with {_n} agents and {_n} landmarks (vectorized)",
            default_kwargs={"num_agents": _n},
            return_reduction="sum",
            capabilities=provides(YoloTaskSet("spread")),
        )
    )
register(
    EnvSpec(
        "mpe:simple_spread_jaxmarl",
        _simple_spread_jaxmarl,
        "jaxmarl's original SimpleSpreadMPE (reference for mpe:simple_spread)",
        return_reduction="sum",
        capabilities=provides(YoloTaskSet("spread")),
    )
)

"""MPE environments from jaxmarl (the PettingZoo multi-particle tasks)."""

from __future__ import annotations

from jaxmarl.environments.mpe import SimpleSpreadMPE

from envs.registry import EnvSpec, register


def _simple_spread(num_agents: int = 3, num_landmarks: int | None = None, **kwargs):
    # The N-agent spread task has as many landmarks as agents unless told otherwise.
    num_landmarks = num_agents if num_landmarks is None else num_landmarks
    return SimpleSpreadMPE(num_agents=num_agents, num_landmarks=num_landmarks, **kwargs)


register(
    EnvSpec(
        "mpe:simple_spread",
        _simple_spread,
        "MPE cooperative navigation: N agents cover N landmarks (num_agents=3 by default)",
        return_reduction="sum",
    )
)
for _n in (3, 4):
    register(
        EnvSpec(
            f"mpe:simple_spread_{_n}",
            _simple_spread,
            f"MPE cooperative navigation with {_n} agents and {_n} landmarks",
            default_kwargs={"num_agents": _n},
            return_reduction="sum",
        )
    )

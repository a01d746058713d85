"""TWOSOME's macro-action Overcooked salad kitchen for two cooks (``salad:A``, ``salad:B``).

``env.SaladKitchen`` is the jaxmarl env, ``scripted`` a scripted team, ``text`` the
host-side text observations and the symbolic description a scripted teacher reads; the
registry entries offer the last two as the ``ScriptedPolicy`` and ``TextObservations``
capabilities.
"""

import functools

from envs.capabilities import ScriptedPolicy, TextObservations
from envs.registry import EnvSpec, register
from envs.salad.env import MACRO_ACTIONS, TASKS, SaladKitchen, SaladState, episode_stats
from envs.salad.scripted import ScriptedTeam
from envs.salad.text import SaladText

_LAYOUTS = {"A": "both cooks in one room", "B": "a counter wall between the cooks"}
for _map_name, _layout in _LAYOUTS.items():
    register(
        EnvSpec(
            f"salad:{_map_name}",
            functools.partial(SaladKitchen, _map_name),
            f"TWOSOME's Overcooked salad kitchen, map {_map_name} ({_layout}): 2 agents, "
            "macro-actions with masks, 5x5 partial observations, one of 7 salads per "
            "episode (kwargs tasks=/task=), shared reward",
            won_fn=lambda env, s: env.won(s),
            stats_fn=lambda env, s: episode_stats(s),
            world_state_fn=lambda env, s, obs: env.world_state(s),
            world_state_reads_obs=False,
            capabilities={ScriptedPolicy: ScriptedTeam, TextObservations: SaladText},
        )
    )

__all__ = ["MACRO_ACTIONS", "TASKS", "SaladKitchen", "SaladState", "episode_stats"]

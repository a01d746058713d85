"""GRF-like football in pure JAX, registered as ``football:<scenario>``.

``env.Football`` is the game; ``scenarios`` holds the starting positions and settings of
the four scenarios; ``episode_stats`` names the statistics kept in the state;
``scripted_actions`` turns the scripted intent of the learners' players into actions.
"""

import functools

from envs.football.env import Football, FootballState, episode_stats, hull_area
from envs.football.scenarios import SCENARIOS
from envs.registry import EnvSpec, register

for _scenario in SCENARIOS:
    register(
        EnvSpec(
            f"football:{_scenario}",
            functools.partial(Football, _scenario),
            f"GRF-like 2D football, scenario {_scenario}: simple115_v2 observations, "
            "19 actions, scoring reward (kwarg rewards='scoring,checkpoints')",
            won_fn=lambda env, s: env.won(s),
            stats_fn=lambda env, s: episode_stats(s),
            world_state_fn=lambda env, s, obs: env.world_state(s),
            world_state_reads_obs=False,
        )
    )

__all__ = ["SCENARIOS", "Football", "FootballState", "episode_stats", "hull_area"]

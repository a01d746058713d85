"""GRF-like football in pure JAX (``football:<scenario>`` in the registry).

``env.Football`` is the game; ``scenarios`` holds the starting positions and settings of
the four scenarios; ``episode_stats`` names the statistics kept in the state.
"""

from envs.football.env import Football, FootballState, episode_stats, hull_area
from envs.football.scenarios import SCENARIOS

__all__ = ["SCENARIOS", "Football", "FootballState", "episode_stats", "hull_area"]

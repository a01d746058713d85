"""TWOSOME's macro-action Overcooked salad kitchen for two cooks (``salad:A``, ``salad:B``).

``env.SaladKitchen`` is the jaxmarl env, ``scripted`` a scripted team, ``text`` the
host-side text observations and the symbolic description a scripted teacher reads.
"""

from envs.salad.env import MACRO_ACTIONS, TASKS, SaladKitchen, SaladState, episode_stats

__all__ = ["MACRO_ACTIONS", "TASKS", "SaladKitchen", "SaladState", "episode_stats"]

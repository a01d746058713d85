"""Overcooked (jaxmarl's v1) as ``overcooked:<layout>`` entries.

Two cooks share a kitchen: put three onions in a pot, wait for the soup, plate it and
deliver it for a team reward of 20. One entry per layout in jaxmarl's
``overcooked_layouts`` (cramped_room, asymm_advantages, coord_ring, forced_coord,
counter_circuit); kwargs go to ``Overcooked`` (``max_steps=400``, ``random_reset=False``).

Observations are ``height x width x 26`` uint8 feature planes per agent (jaxmarl's
declared space says ``width x height x 26``; only the size matters once ``ArrayEnv``
flattens them to float32). Actions: up, down, right, left, stay, interact; all are
always legal. The shaped rewards of jaxmarl's baselines (onion in pot, plate pick-up,
soup pick-up) live in the env's step info, which ``ArrayEnv`` does not pass on. There is
no win condition and the centralized state is both agents' observations concatenated.
With ``random_reset=False`` a reset only draws the agents' facing directions.
"""

from __future__ import annotations

import functools
import warnings

from jaxmarl.environments.overcooked import Overcooked, overcooked_layouts

from envs.registry import EnvSpec, register


def _make(layout: str, **kwargs) -> Overcooked:
    with warnings.catch_warnings():
        # jaxmarl's constructor recommends OvercookedV2 on every call; v1 is what we want.
        warnings.filterwarnings("ignore", message="OvercookedV2", category=DeprecationWarning)
        return Overcooked(layout=overcooked_layouts[layout], **kwargs)


for _layout in sorted(overcooked_layouts):
    _l = overcooked_layouts[_layout]
    register(
        EnvSpec(
            f"overcooked:{_layout}",
            functools.partial(_make, _layout),
            f"Overcooked (v1) {_layout}: 2 cooks, {_l['width']}x{_l['height']} kitchen, "
            "20 per delivered onion soup",
        )
    )

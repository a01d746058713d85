"""The errors a run reports to its user, one module below every layer.

``ConfigError``: a config file, override or saved run folder is wrong; the message names
the key. ``RunError``: a run cannot go on for a reason outside its config (a language-model
backend that stays down, a missing weights file, a replay without the answer, a model
whose code the sandbox refused); methods and backends subclass it, and
``experiments/run.py`` maps each base to an exit code without knowing the subclasses.
"""

from __future__ import annotations


class ConfigError(ValueError):
    """A config file or override is wrong; the message names the key."""


class RunError(Exception):
    """A run stopped for a reason outside its config; the message names the problem."""

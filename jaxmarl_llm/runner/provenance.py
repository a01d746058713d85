"""Which code wrote a result: the checkout's commit, recorded in every summary and figure row."""

from __future__ import annotations

import subprocess
from pathlib import Path

_ROOT = Path(__file__).resolve().parents[2]
# What runs write into the checkout: a changed result file does not make the code dirty.
_OUTPUTS = ("experiments/results", "experiments/models", "benchmarks/results")


def code_commit(root: Path = _ROOT) -> str | None:
    """The short hash of ``root``'s checked-out commit, with ``+dirty`` when tracked files
    other than results differ from it; None outside a git checkout (an installed wheel)."""
    try:
        head = subprocess.run(
            ["git", "-C", str(root), "rev-parse", "--short=7", "HEAD"],
            capture_output=True,
            text=True,
            timeout=10,
            check=True,
        ).stdout.strip()
        dirty = subprocess.run(
            [
                "git",
                "-C",
                str(root),
                "status",
                "--porcelain",
                "--untracked-files=no",
                "--",
                ".",
                *(f":(exclude){p}" for p in _OUTPUTS),
            ],
            capture_output=True,
            text=True,
            timeout=10,
            check=True,
        ).stdout.strip()
    except (OSError, subprocess.SubprocessError):
        return None
    return f"{head}+dirty" if dirty else head

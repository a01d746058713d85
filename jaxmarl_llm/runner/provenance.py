"""Which code wrote a result: the checkout's commit, recorded in every summary and figure row."""

from __future__ import annotations

import subprocess
from pathlib import Path

_ROOT = Path(__file__).resolve().parents[2]
# What runs write into the checkout, and the pages written about them: a changed result
# file or a rewritten page does not make the code dirty.
_OUTPUTS = ("experiments/results", "experiments/models", "benchmarks/results",
            "experiments/claims.yaml", "glob:**/*.md")  # fmt: skip


def _exclude(path: str) -> str:
    magic, _, pattern = path.rpartition(":")
    return f":(exclude{',' + magic if magic else ''}){pattern}"


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
                *(_exclude(p) for p in _OUTPUTS),
            ],
            capture_output=True,
            text=True,
            timeout=10,
            check=True,
        ).stdout.strip()
    except (OSError, subprocess.SubprocessError):
        return None
    return f"{head}+dirty" if dirty else head


def unchanged_since(commit: str | None, paths: tuple[str, ...], root: Path = _ROOT) -> bool:
    """Whether ``paths`` (relative to ``root``) in the working tree are as they were at
    ``commit``; False where git cannot tell (no commit, a ``+dirty`` one, no checkout)."""
    if not commit or commit.endswith("+dirty"):
        return False
    try:
        diff = subprocess.run(
            ["git", "-C", str(root), "diff", "--quiet", commit, "--", *paths],
            capture_output=True,
            timeout=30,
        )
    except (OSError, subprocess.SubprocessError):
        return False
    return diff.returncode == 0


def last_commit(path: Path) -> str | None:
    """The short hash of the commit that last changed ``path`` (as committed), or None."""
    try:
        out = subprocess.run(
            ["git", "-C", str(path.parent), "log", "-1", "--format=%h", "--abbrev=7", "--",
             path.name],
            capture_output=True, text=True, timeout=10, check=True,
        ).stdout.strip()  # fmt: skip
    except (OSError, subprocess.SubprocessError):
        return None
    return out or None


def stamp_kept_rows(rows: list[dict], path: Path) -> list[dict]:
    """Rows a figure script keeps from ``path`` without rerunning them: each gets the
    commit that last changed the file, where it records none, so a merged table still
    says which code made every row."""
    commit = None
    out = []
    for r in rows:
        if not r.get("commit"):
            commit = commit or last_commit(path)
            r = {**r, "commit": commit}
        out.append(r)
    return out

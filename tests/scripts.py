"""The project's scripts (``experiments/``, ``benchmarks/``) loaded as modules for tests."""

import importlib.util
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def load_script(relative_path: str):
    """Import ``ROOT / relative_path`` (e.g. ``"benchmarks/train_throughput.py"``)."""
    path = ROOT / relative_path
    name = f"{path.parent.name}_{path.stem}"
    spec = importlib.util.spec_from_file_location(name, path)
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module  # dataclasses (flax modules) look their module up
    spec.loader.exec_module(module)
    return module

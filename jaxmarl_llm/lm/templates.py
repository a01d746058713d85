"""Prompt templates are data: text files with ``$name`` placeholders, filled from
per-environment state describers.

Each method keeps its templates in its package's ``prompts/`` folder and registers them
with the answer form each asks for (``register``, from the method's ``answers`` module:
template name -> its parser and what the parser returns, gathered in ``ANSWER_FORMS``). A
packaged template is then found by its name alone; ``directory=`` reads templates from a
folder of your own instead.

``render`` refuses a missing or an unexpected field, so a describer that drifts from its
template fails at once instead of sending a prompt with a hole in it.
"""

from __future__ import annotations

import string
from collections.abc import Callable, Mapping
from importlib import resources
from pathlib import Path
from typing import Any

PROMPTS_FOLDER = "prompts"  # inside a registering package

# template -> (parser, what it returns), for every registered template
ANSWER_FORMS: dict[str, tuple[Callable[..., Any], str]] = {}
_PACKAGE_OF: dict[str, str] = {}  # template -> the package that registered it


def _prompts_of(package: str) -> Path:
    return Path(str(resources.files(package).joinpath(PROMPTS_FOLDER)))


def register(package: str, answer_forms: Mapping[str, tuple[Callable[..., Any], str]]) -> None:
    """The templates of ``package``: ``<package>/prompts/<name>.txt`` for each ``name`` of
    ``answer_forms``, answered in the form its ``(parser, what it returns)`` reads.

    Every ``.txt`` in that folder must be registered, and a name belongs to one package;
    registering a package again (a reloaded module) replaces its entries.
    """
    folder = _prompts_of(package)
    files = {p.stem for p in folder.glob("*.txt")}
    missing = sorted(set(answer_forms) - files)
    if missing:
        raise ValueError(f"{package} registers prompt templates {missing} not in {folder}")
    unregistered = sorted(files - set(answer_forms))
    if unregistered:
        raise ValueError(
            f"{package} gives no answer form for its prompt templates {unregistered} (in {folder})"
        )
    taken = {n: _PACKAGE_OF[n] for n in answer_forms if _PACKAGE_OF.get(n, package) != package}
    if taken:
        raise ValueError(f"{package} registers prompt templates already registered: {taken}")
    for name in [n for n, p in _PACKAGE_OF.items() if p == package]:
        del _PACKAGE_OF[name], ANSWER_FORMS[name]
    for name, form in answer_forms.items():
        _PACKAGE_OF[name] = package
        ANSWER_FORMS[name] = form


def template_names(directory: str | Path | None = None) -> list[str]:
    """The registered templates, or those in ``directory``."""
    if directory is None:
        return sorted(_PACKAGE_OF)
    return sorted(p.stem for p in Path(directory).glob("*.txt"))


def template_path(name: str, directory: str | Path | None = None) -> Path:
    """The file of template ``name``: registered, or in ``directory``."""
    if directory is not None:
        path = Path(directory) / f"{name}.txt"
        if not path.is_file():
            raise ValueError(
                f"unknown prompt template {name!r} in {path.parent}; "
                f"valid: {', '.join(template_names(directory))}"
            )
        return path
    if name not in _PACKAGE_OF:
        raise ValueError(
            f"unknown prompt template {name!r}; valid: "
            f"{', '.join(template_names()) or '(none)'} (the templates of the methods "
            "imported so far; or pass directory=)"
        )
    return _prompts_of(_PACKAGE_OF[name]) / f"{name}.txt"


def load_template(name: str, directory: str | Path | None = None) -> string.Template:
    return string.Template(template_path(name, directory).read_text())


def template_fields(name: str, directory: str | Path | None = None) -> list[str]:
    """The placeholders a template needs, in order of first appearance."""
    return list(dict.fromkeys(load_template(name, directory).get_identifiers()))


def render(name: str, directory: str | Path | None = None, **fields: object) -> str:
    """Fill template ``name`` with exactly its fields."""
    template = load_template(name, directory)
    needed = template_fields(name, directory)
    missing = [f for f in needed if f not in fields]
    extra = sorted(set(fields) - set(needed))
    if missing or extra:
        raise ValueError(
            f"prompt template {name!r} needs fields {needed}; "
            + (f"missing {missing}" if missing else "")
            + ("; " if missing and extra else "")
            + (f"unexpected {extra}" if extra else "")
        )
    return template.substitute({k: str(v) for k, v in fields.items()})

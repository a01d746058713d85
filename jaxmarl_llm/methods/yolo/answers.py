"""YOLO-MARL's answer form, a fenced Python block (the planning and reward functions),
and its prompt templates (``prompts/``) with the form each asks for."""

from __future__ import annotations

import ast
import functools

from jaxmarl_llm.lm import templates
from jaxmarl_llm.lm.parsers import ParseError

_PYTHON_FENCE_TAGS = ("", "python", "py", "python3")


def _fenced_blocks(text: str) -> list[str]:
    """Bodies of the ```python (or untagged) blocks; an unclosed last fence runs to the
    end of the text. A scan with ``str.find``: linear whatever the fences."""
    blocks = []
    i = 0
    while (start := text.find("```", i)) >= 0:
        newline = text.find("\n", start + 3)
        if newline < 0:
            break  # a fence with nothing after it
        info = text[start + 3 : newline].strip().lower()
        end = text.find("```", newline + 1)
        if (info.split() or [""])[0] in _PYTHON_FENCE_TAGS:
            blocks.append(text[newline + 1 : end if end >= 0 else len(text)])
        if end < 0:
            break
        i = end + 3
    return blocks


def parse_python_block(text: str, required_function: str | None = None) -> str:
    """The last fenced Python block that is valid Python (and defines the function).

    Blocks are ```` ```python ````, ```` ```py ````, ```` ```python3 ```` or untagged
    fences (other languages are skipped); an unclosed last fence counts to the end of
    the text (a truncated answer then usually fails to parse); an answer with no fence
    at all that contains ``def`` is read as bare code. Of several blocks the last one
    that parses and defines ``required_function`` at module level (not nested, not a
    lambda) wins: models restate fixed versions last. Source that Python's parser
    cannot handle (too deeply nested) raises ``ParseError`` like a syntax error.

    Only syntax is checked here; whether generated code is safe to run is the sandbox's
    decision (see the method recipes), never the parser's.
    """
    blocks = _fenced_blocks(text)
    if not blocks and "def " in text and "```" not in text:
        blocks = [text]  # a model that answered with bare code
    if not blocks:
        raise ParseError("python_block", "no fenced ```python block found", text)
    last_error = ""
    for block in reversed(blocks):
        try:
            tree = ast.parse(block)
        except (SyntaxError, ValueError) as e:  # ValueError: null bytes in source
            last_error = f"block does not parse: {e}"
            continue
        except (RecursionError, MemoryError):
            last_error = "block is nested too deeply to parse"
            continue
        if required_function is not None:
            names = {n.name for n in tree.body if isinstance(n, ast.FunctionDef)}
            if required_function not in names:
                last_error = (
                    f"no function {required_function!r} defined at module level"
                    f" (found {sorted(names)})"
                )
                continue
        return block.strip("\n")
    raise ParseError("python_block", last_error, text)


# template -> (parser, what it returns)
ANSWER_FORMS = {
    "yolo_strategy": (str.strip, "free-text strategy"),
    "yolo_planning_function": (
        functools.partial(parse_python_block, required_function="planning_function"),
        "source of planning_function",
    ),
    "yolo_reward_function": (
        functools.partial(parse_python_block, required_function="compute_reward"),
        "source of planning_function and compute_reward",
    ),
}
templates.register(__package__, ANSWER_FORMS)

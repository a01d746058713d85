"""Verco's answer form, ``"Agent k: <message>"`` lines (the teacher's messages), and its
prompt template (``prompts/``) with the form it asks for."""

from __future__ import annotations

import re

from jaxmarl_llm.lm import templates
from jaxmarl_llm.lm.parsers import HAS_DIGIT, ParseError

# "Agent 1: go left", "- **Agent 2**: chop", "Agent #3 (the chopper) - wait"
_MESSAGE_LINE = re.compile(
    r"^[^\w\n]*agent[ \t_]*(?:#[ \t]*)?(?P<id>[^\s:*()\-–]+)[ \t*_]*(?:\([^)\n]{0,40}\)[ \t*_]*)?"
    r"(?::|-|–)(?P<message>[^\n]*)",
    re.I | re.M,
)


def parse_agent_messages(text: str, num_agents: int) -> list[str]:
    """``"Agent 1: go left"`` lines -> one message per agent (Verco's teacher labels).

    A message line starts with "Agent <k>" (markdown, list bullets and a parenthesised
    note before the ':' or '-' are ignored); the message is the rest of that line,
    stripped of markdown and quotes; other lines are ignored. ``k`` is a plain ASCII
    integer in 1..N: "Agent 1.5:", "Agent -1:", "Agent 1-2:", "Agent ２:" raise, as do a
    message line with an empty message, two messages for one agent, and a missing agent.
    """
    messages: list[str | None] = [None] * num_agents
    for m in _MESSAGE_LINE.finditer(text):
        agent_text = m.group("id")
        if not HAS_DIGIT.search(agent_text):
            continue  # "Agent messages: ...", "Agents: ..." are not message lines
        two_ids = text.startswith("-", m.end("id")) and HAS_DIGIT.match(text, m.end("id") + 1)
        if not re.fullmatch(r"[1-9][0-9]{0,5}", agent_text) or two_ids:  # "Agent 1-2:"
            raise ParseError("agent_messages", f"{agent_text!r} is not an agent number", text)
        agent = int(agent_text)
        if not 1 <= agent <= num_agents:
            raise ParseError("agent_messages", f"agent {agent} is not in 1..{num_agents}", text)
        message = m.group("message").strip().strip("*_`'\"“”").strip()
        if not message:
            raise ParseError("agent_messages", f"agent {agent} has an empty message", text)
        if messages[agent - 1] is not None:
            raise ParseError("agent_messages", f"agent {agent} has two messages", text)
        messages[agent - 1] = message
    missing = [i + 1 for i, m in enumerate(messages) if m is None]
    if missing:
        raise ParseError("agent_messages", f"no message for agents {missing}", text)
    return messages  # type: ignore[return-value]


# template -> (parser, what it returns)
ANSWER_FORMS = {
    "verco_message": (parse_agent_messages, "one message per agent"),
}
templates.register(__package__, ANSWER_FORMS)

"""A conversation's history as handed in by a caller: checked and copied before a session keeps it.

Sessions let their history be replaced or edited by hand (seed 000's
``respond()`` runs on "a history edited by hand"); what comes in is checked
here so a bad message is refused when it is assigned, naming its index, not
when a later turn renders it.
"""

from __future__ import annotations

import copy
from collections.abc import Mapping, Sequence
from typing import Any

ROLES = ("system", "developer", "user", "assistant", "tool")


def checked_messages(messages: Sequence[Mapping[str, Any]]) -> list[dict[str, Any]]:
    """A deep copy of ``messages`` as a list of dicts; ValueError naming the first bad message."""
    if isinstance(messages, (str, bytes, Mapping)) or not isinstance(messages, Sequence):
        raise ValueError(f"messages must be a list of message dicts, got {type(messages).__name__}")
    checked: list[dict[str, Any]] = []
    for index, message in enumerate(messages):
        if not isinstance(message, Mapping):
            raise ValueError(f"messages[{index}] must be a dict, got {type(message).__name__}")
        role = message.get("role")
        if role not in ROLES:
            raise ValueError(f"messages[{index}] has role {role!r}; expected one of {list(ROLES)}")
        content = message.get("content")
        if content is not None and not isinstance(content, (str, list)):
            raise ValueError(f"messages[{index}]: content must be a string or a list of parts")
        checked.append(copy.deepcopy(dict(message)))
    return checked


def seed_history(system: str | None, messages: Sequence[Mapping[str, Any]]) -> list[dict[str, Any]]:
    """The history a session starts from: ``messages`` copied (checked), or the system turn alone."""
    checked = checked_messages(messages)
    if checked and system is not None:
        raise ValueError("give the system prompt inside messages or as system=, not both")
    if checked:
        return checked
    return [{"role": "system", "content": system}] if system else []

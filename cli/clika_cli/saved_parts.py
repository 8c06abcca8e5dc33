"""A saved chat's content parts changed one by one: how its images and audio clips are stored and restored."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any


def map_parts(
    messages: list[dict[str, Any]], change: Callable[[dict[str, Any]], dict[str, Any]]
) -> list[dict[str, Any]]:
    """``messages`` with ``change`` applied to each dict part of each content array (strings stay)."""
    return [_map_message(message, change) for message in messages]


def _map_message(
    message: dict[str, Any], change: Callable[[dict[str, Any]], dict[str, Any]]
) -> dict[str, Any]:
    content = message.get("content")
    if not isinstance(content, list):
        return message
    return {**message, "content": [change(part) if isinstance(part, dict) else part for part in content]}

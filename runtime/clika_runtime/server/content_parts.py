"""A chat request's media parts read in place, the one walk the image and audio readers share.

The protocol keeps a turn's parts when it has media ones (``image_url``,
``input_audio``); each reader swaps the parts of its kind for the chat
layer's parts and leaves every other part, and every string turn, as it is.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any


def read_parts(
    messages: list[dict[str, Any]], kind: str, read: Callable[[dict[str, Any]], dict[str, Any]]
) -> list[dict[str, Any]]:
    """``messages`` with each content part of type ``kind`` replaced by ``read(part)``."""
    resolved = []
    for message in messages:
        content = message.get("content")
        if not isinstance(content, list):
            resolved.append(message)
            continue
        parts = [read(part) if part.get("type") == kind else part for part in content]
        resolved.append({**message, "content": parts})
    return resolved

"""The one walk over a conversation's content parts: a message's ``content`` list of text,
image, video and audio parts.

Whoever handles a kind of part (the chat layer splitting media from what the template
renders, the store swapping media for digests and back, the server reading a request's
image and audio parts) replaces the parts of that kind and keeps every other part, and
every turn without such a part, as it is.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from typing import Any


def replaced_parts(
    messages: Sequence[Any], wanted: Callable[[Any], bool], replace: Callable[[Mapping[str, Any], str], Any]
) -> list[Any]:
    """``messages`` with each content part ``wanted`` picks replaced by ``replace(part, where)``, in
    order, ``where`` naming it (``messages[i].content[j]``); a message with no such part (or no
    content list, or no mapping at all) is kept as it is."""
    out = []
    for i, message in enumerate(messages):
        content = message.get("content") if isinstance(message, Mapping) else None
        if not isinstance(content, list) or not any(wanted(part) for part in content):
            out.append(message)
            continue
        parts = [
            replace(part, f"messages[{i}].content[{j}]") if wanted(part) else part
            for j, part in enumerate(content)
        ]
        out.append({**message, "content": parts})
    return out

"""The turns a session writes into its history: a tool's answer, a complete reply, and what a reset keeps.

A session's history only ever grows by these turns (besides the user turns it
is sent), so they take one shape however the session got them: a tool turn
names the call it answers, and an assistant turn carries its calls and its
reasoning (as ``reasoning_content``) only when the reply had them.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from clika_runtime.chat.tools.definitions import ToolCall


def tool_result_turn(call_id: str, content: str, name: str = "") -> dict[str, Any]:
    """The tool turn answering call ``call_id`` with ``content``; ValueError for a bad argument."""
    if not isinstance(call_id, str) or not call_id:
        raise ValueError("call_id must be the id of the tool call this result answers")
    if not isinstance(content, str):
        raise ValueError(f"a tool result's content must be a string, got {type(content).__name__}")
    turn: dict[str, Any] = {"role": "tool", "tool_call_id": call_id, "content": content}
    if name:
        turn["name"] = name
    return turn


def assistant_turn(text: str, calls: Sequence[ToolCall], reasoning: str) -> dict[str, Any]:
    """The assistant turn a complete reply adds to the history."""
    turn: dict[str, Any] = {"role": "assistant", "content": text}
    if calls:
        turn["tool_calls"] = [call.to_message() for call in calls]
    if reasoning:
        turn["reasoning_content"] = reasoning
    return turn


def kept_on_reset(history: Sequence[dict[str, Any]], keep_system: bool) -> list[dict[str, Any]]:
    """What a reset leaves of ``history``: its system turn when asked to keep it, else nothing."""
    if keep_system and history[:1] and history[0]["role"] == "system":
        return list(history[:1])
    return []

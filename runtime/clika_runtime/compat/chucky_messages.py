"""The Chucky SDK's message shapes: result messages, stream events, assistant and tool-result
messages, built from the tool loop's turns.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from clika_runtime.chat.tools.loop import ModelTurn
from clika_runtime.chat.tools.toolkit import ToolOutput


class PromptResult(dict):
    """A result message (``type``, ``subtype``, ``result``, ``session_id``, ``total_cost_usd``,
    ``duration_ms``, ``num_turns``, ``usage``); its keys read as attributes too."""

    def __getattr__(self, name: str) -> Any:
        try:
            return self[name]
        except KeyError:
            raise AttributeError(name) from None


@dataclass
class StreamEvent:
    """An event of :meth:`Chucky.stream`: ``message`` (a text piece in ``data``), ``tool_use``
    (``name``, the input in ``data``), ``result`` (the result message), ``error``, ``done``."""

    type: str
    data: Any = None
    name: str | None = None


def get_assistant_text(message: dict[str, Any]) -> str:
    """The text blocks of an assistant message, concatenated ('' for other messages)."""
    if message.get("type") != "assistant":
        return ""
    blocks = (message.get("message") or {}).get("content") or []
    return "".join(block.get("text", "") for block in blocks if block.get("type") == "text")


def get_result_text(message: dict[str, Any]) -> str | None:
    """The result string of a result message, or None for other messages."""
    return message.get("result") if message.get("type") == "result" else None


def assistant_message(turn: ModelTurn) -> dict[str, Any]:
    content: list[dict[str, Any]] = []
    if turn.text:
        content.append({"type": "text", "text": turn.text})
    for call in turn.tool_calls:
        content.append({"type": "tool_use", "id": call.id, "name": call.name, "input": dict(call.arguments)})
    return {"type": "assistant", "message": {"role": "assistant", "content": content}}


def tool_result_message(output: ToolOutput) -> dict[str, Any]:
    block = {
        "type": "tool_result",
        "tool_use_id": output.call.id,
        "content": output.content,
        "is_error": output.is_error,
    }
    return {"type": "user", "message": {"role": "user", "content": [block]}}


def stream_events(item: dict[str, Any]) -> list[StreamEvent]:
    kind = item.get("type")
    if kind == "stream_event":
        return [StreamEvent("message", item["event"]["text"])]
    if kind == "assistant":
        blocks = item["message"]["content"]
        return [StreamEvent("tool_use", b["input"], b["name"]) for b in blocks if b["type"] == "tool_use"]
    if kind == "error":
        return [StreamEvent("error", dict(item["error"]))]
    if kind == "result":
        return [StreamEvent("result", item)]
    return []

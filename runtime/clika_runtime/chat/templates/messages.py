"""A conversation's messages as a chat template sees them: plain data, checked, in the shape templates read.

Templates are untrusted code, so only JSON-like data reaches them (no object
whose methods a template could call); a reasoning text is offered under every
name templates read it by, and a call's JSON-string ``arguments`` become the
object templates serialize. A model without a template reads the same messages
as ``role: content`` lines.
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from typing import Any

from clika_runtime.chat.tools.definitions import ToolCall

_REASONING_FIELDS = ("reasoning_content", "thinking", "reasoning")


def plain_data(value: Any) -> Any:
    """Only JSON-like data reaches a template (rich objects could expose unsafe methods)."""
    if value is None or type(value) in (str, int, float, bool):
        return value
    if isinstance(value, ToolCall):
        return plain_data(value.to_message())
    if isinstance(value, bool):
        return bool(value)
    if isinstance(value, str):
        return str.__str__(value)
    if isinstance(value, int):
        return int.__int__(value)
    if isinstance(value, float):
        return float.__float__(value)
    if isinstance(value, Mapping):
        return {plain_data(key): plain_data(item) for key, item in value.items()}
    if isinstance(value, (list, tuple)):
        return [plain_data(item) for item in value]
    if hasattr(value, "item") and callable(value.item):  # NumPy scalars
        return plain_data(value.item())
    return f"<{type(value).__name__}>"


def prepare_messages(messages: Sequence[Mapping[str, Any]]) -> list[dict[str, Any]]:
    """Messages as templates expect them.

    Keys whose value is None are dropped (templates handle a missing key, not
    None); a reasoning text is offered under all the names templates read; a
    call's ``arguments`` given as a JSON string (the OpenAI wire shape) becomes
    the object templates serialize with ``tojson``.
    """
    if isinstance(messages, (str, bytes, Mapping)):
        raise ValueError("messages must be a list of {'role': ..., 'content': ...} mappings")
    prepared = []
    for index, message in enumerate(messages):
        if not isinstance(message, Mapping):
            raise ValueError(f"message {index} must be a mapping, got {type(message).__name__}")
        if not isinstance(message.get("role"), str):
            raise ValueError(f"message {index} needs a string 'role'")
        item = {key: plain_data(value) for key, value in message.items() if value is not None}
        reasoning = next((item[key] for key in _REASONING_FIELDS if item.get(key) is not None), None)
        if reasoning is not None:
            item = {"thinking": reasoning, **item, "reasoning_content": reasoning}
        if item.get("tool_calls"):
            item["tool_calls"] = [_prepared_call(call, index) for call in item["tool_calls"]]
        prepared.append(item)
    return prepared


def _prepared_call(call: Any, index: int) -> dict[str, Any]:
    if not isinstance(call, dict):
        raise ValueError(f"message {index}: each tool call must be a mapping")
    call = dict(call)
    holder = call["function"] = dict(call["function"]) if isinstance(call.get("function"), dict) else call
    arguments = holder.get("arguments")
    if isinstance(arguments, str):
        try:
            holder["arguments"] = json.loads(arguments) if arguments.strip() else {}
        except json.JSONDecodeError:
            raise ValueError(
                f"message {index}: tool call {holder.get('name')!r} has arguments that are not JSON"
            ) from None
    if holder is call:
        del call["function"]
    return call


def plain_conversation_text(messages: Sequence[Mapping[str, Any]]) -> str:
    """A conversation without a template: ``role: content`` lines, the assistant's turn opened."""
    lines = [
        f"{message['role']}: {content_text(message.get('content'))}" for message in prepare_messages(messages)
    ]
    return "\n".join([*lines, "assistant:"])


def content_text(content: Any) -> str:
    if isinstance(content, list):
        return "".join(part.get("text", "") for part in content if isinstance(part, dict))
    return "" if content is None else str(content)

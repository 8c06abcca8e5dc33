"""Tool definitions and tool calls: the model-independent shapes.

A tool definition arrives as the OpenAI envelope ``{"type": "function",
"function": {...}}`` or as the bare function object ``{"name", "description",
"parameters"}``; :func:`normalize_tools` turns either into the envelope, which is
what chat templates iterate over. A :class:`ToolCall` is one call a reply made.
"""

from __future__ import annotations

import json
import secrets
import string
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

_ID_ALPHABET = string.ascii_letters + string.digits


@dataclass(frozen=True)
class ToolCall:
    """One tool call a reply made.

    ``arguments`` is the parsed argument object; ``raw`` is the exact text of the
    call markup the model produced (useful for logs and for re-rendering).
    """

    id: str
    name: str
    arguments: dict[str, Any] = field(default_factory=dict)
    raw: str = ""

    @property
    def arguments_json(self) -> str:
        """The arguments as a JSON string (the OpenAI wire shape)."""
        return json.dumps(self.arguments, ensure_ascii=False)

    def to_message(self) -> dict[str, Any]:
        """The call in the OpenAI message shape an assistant turn's ``tool_calls`` holds."""
        return {
            "id": self.id,
            "type": "function",
            "function": {"name": self.name, "arguments": self.arguments_json},
        }


def new_call_id(length: int = 24, prefix: str = "call_") -> str:
    """A fresh random call id (Mistral templates demand 9 alphanumerics: ``new_call_id(9, "")``)."""
    return prefix + "".join(secrets.choice(_ID_ALPHABET) for _ in range(length))


def normalize_tool(tool: Mapping[str, Any]) -> dict[str, Any]:
    """One tool definition in the OpenAI envelope, checked; raises ValueError naming the problem."""
    if not isinstance(tool, Mapping):
        raise ValueError(f"a tool definition must be a mapping, got {type(tool).__name__}")
    if "function" in tool:
        kind = tool.get("type", "function")
        if kind != "function":
            raise ValueError(f"tool type {kind!r} is not supported (only 'function')")
        function = tool["function"]
        if not isinstance(function, Mapping):
            raise ValueError("a tool's 'function' must be a mapping")
    elif "name" in tool:
        function = tool
    else:
        raise ValueError(
            "a tool definition needs a 'function' object (OpenAI envelope) or a 'name' (bare function object)"
        )
    name = function.get("name")
    if not isinstance(name, str) or not name.strip():
        raise ValueError(f"a tool's function needs a non-empty string 'name', got {name!r}")
    parameters = function.get("parameters")
    if parameters is not None and not isinstance(parameters, Mapping):
        raise ValueError(f"tool {name!r}: 'parameters' must be a JSON schema object")
    body = {key: value for key, value in function.items() if key != "type"}
    return {"type": "function", "function": body}


def normalize_tools(tools: Sequence[Mapping[str, Any]] | None) -> list[dict[str, Any]] | None:
    """Every definition in the OpenAI envelope; None (or empty) stays None. Names must be unique."""
    if not tools:
        return None
    if isinstance(tools, Mapping) or isinstance(tools, (str, bytes)):
        raise ValueError("tools must be a list of tool definitions")
    normalized = [normalize_tool(tool) for tool in tools]
    names = [tool["function"]["name"] for tool in normalized]
    duplicates = sorted({name for name in names if names.count(name) > 1})
    if duplicates:
        raise ValueError(f"tool names must be unique; offered twice: {duplicates}")
    return normalized


def tool_names(tools: Sequence[Mapping[str, Any]] | None) -> frozenset[str]:
    """The function names of normalized tool definitions."""
    return frozenset(tool["function"]["name"] for tool in tools or ())


def parameter_types(tools: Sequence[Mapping[str, Any]] | None, name: str) -> dict[str, Any]:
    """The JSON-schema ``properties`` of the named tool ({} when unknown)."""
    for tool in tools or ():
        function = tool["function"]
        if function["name"] == name:
            properties = (function.get("parameters") or {}).get("properties") or {}
            return dict(properties) if isinstance(properties, Mapping) else {}
    return {}


def call_arguments(value: Any) -> dict[str, Any] | None:
    """Arguments as an object: a mapping as is, a JSON string parsed, None absent; None when invalid."""
    if value is None:
        return {}
    if isinstance(value, str):
        try:
            value = json.loads(value) if value.strip() else {}
        except json.JSONDecodeError:
            return None
    return dict(value) if isinstance(value, Mapping) else None

"""Whether a turn offered tools must call one: ``auto``, ``none``, ``required`` or a named function.

The Python API takes OpenAI's values (``"auto"``, ``"none"``, ``"required"``,
``{"type": "function", "function": {"name": ...}}``), the Responses API's
``{"type": "function", "name": ...}`` and a bare function name; the server
parses its bodies into the same :class:`ToolChoice`.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

AUTO, NONE, REQUIRED = "auto", "none", "required"


@dataclass(frozen=True)
class ToolChoice:
    """``mode`` is auto, none or required; ``name`` pins one function (a required call to it)."""

    mode: str = AUTO
    name: str | None = None

    @property
    def required(self) -> bool:
        return self.mode == REQUIRED


def tool_choice_from(value: Any, tools: Sequence[Mapping[str, Any]] | None) -> ToolChoice:
    """The :class:`ToolChoice` ``value`` asks for on a turn offered ``tools`` (normalized definitions);
    ValueError naming the problem otherwise."""
    if value is None or isinstance(value, ToolChoice):
        choice = value or ToolChoice(AUTO)
    elif value in (AUTO, NONE, REQUIRED):
        choice = ToolChoice(value)
    elif isinstance(value, str):
        choice = ToolChoice(REQUIRED, value)
    elif isinstance(value, Mapping) and value.get("type") == "function":
        function = value.get("function")
        name = function.get("name") if isinstance(function, Mapping) else value.get("name")
        if not isinstance(name, str) or not name:
            raise ValueError(
                "tool_choice names no function: give {'type': 'function', 'function': {'name': ...}}"
            )
        choice = ToolChoice(REQUIRED, name)
    else:
        raise ValueError(
            "tool_choice must be 'auto', 'none', 'required', a function name or "
            f"{{'type': 'function', 'function': {{'name': ...}}}}, got {value!r}"
        )
    offered = [tool["function"]["name"] for tool in tools or ()]
    if choice.required and not offered:
        raise ValueError(f"tool_choice {value!r} needs 'tools' (none are offered)")
    if choice.name is not None and choice.name not in offered:
        raise ValueError(f"tool_choice names {choice.name!r}, which is not among the tools offered")
    return choice


def chosen_tools(tools: list[dict[str, Any]] | None, choice: ToolChoice) -> list[dict[str, Any]] | None:
    """The tools the prompt offers under ``choice``: none for ``none``, only the named one when one is
    named (a small model then writes that call rather than another)."""
    if not tools or choice.mode == NONE:
        return None
    if choice.name is not None:
        return [tool for tool in tools if tool["function"]["name"] == choice.name]
    return tools

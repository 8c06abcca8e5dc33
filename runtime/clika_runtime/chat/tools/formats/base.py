"""What a tool-call format is: the syntaxes a reply's calls may take, plus the prompt side.

A format lists :class:`CallSyntax` objects. The streaming parser
(:mod:`clika_runtime.chat.tools.stream`) finds a syntax's start marker in the
reply, asks the syntax where the call block ends (``block_end``), and has it
parse the block into :class:`ToolCall` objects (``parse``). The prompt side
(``tools_block``, ``format_calls``, ``format_tool_result``) serves chat
templates that have no tools slot of their own. ``call_rules`` is the grammar
a required call is decoded under (:mod:`clika_runtime.chat.tools.formats.call_grammar`).
"""

from __future__ import annotations

import json
import re
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from clika_runtime.chat.tools.definitions import ToolCall, call_arguments, new_call_id

if TYPE_CHECKING:
    from clika_runtime.chat.tools.formats.call_grammar import CallRules


@dataclass(frozen=True)
class ParseContext:
    """What a syntax needs to turn a block into calls: the offered tools and how ids are made."""

    tools: tuple[Mapping[str, Any], ...] = ()
    names: frozenset[str] | None = None  # None: any name counts (no tool list known)
    id_length: int = 24
    id_prefix: str = "call_"

    def new_id(self) -> str:
        return new_call_id(self.id_length, self.id_prefix)

    def offered(self, name: str) -> bool:
        return self.names is None or name in self.names


class CallSyntax:
    """One way a call may be written. Subclasses define ``block_end`` and ``parse``.

    ``at_reply_start``: recognized only where the visible text so far is blank
    (bare JSON, a pythonic list). ``implicit``: the markup also occurs in plain
    answers (a fenced JSON block), so the block counts as a call only when every
    name in it is an offered tool; otherwise it stays visible text.
    """

    start: str = ""
    at_reply_start: bool = False
    implicit: bool = False

    def viable(self, block: str) -> bool:
        """False once ``block`` (start marker onward) can no longer be a call: release it early."""
        return True

    def block_end(self, block: str, final: bool) -> int | None:
        """Where the call block ends in ``block`` (exclusive), or None to wait for more text.

        With ``final`` (the reply ended) the answer is never None.
        """
        raise NotImplementedError

    def parse(self, block: str, context: ParseContext) -> list[ToolCall] | None:
        """The calls in a complete block, or None when it is not a valid call."""
        raise NotImplementedError


@dataclass(frozen=True)
class ToolCallFormat:
    """A registered tool-call format: how replies write calls, how prompts describe tools, and
    (``call_rules``; None when its calls cannot be constrained) the grammar of a required call."""

    name: str
    syntaxes: tuple[CallSyntax, ...]
    id_length: int = 24
    id_prefix: str = "call_"
    description: str = field(default="", compare=False)
    call_rules: CallRules | None = field(default=None, compare=False, repr=False)

    def context(self, tools: Sequence[Mapping[str, Any]] | None) -> ParseContext:
        """The parse context for a turn offered ``tools`` (normalized definitions)."""
        names = frozenset(tool["function"]["name"] for tool in tools) if tools else None
        return ParseContext(tuple(tools or ()), names, self.id_length, self.id_prefix)

    def tools_block(self, tools: Sequence[Mapping[str, Any]]) -> str:
        """System-turn text offering ``tools`` and saying how to call them (hermes wording by default)."""
        lines = "\n".join(json.dumps(tool, ensure_ascii=False) for tool in tools)
        return (
            "# Tools\n\nYou may call one or more functions to assist with the user query.\n\n"
            "You are provided with function signatures within <tools></tools> XML tags:\n"
            f"<tools>\n{lines}\n</tools>\n\n"
            "For each function call, return a json object with function name and arguments within "
            "<tool_call></tool_call> XML tags:\n<tool_call>\n"
            '{"name": <function-name>, "arguments": <args-json-object>}\n</tool_call>'
        )

    def format_calls(self, calls: Sequence[Mapping[str, Any]]) -> str:
        """An earlier assistant turn's calls written the way this format's model writes them."""
        return "\n".join(
            "<tool_call>\n"
            + json.dumps({"name": name, "arguments": arguments}, ensure_ascii=False)
            + "\n</tool_call>"
            for name, arguments in (call_name_and_arguments(call) for call in calls)
        )

    def format_tool_result(self, content: str, name: str = "") -> str:
        """A tool's answer as text for a template that has no tool role."""
        return f"<tool_response>\n{content}\n</tool_response>"


def call_name_and_arguments(call: Mapping[str, Any]) -> tuple[str, dict[str, Any]]:
    """(name, arguments object) of a history call in the OpenAI shape or the flat one."""
    function = call.get("function", call)
    arguments = call_arguments(function.get("arguments"))
    return str(function.get("name", "")), arguments if arguments is not None else {}


def call_from_object(obj: Any, raw: str, context: ParseContext) -> ToolCall | None:
    """A ToolCall from a decoded JSON call object, or None when the object is not one.

    Accepts ``{"name", "arguments"}``, ``{"name", "parameters"}`` (llama 3) and
    ``{"function": {"name", "arguments"}}`` (the OpenAI shape); arguments may be
    an object or a JSON string holding one.
    """
    if not isinstance(obj, Mapping):
        return None
    if isinstance(obj.get("function"), Mapping):
        call_id = obj.get("id")
        obj = obj["function"]
    else:
        call_id = obj.get("id")
    name = obj.get("name")
    if not isinstance(name, str) or not name:
        return None
    arguments = call_arguments(obj.get("arguments", obj.get("parameters")))
    if arguments is None:
        return None
    if not isinstance(call_id, str) or not call_id:
        call_id = context.new_id()
    return ToolCall(id=call_id, name=name, arguments=arguments, raw=raw)


def calls_from_json(text: str, raw: str, context: ParseContext) -> list[ToolCall] | None:
    """Calls from JSON text holding one call object or a list of them; None unless all are valid."""
    try:
        value = json.loads(text)
    except json.JSONDecodeError:
        return None
    items = value if isinstance(value, list) else [value]
    calls = [call_from_object(item, raw, context) for item in items]
    if not calls or any(call is None for call in calls):
        return None
    return calls  # type: ignore[return-value]


_WHITESPACE = re.compile(r"\s*")


def skip_space(text: str, pos: int) -> int:
    """The index of the first non-whitespace character at or after ``pos``."""
    return _WHITESPACE.match(text, pos).end()  # type: ignore[union-attr]


def scan_json_value(text: str, pos: int) -> int | None:
    """End (exclusive) of the JSON object or array opening at ``text[pos]``; None if the text ends first.

    Brackets inside strings do not count, so markup-like text in a JSON string
    never ends a call.
    """
    return scan_brackets(text, pos, opening="{[", closing="}]", quotes='"', string_end=_json_string_end)


def scan_brackets(
    text: str,
    pos: int,
    *,
    opening: str,
    closing: str,
    quotes: str,
    string_end: Callable[[str, int], int | None],
) -> int | None:
    """End (exclusive) of the bracketed span opening at ``text[pos]``; None if the text ends first.

    A string (opened by a character of ``quotes``, its end found by ``string_end``) is
    skipped whole, so brackets inside it do not count; the formats differ only in those.
    """
    depth = 0
    index = pos
    while index < len(text):
        char = text[index]
        if char in quotes:
            index = string_end(text, index)
            if index is None:
                return None
            continue
        if char in opening:
            depth += 1
        elif char in closing:
            depth -= 1
            if depth <= 0:
                return index + 1
        index += 1
    return None


def _json_string_end(text: str, start: int) -> int | None:
    """End (exclusive) of the JSON string opening at ``text[start]``; None if it never closes."""
    index = start + 1
    while index < len(text):
        if text[index] == "\\":
            index += 2
            continue
        if text[index] == '"':
            return index + 1
        index += 1
    return None


def split_json_values(text: str, separator: str) -> list[str] | None:
    """JSON objects/arrays written one after another (optionally ``separator``-joined); None if not so."""
    values = []
    pos = skip_space(text, 0)
    while pos < len(text):
        if text[pos] not in "{[":
            return None
        end = scan_json_value(text, pos)
        if end is None:
            return None
        values.append(text[pos:end])
        pos = skip_space(text, end)
        if separator and text.startswith(separator, pos):
            pos = skip_space(text, pos + len(separator))
    return values

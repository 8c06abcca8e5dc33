"""Pythonic calls: the reply is a Python list of calls, ``[get_weather(city="Paris"), now()]``.

The list is read with :mod:`ast` (never executed): every element must be a
call of a (dotted) name with keyword arguments whose values are literals
(``true``/``false``/``null`` read as JSON's).
"""

from __future__ import annotations

import ast
import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from clika_runtime.chat.tools.definitions import ToolCall
from clika_runtime.chat.tools.formats.base import (
    CallSyntax,
    ParseContext,
    ToolCallFormat,
    call_name_and_arguments,
    scan_brackets,
    skip_space,
)
from clika_runtime.chat.tools.formats.call_grammar import (
    LiteralTerm,
    arguments_schema,
    json_term,
    keyword_items,
    listed,
)

_JSON_NAMES = {"true": True, "false": False, "null": None}
COMMA = '", "'  # the separator of the format's own examples (and what the models were trained on)


class PythonicListSyntax(CallSyntax):
    start = "["
    at_reply_start = True
    implicit = True

    def viable(self, block: str) -> bool:
        # "[" then a name then "(": anything else ("[1]", "[see below]") is text.
        pos = skip_space(block, 1)
        if pos == len(block):
            return True
        if not (block[pos].isalpha() or block[pos] == "_"):
            return False
        while pos < len(block) and (block[pos].isalnum() or block[pos] in "_."):
            pos += 1
        pos = skip_space(block, pos)
        return pos == len(block) or block[pos] == "("

    def block_end(self, block: str, final: bool) -> int | None:
        end = scan_python_brackets(block, 0)
        if end is None:
            return len(block) if final else None
        return end

    def parse(self, block: str, context: ParseContext) -> list[ToolCall] | None:
        try:
            tree = ast.parse(block.strip(), mode="eval")
        except (SyntaxError, ValueError, RecursionError, MemoryError):
            return None
        if not isinstance(tree.body, ast.List) or not tree.body.elts:
            return None
        calls = [_call_from_node(node, block, context) for node in tree.body.elts]
        return None if any(call is None for call in calls) else calls  # type: ignore[return-value]


def scan_python_brackets(text: str, pos: int) -> int | None:
    """End (exclusive) of the bracketed Python expression opening at ``text[pos]``; strings skipped."""
    return scan_brackets(text, pos, opening="([{", closing=")]}", quotes="'\"", string_end=_string_end)


def _string_end(text: str, start: int) -> int | None:
    quote = text[start] * 3 if text.startswith(text[start] * 3, start) else text[start]
    index = start + len(quote)
    while index < len(text):
        if text[index] == "\\":
            index += 2
            continue
        if text.startswith(quote, index):
            return index + len(quote)
        index += 1
    return None


def _call_from_node(node: ast.expr, raw: str, context: ParseContext) -> ToolCall | None:
    if not isinstance(node, ast.Call) or node.args:
        return None
    name = _dotted_name(node.func)
    if name is None:
        return None
    arguments = {}
    for keyword in node.keywords:
        if keyword.arg is None:
            return None
        try:
            arguments[keyword.arg] = _literal(keyword.value)
        except ValueError:
            return None
    return ToolCall(id=context.new_id(), name=name, arguments=arguments, raw=raw)


def _dotted_name(node: ast.expr) -> str | None:
    if isinstance(node, ast.Name):
        return node.id
    if isinstance(node, ast.Attribute):
        owner = _dotted_name(node.value)
        return None if owner is None else f"{owner}.{node.attr}"
    return None


def _literal(node: ast.expr) -> Any:
    if isinstance(node, ast.Name) and node.id in _JSON_NAMES:
        return _JSON_NAMES[node.id]
    if isinstance(node, ast.List):
        return [_literal(item) for item in node.elts]
    if isinstance(node, ast.Dict):
        if any(key is None for key in node.keys):
            raise ValueError("dict unpacking is not a literal")
        return {_literal(key): _literal(value) for key, value in zip(node.keys, node.values, strict=True)}  # type: ignore[arg-type]
    return ast.literal_eval(node)


def _python_literal(value: Any) -> str:
    if isinstance(value, (dict, list, str, bool, int, float)) or value is None:
        return repr(value)
    return repr(json.loads(json.dumps(value)))


@dataclass(frozen=True)
class PythonicFormat(ToolCallFormat):
    """The prompt side describes the Python-list syntax."""

    def tools_block(self, tools: Sequence[Mapping[str, Any]]) -> str:
        listing = "\n".join(json.dumps(tool, ensure_ascii=False) for tool in tools)
        return (
            "You are an expert in composing functions. If you decide to invoke any of the function(s), "
            "you MUST put it in the format of [func_name1(params_name1=params_value1, "
            "params_name2=params_value2...), func_name2(params)]\n"
            "You SHOULD NOT include any other text in the response if you call a function.\n"
            f"Here is a list of functions in JSON format that you can invoke.\n{listing}"
        )

    def format_calls(self, calls: Sequence[Mapping[str, Any]]) -> str:
        written = []
        for call in calls:
            name, arguments = call_name_and_arguments(call)
            keywords = ", ".join(f"{key}={_python_literal(value)}" for key, value in arguments.items())
            written.append(f"{name}({keywords})")
        return "[" + ", ".join(written) + "]"

    def format_tool_result(self, content: str, name: str = "") -> str:
        return content


def pythonic_call_rules(tools: list[dict[str, Any]], literal: LiteralTerm, parallel: bool) -> list[str]:
    """A required call: ``[get_weather(city="Paris"), now()]``, keyword arguments with JSON values."""
    more = ' (", " call)*' if parallel else ""
    rules = [f'calls: "[" call{more} "]"']
    rules.append("call: " + " | ".join(f"call_{index}" for index in range(len(tools))))
    for index, tool in enumerate(tools):
        arguments = keyword_items(
            arguments_schema(tool), lambda key, value: f"{json.dumps(key + '=')} {json_term(value)}"
        )
        name = json.dumps(tool["function"]["name"] + "(")
        rules.append(f'call_{index}: {name} {listed(arguments, COMMA)} ")"')
    return rules


FORMAT = PythonicFormat(
    name="pythonic",
    syntaxes=(PythonicListSyntax(),),
    description="[func_name(arg=value), ...]",
    call_rules=pythonic_call_rules,
)


def detect(template_source: str) -> bool:
    """The template describes calls as a Python list of func_name(params=...) calls."""
    return "[func_name1(" in template_source or "[func_name(" in template_source

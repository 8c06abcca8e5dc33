"""Mistral calls: ``[TOOL_CALLS][{"name": ..., "arguments": {...}}, ...]``.

Newer Mistral tokenizers write one call per marker instead:
``[TOOL_CALLS]name[ARGS]{...}`` (optionally ``name[CALL_ID]abc123def[ARGS]{...}``);
both read. Mistral templates check that call ids are 9 alphanumerics, so the
ids made here are.
"""

from __future__ import annotations

import json
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from clika_runtime.chat.tools.definitions import ToolCall, call_arguments
from clika_runtime.chat.tools.formats.base import (
    CallSyntax,
    ParseContext,
    ToolCallFormat,
    call_name_and_arguments,
    calls_from_json,
    scan_json_value,
    skip_space,
)
from clika_runtime.chat.tools.formats.call_grammar import LiteralTerm, call_object, json_term

START = "[TOOL_CALLS]"
_NAMED = re.compile(r"([\w.\-]+)(?:\[CALL_ID\]([A-Za-z0-9]+))?\[ARGS\]")
_NAMED_PREFIX = re.compile(r"[\w.\-]*(?:\[|\Z)")


class MistralSyntax(CallSyntax):
    start = START

    def viable(self, block: str) -> bool:
        body = skip_space(block, len(START))
        return body == len(block) or block[body] in "{[" or bool(_NAMED_PREFIX.match(block, body))

    def block_end(self, block: str, final: bool) -> int | None:
        body = skip_space(block, len(START))
        if body < len(block) and block[body] in "{[":
            return _json_end(block, body, final)
        named = _NAMED.match(block, body)
        if named is None:
            return len(block) if final else None
        return _json_end(block, skip_space(block, named.end()), final)

    def parse(self, block: str, context: ParseContext) -> list[ToolCall] | None:
        body = skip_space(block, len(START))
        named = _NAMED.match(block, body)
        if named is None:
            return calls_from_json(block[body:].strip(), block, context)
        arguments = call_arguments(block[named.end() :].strip())
        if arguments is None:
            return None
        call_id = named.group(2) or context.new_id()
        return [ToolCall(id=call_id, name=named.group(1), arguments=arguments, raw=block)]


def _json_end(block: str, pos: int, final: bool) -> int | None:
    end = scan_json_value(block, pos) if pos < len(block) and block[pos] in "{[" else None
    if end is None:
        return len(block) if final else None
    return end


@dataclass(frozen=True)
class MistralFormat(ToolCallFormat):
    """The prompt side speaks Mistral's control words."""

    def tools_block(self, tools: Sequence[Mapping[str, Any]]) -> str:
        return (
            f"[AVAILABLE_TOOLS]{json.dumps(list(tools), ensure_ascii=False)}[/AVAILABLE_TOOLS]\n"
            'To call tools, answer with [TOOL_CALLS] and a JSON list: [TOOL_CALLS][{"name": '
            '<function-name>, "arguments": <args-json-object>}]'
        )

    def format_calls(self, calls: Sequence[Mapping[str, Any]]) -> str:
        items = []
        for call in calls:
            name, arguments = call_name_and_arguments(call)
            item = {"name": name, "arguments": arguments}
            if call.get("id"):
                item["id"] = call["id"]
            items.append(item)
        return START + json.dumps(items, ensure_ascii=False)

    def format_tool_result(self, content: str, name: str = "") -> str:
        return f"[TOOL_RESULTS]{json.dumps({'content': content}, ensure_ascii=False)}[/TOOL_RESULTS]"


def mistral_call_rules(tools: list[dict[str, Any]], literal: LiteralTerm, parallel: bool) -> list[str]:
    """A required call in the list form: ``[TOOL_CALLS][{"name": ..., "arguments": {...}}, ...]``."""
    listing: dict[str, Any] = {"type": "array", "items": call_object(tools, "arguments"), "minItems": 1}
    if not parallel:
        listing["maxItems"] = 1
    return [f"calls: {literal(START)} {json_term(listing)}"]


FORMAT = MistralFormat(
    name="mistral",
    syntaxes=(MistralSyntax(),),
    id_length=9,
    id_prefix="",
    description='[TOOL_CALLS][{"name": ..., "arguments": {...}}]',
    call_rules=mistral_call_rules,
)


def detect(template_source: str) -> bool:
    """The template writes calls after the [TOOL_CALLS] control word."""
    return START in template_source

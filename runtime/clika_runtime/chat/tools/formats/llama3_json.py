"""Llama 3.1 / 3.2 calls: a bare ``{"name": ..., "parameters": {...}}`` object.

The object starts the reply (calls joined by ``;``), optionally after
``<|python_tag|>``. A bare object counts as a call only when it names an offered
tool, so a reply that is JSON for the user stays text.
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from clika_runtime.chat.tools.formats.base import ToolCallFormat, call_name_and_arguments
from clika_runtime.chat.tools.formats.call_grammar import LiteralTerm, call_object, joined, json_term
from clika_runtime.chat.tools.formats.syntaxes import FencedJsonSyntax, JsonSequenceSyntax

PYTHON_TAG = "<|python_tag|>"


def llama3_call_rules(tools: list[dict[str, Any]], literal: LiteralTerm, parallel: bool) -> list[str]:
    """A required call: ``{"name": ..., "parameters": {...}}``, several joined by ``; ``."""
    return [joined("call", '"; "', parallel), f"call: {json_term(call_object(tools, 'parameters'))}"]


@dataclass(frozen=True)
class Llama3JsonFormat(ToolCallFormat):
    """The prompt side uses Llama 3's wording and ``parameters`` key."""

    def tools_block(self, tools: Sequence[Mapping[str, Any]]) -> str:
        listing = "\n\n".join(json.dumps(tool, indent=4, ensure_ascii=False) for tool in tools)
        return (
            "Given the following functions, please respond with a JSON for a function call with its proper "
            "arguments that best answers the given prompt.\n\n"
            'Respond in the format {"name": function name, "parameters": dictionary of argument name and its '
            f"value}}. Do not use variables.\n\n{listing}"
        )

    def format_calls(self, calls: Sequence[Mapping[str, Any]]) -> str:
        return "; ".join(
            json.dumps({"name": name, "parameters": arguments}, ensure_ascii=False)
            for name, arguments in (call_name_and_arguments(call) for call in calls)
        )

    def format_tool_result(self, content: str, name: str = "") -> str:
        return content


FORMAT = Llama3JsonFormat(
    name="llama3_json",
    syntaxes=(JsonSequenceSyntax(PYTHON_TAG), JsonSequenceSyntax("{"), FencedJsonSyntax()),
    description='{"name": ..., "parameters": {...}} (optionally after <|python_tag|>)',
    call_rules=llama3_call_rules,
)


def detect(template_source: str) -> bool:
    """Llama 3 templates: the python tag, or the 'name / parameters' JSON instruction."""
    return PYTHON_TAG in template_source or '"parameters": dictionary of argument name' in template_source

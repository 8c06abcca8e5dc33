"""Hermes / Qwen2.5 calls: ``<tool_call>{"name": ..., "arguments": {...}}</tool_call>``.

Small models of this family often drop the tags: they answer with the bare call
object, or with a ```json fence around it (Qwen2.5-Coder does both). Those read
as calls too, but only when the name is an offered tool, so a reply that is
JSON for the user stays text. A required call is decoded in the tagged form.
"""

from __future__ import annotations

from typing import Any

from clika_runtime.chat.tools.formats.base import ToolCallFormat
from clika_runtime.chat.tools.formats.call_grammar import LiteralTerm, call_object, joined, json_term
from clika_runtime.chat.tools.formats.syntaxes import FencedJsonSyntax, JsonSequenceSyntax, TaggedSyntax


def tagged_call_rules(tools: list[dict[str, Any]], literal: LiteralTerm, parallel: bool) -> list[str]:
    """``<tool_call>\\n{"name": ..., "arguments": {...}}\\n</tool_call>``, several one per line."""
    opening, closing = literal("<tool_call>"), literal("</tool_call>")
    return [
        joined("call", '"\\n"', parallel),
        f'call: {opening} "\\n" {json_term(call_object(tools, "arguments"))} "\\n" {closing}',
    ]


FORMAT = ToolCallFormat(
    name="hermes",
    syntaxes=(
        TaggedSyntax("<tool_call>", "</tool_call>"),
        FencedJsonSyntax(),
        JsonSequenceSyntax("{", separator=""),
    ),
    description='<tool_call>{"name": ..., "arguments": {...}}</tool_call>',
    call_rules=tagged_call_rules,
)


def detect(template_source: str) -> bool:
    """The template writes or describes calls between <tool_call> tags."""
    return "<tool_call>" in template_source

"""Hermes / Qwen2.5 calls: ``<tool_call>{"name": ..., "arguments": {...}}</tool_call>``."""

from __future__ import annotations

from clika_runtime.chat.tool_formats.base import ToolCallFormat
from clika_runtime.chat.tool_formats.syntaxes import FencedJsonSyntax, TaggedSyntax

FORMAT = ToolCallFormat(
    name="hermes",
    syntaxes=(TaggedSyntax("<tool_call>", "</tool_call>"), FencedJsonSyntax()),
    description='<tool_call>{"name": ..., "arguments": {...}}</tool_call>',
)


def detect(template_source: str) -> bool:
    """The template writes or describes calls between <tool_call> tags."""
    return "<tool_call>" in template_source

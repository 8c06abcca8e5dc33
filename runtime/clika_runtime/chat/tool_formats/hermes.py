"""Hermes / Qwen2.5 calls: ``<tool_call>{"name": ..., "arguments": {...}}</tool_call>``.

Small models of this family often drop the tags: they answer with the bare call
object, or with a ```json fence around it (Qwen2.5-Coder does both). Those read
as calls too, but only when the name is an offered tool, so a reply that is
JSON for the user stays text.
"""

from __future__ import annotations

from clika_runtime.chat.tool_formats.base import ToolCallFormat
from clika_runtime.chat.tool_formats.syntaxes import FencedJsonSyntax, JsonSequenceSyntax, TaggedSyntax

FORMAT = ToolCallFormat(
    name="hermes",
    syntaxes=(
        TaggedSyntax("<tool_call>", "</tool_call>"),
        FencedJsonSyntax(),
        JsonSequenceSyntax("{", separator=""),
    ),
    description='<tool_call>{"name": ..., "arguments": {...}}</tool_call>',
)


def detect(template_source: str) -> bool:
    """The template writes or describes calls between <tool_call> tags."""
    return "<tool_call>" in template_source

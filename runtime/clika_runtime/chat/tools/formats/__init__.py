"""Tool-call formats: one module per format, and the registry that picks one for a template.

``detect_format(template_source)`` asks the formats in a fixed order (the most
specific markup first, ``generic`` last); ``get_format(name)`` returns a
registered format by name.
"""

from __future__ import annotations

from collections.abc import Callable

from clika_runtime.chat.tools.formats import generic, hermes, llama3_json, mistral, pythonic, qwen_xml
from clika_runtime.chat.tools.formats.base import CallSyntax, ParseContext, ToolCallFormat

# Probe order: specific markup before markup it contains (qwen_xml also uses <tool_call>,
# pythonic Llama templates may also carry <|python_tag|>).
_DETECTION_ORDER: tuple[tuple[ToolCallFormat, Callable[[str], bool]], ...] = (
    (mistral.FORMAT, mistral.detect),
    (qwen_xml.FORMAT, qwen_xml.detect),
    (hermes.FORMAT, hermes.detect),
    (pythonic.FORMAT, pythonic.detect),
    (llama3_json.FORMAT, llama3_json.detect),
    (generic.FORMAT, generic.detect),
)

FORMATS: dict[str, ToolCallFormat] = {fmt.name: fmt for fmt, _ in _DETECTION_ORDER}


def get_format(name: str) -> ToolCallFormat:
    """The registered format called ``name``; ValueError names the known ones otherwise."""
    try:
        return FORMATS[name]
    except KeyError:
        raise ValueError(f"unknown tool-call format {name!r}; known formats: {sorted(FORMATS)}") from None


def detect_format(template_source: str) -> ToolCallFormat:
    """The format a chat template's source text speaks (``generic`` when none matches)."""
    for fmt, detect in _DETECTION_ORDER:
        if detect(template_source):
            return fmt
    return generic.FORMAT


__all__ = ["FORMATS", "CallSyntax", "ParseContext", "ToolCallFormat", "detect_format", "get_format"]

"""Qwen3-Coder calls: ``<tool_call><function=name><parameter=x>...</parameter></function></tool_call>``.

Models of this family sometimes drop the ``<tool_call>`` wrapper, so a bare
``<function=...>...</function>`` block reads as a call too. A required call is
decoded under :mod:`clika_runtime.chat.tools.formats.qwen_xml_grammar`.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from clika_runtime.chat.tools.definitions import ToolCall
from clika_runtime.chat.tools.formats.base import (
    ParseContext,
    ToolCallFormat,
    call_name_and_arguments,
)
from clika_runtime.chat.tools.formats.qwen_xml_grammar import qwen_xml_call_rules
from clika_runtime.chat.tools.formats.syntaxes import FencedJsonSyntax, TaggedSyntax
from clika_runtime.chat.tools.formats.xml_body import (
    FUNCTION_END,
    FUNCTION_START,
    format_xml_call,
    parse_xml_calls,
)


class BareFunctionSyntax(TaggedSyntax):
    """``<function=name>...</function>`` without the ``<tool_call>`` wrapper."""

    def __init__(self) -> None:
        super().__init__(FUNCTION_START, FUNCTION_END)

    def block_end(self, block: str, final: bool) -> int | None:
        close = block.find(self.end)
        if close < 0:
            return len(block) if final else None
        return close + len(self.end)

    def parse(self, block: str, context: ParseContext) -> list[ToolCall] | None:
        return parse_xml_calls(block.strip(), block, context)


@dataclass(frozen=True)
class QwenXmlFormat(ToolCallFormat):
    """The prompt side speaks the XML syntax."""

    def tools_block(self, tools: Sequence[Mapping[str, Any]]) -> str:
        return (
            super().tools_block(tools).split("For each function call")[0]
            + "If you choose to call a function ONLY reply in the following format with NO suffix:\n\n"
            "<tool_call>\n<function=example_function_name>\n<parameter=example_parameter_1>\n"
            "value_1\n</parameter>\n</function>\n</tool_call>"
        )

    def format_calls(self, calls: Sequence[Mapping[str, Any]]) -> str:
        return "\n".join(
            f"<tool_call>\n{format_xml_call(*call_name_and_arguments(call))}\n</tool_call>" for call in calls
        )


FORMAT = QwenXmlFormat(
    name="qwen_xml",
    syntaxes=(TaggedSyntax("<tool_call>", "</tool_call>"), BareFunctionSyntax(), FencedJsonSyntax()),
    description="<tool_call><function=name><parameter=x>...</parameter></function></tool_call>",
    call_rules=qwen_xml_call_rules,
)


def detect(template_source: str) -> bool:
    """The template writes calls as <function=...> / <parameter=...> elements."""
    return "<function=" in template_source or "<parameter=" in template_source

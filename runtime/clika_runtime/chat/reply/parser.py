"""A reply's channels: reasoning, visible text and tool calls, from its text pieces.

:class:`ReplyParser` chains the reasoning splitter (when the model has a
reasoning channel) and the tool-call parser (when the turn offered tools), so
the reply's text pieces come out as visible pieces and :class:`ToolCall`
objects, with the reasoning collected on the side.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING, Any

from clika_runtime.chat.reply.reasoning import REASONING, ReasoningStream
from clika_runtime.chat.tools.definitions import ToolCall
from clika_runtime.chat.tools.formats.base import ToolCallFormat
from clika_runtime.chat.tools.stream import ToolCallStream

if TYPE_CHECKING:
    from clika_runtime.chat.templates.chat_template import ChatTemplate


class ReplyParser:
    """Feed reply text pieces; get visible text pieces and tool calls, reasoning kept aside.

    ``reasoning``: split a ``<think>`` block off (``start_in_reasoning`` when the
    prompt left one open). ``fmt`` and ``tools``: read calls in that format
    (no format: every piece is visible text).
    """

    def __init__(
        self,
        *,
        reasoning: bool = False,
        start_in_reasoning: bool = False,
        fmt: ToolCallFormat | None = None,
        tools: Sequence[Mapping[str, Any]] | None = None,
    ) -> None:
        self._reasoning = ReasoningStream(start_in_reasoning) if reasoning or start_in_reasoning else None
        self._calls = ToolCallStream(fmt, tools) if fmt is not None and tools else None
        self._reasoning_parts: list[str] = []
        self._text_parts: list[str] = []
        self.tool_calls: list[ToolCall] = []

    @property
    def reasoning(self) -> str:
        """The reasoning text so far."""
        return "".join(self._reasoning_parts)

    @property
    def text(self) -> str:
        """The visible text so far."""
        return "".join(self._text_parts)

    @property
    def malformed(self) -> list[str]:
        """Call markup that did not parse (it stays in the visible text)."""
        return list(self._calls.malformed) if self._calls is not None else []

    def feed(self, piece: str) -> list[str | ToolCall]:
        """Add a reply piece; return the visible pieces and calls now decided."""
        if self._reasoning is None:
            return self._content(piece, final=False)
        return self._route(self._reasoning.feed(piece), final=False)

    def finish(self) -> list[str | ToolCall]:
        """The reply ended: release everything held."""
        if self._reasoning is None:
            return self._content("", final=True)
        return self._route(self._reasoning.finish(), final=True)

    def _route(self, pieces: list[tuple[str, str]], final: bool) -> list[str | ToolCall]:
        out: list[str | ToolCall] = []
        for channel, text in pieces:
            if channel == REASONING:
                self._reasoning_parts.append(text)
            else:
                out += self._content(text, final=False)
        if final:
            out += self._content("", final=True)
        return out

    def _content(self, text: str, final: bool) -> list[str | ToolCall]:
        if self._calls is None:
            out: list[str | ToolCall] = [text] if text else []
        else:
            out = self._calls.feed(text) if text else []
            if final:
                out += self._calls.finish()
        for item in out:
            if isinstance(item, ToolCall):
                self.tool_calls.append(item)
            else:
                self._text_parts.append(item)
        return out


def reply_parser_for(
    template: ChatTemplate | None, prompt: str, tools: Sequence[Mapping[str, Any]] | None
) -> ReplyParser:
    """The parser for a reply to ``prompt`` (rendered by ``template``) on a turn offered ``tools``."""
    if template is None:
        return ReplyParser()
    return ReplyParser(
        reasoning=template.supports_thinking,
        start_in_reasoning=template.opens_reasoning(prompt),
        fmt=template.format if tools else None,
        tools=tools,
    )


def keeps_special_tokens(template: ChatTemplate | None, tools: Sequence[Mapping[str, Any]] | None) -> bool:
    """True when the reply's text must keep special tokens: call and reasoning markers may be ones."""
    return template is not None and bool(tools or template.supports_thinking)

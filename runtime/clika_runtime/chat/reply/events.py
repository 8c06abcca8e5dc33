"""One vocabulary for a reply as it streams: text, reasoning and tool-call events, then its end.

Every front end reads a reply through :class:`ReplyReader` (a
:class:`~clika_runtime.chat.reply.parser.ReplyParser` drained into these events):
``ChatSession`` (text pieces, then its calls), the async sessions (their
public ``Event``), and the server (its chunks). ``Finished`` closes a reply
with its finish reason in OpenAI's words and the engine's report.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator
from dataclasses import dataclass

from clika_runtime.chat.reply.parser import ReplyParser
from clika_runtime.chat.tools.definitions import ToolCall
from clika_runtime.engine.report import GenerationReport


@dataclass(frozen=True)
class TextDelta:
    """Visible text the reply added."""

    text: str


@dataclass(frozen=True)
class ReasoningDelta:
    """Reasoning text the reply added (never part of the visible text)."""

    text: str


@dataclass(frozen=True)
class CallDelta:
    """The reply's ``index``-th tool call, complete."""

    index: int
    call: ToolCall


@dataclass(frozen=True)
class Finished:
    """The reply ended: ``finish_reason`` in OpenAI's words, and the engine's report."""

    finish_reason: str
    report: GenerationReport


ReplyEvent = TextDelta | ReasoningDelta | CallDelta | Finished

# Engine finish reasons -> OpenAI's; "cancelled" only reaches a client that is gone.
_FINISH = {"stop": "stop", "length": "length", "cancelled": "stop"}


class ReplyReader:
    """Turns a reply's text pieces into events through ``parser`` (None: every piece is visible text)."""

    def __init__(self, parser: ReplyParser | None) -> None:
        self.parser = parser
        self.calls = 0
        self._reasoning_seen = 0

    def feed(self, piece: str) -> list[ReplyEvent]:
        """The events a text piece decides (reasoning first, then text and calls in order)."""
        if self.parser is None:
            return [TextDelta(piece)] if piece else []
        return self._events(self.parser.feed(piece), reasoning_first=True)

    def finish(self, *, reasoning_first: bool = False) -> list[ReplyEvent]:
        """The events held until the reply's end (the reasoning they decided last, unless told first)."""
        if self.parser is None:
            return []
        return self._events(self.parser.finish(), reasoning_first=reasoning_first)

    def finished(self, report: GenerationReport) -> Finished:
        """The closing event for a reply that ended with ``report``."""
        if self.calls:
            return Finished("tool_calls", report)
        return Finished(_FINISH.get(report.finish_reason, "stop"), report)

    def _events(self, items: list[str | ToolCall], *, reasoning_first: bool) -> list[ReplyEvent]:
        out: list[ReplyEvent] = []
        for item in items:
            if isinstance(item, ToolCall):
                out.append(CallDelta(self.calls, item))
                self.calls += 1
            elif item:
                out.append(TextDelta(item))
        reasoning = self._reasoning_since()
        return [*reasoning, *out] if reasoning_first else [*out, *reasoning]

    def _reasoning_since(self) -> list[ReplyEvent]:
        assert self.parser is not None
        text = self.parser.reasoning
        if len(text) <= self._reasoning_seen:
            return []
        added, self._reasoning_seen = text[self._reasoning_seen :], len(text)
        return [ReasoningDelta(added)]


def reply_events(pieces: Iterable[str], reader: ReplyReader) -> Iterator[ReplyEvent]:
    """Every event of a reply whose text pieces ``pieces`` yields, through ``reader`` (no ``Finished``)."""
    for piece in pieces:
        yield from reader.feed(piece)
    yield from reader.finish()


def visible_text(events: list[ReplyEvent]) -> list[str]:
    """The visible text pieces among a reply's events."""
    return [event.text for event in events if isinstance(event, TextDelta)]

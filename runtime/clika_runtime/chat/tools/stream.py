"""The streaming tool-call parser: reply text in, visible text and ToolCalls out.

Feed the reply's text pieces as they come; each ``feed`` returns what is
decided so far: visible text pieces and :class:`ToolCall` objects, in reply
order. Call markup never reaches the visible text: a tail that may be the start
of a call marker is held until the next piece decides it, and a call block is
held until it ends. Whitespace right before and right after a call is dropped
(it only separates calls from text).

Malformed calls (markup that opens a call but whose body does not parse) stay
in the visible text verbatim and are listed in ``malformed``: that is what
vLLM's parsers and Ollama do, and it never loses what the model wrote. A
look-alike (a ```json fence or bare JSON that names no offered tool) is plain
text and is not reported.

Parsing a whole reply is the same machine fed once (:func:`parse_tool_calls`),
so a streamed reply and the whole reply always agree.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from clika_runtime.chat.tools.definitions import ToolCall, normalize_tools
from clika_runtime.chat.tools.formats.base import CallSyntax, ToolCallFormat, skip_space

# A call block can only end on one of these characters, so a piece without one need not re-scan
# the block (re-scanning on every piece is quadratic in a long call); growth past the limit
# re-scans anyway, which bounds how long text after an unterminated call is held.
_BLOCK_CLOSERS = frozenset("}])>`")
_RESCAN_GROWTH = 256


@dataclass
class ParsedReply:
    """A whole reply split into its visible text and its calls."""

    text: str
    calls: list[ToolCall] = field(default_factory=list)
    malformed: list[str] = field(default_factory=list)


class ToolCallStream:
    """Incremental parser for one reply in one format (see the module doc)."""

    def __init__(self, fmt: ToolCallFormat, tools: Sequence[Mapping[str, Any]] | None = None) -> None:
        self._context = fmt.context(normalize_tools(tools))
        self._syntaxes = fmt.syntaxes
        self._buffer = ""  # undecided text; in a call block it starts with the block's marker
        self._syntax: CallSyntax | None = None  # the open call block's syntax
        self._blank = True  # no visible text since the reply start or the last call
        self._after_call = False  # whitespace after a call is dropped
        self._space_before_block = ""  # dropped if the block is a call, shown if not
        self._scanned = 0  # how much of the open block the last block_end call saw
        self._finished = False
        self.calls: list[ToolCall] = []
        self.malformed: list[str] = []

    def feed(self, piece: str) -> list[str | ToolCall]:
        """Add a piece of reply text; return the visible pieces and calls now decided."""
        if self._finished:
            raise ValueError("this tool-call stream is finished; start a new one for the next reply")
        self._buffer += piece
        return self._process(final=False)

    def finish(self) -> list[str | ToolCall]:
        """The reply ended: decide everything still held."""
        if self._finished:
            return []
        out = self._process(final=True)
        self._finished = True
        return out

    def _process(self, final: bool) -> list[str | ToolCall]:
        out: list[str | ToolCall] = []
        while self._scan_block(out, final) if self._syntax else self._scan_text(out, final):
            pass
        return out

    def _scan_text(self, out: list[str | ToolCall], final: bool) -> bool:
        """Emit text up to a call start (then open the block: True) or up to a held tail (False)."""
        if self._after_call:
            self._buffer = self._buffer.lstrip()
            if not self._buffer:
                return False
            self._after_call = False
        buffer = self._buffer
        found = self._find_start(buffer)
        if found is not None:
            index, syntax = found
            before = buffer[:index]
            visible = before.rstrip()
            self._emit(visible, out)
            self._space_before_block = before[len(visible) :]
            self._syntax = syntax
            self._buffer = buffer[index:]
            return True
        if final:
            self._emit(buffer, out)
            self._buffer = ""
            return False
        visible = buffer[: self._held_from(buffer)].rstrip()
        self._emit(visible, out)
        self._buffer = buffer[len(visible) :]
        return False

    def _scan_block(self, out: list[str | ToolCall], final: bool) -> bool:
        """Close the open call block once its end is known; True when it was closed."""
        syntax, block = self._syntax, self._buffer
        assert syntax is not None
        if not syntax.viable(block):
            self._show_as_text(block[: len(syntax.start)], out)
            self._buffer = block[len(syntax.start) :]
            self._scanned = 0
            return True
        if not final and not self._worth_rescan(block):
            return False
        end = syntax.block_end(block, final)
        if end is None:
            self._scanned = len(block)
            return False
        self._scanned = 0
        text, self._buffer = block[:end], block[end:]
        calls = syntax.parse(text, self._context)
        if calls and syntax.implicit and not all(self._context.offered(call.name) for call in calls):
            calls = None
        if calls:
            out.extend(calls)
            self.calls.extend(calls)
            self._syntax = None
            self._space_before_block = ""
            self._blank = True
            self._after_call = True
        else:
            if not syntax.implicit:
                self.malformed.append(text)
            self._show_as_text(text, out)
        return True

    def _worth_rescan(self, block: str) -> bool:
        # block_end is monotone (more text never moves an end already found), so skipping is safe.
        if self._scanned == 0 or len(block) - self._scanned >= _RESCAN_GROWTH:
            return True
        return not _BLOCK_CLOSERS.isdisjoint(block[self._scanned :])

    def _show_as_text(self, text: str, out: list[str | ToolCall]) -> None:
        # A block that is no call: its text (and the space before it) is the reply's.
        self._emit(self._space_before_block + text, out)
        self._space_before_block = ""
        self._syntax = None

    def _emit(self, text: str, out: list[str | ToolCall]) -> None:
        if text:
            out.append(text)
            if text.strip():
                self._blank = False

    def _allowed(self) -> list[CallSyntax]:
        return [syntax for syntax in self._syntaxes if self._blank or not syntax.at_reply_start]

    def _find_start(self, buffer: str) -> tuple[int, CallSyntax] | None:
        """The earliest complete start marker (the longest one on a tie)."""
        best: tuple[int, int, CallSyntax] | None = None
        first_text = skip_space(buffer, 0)
        for syntax in self._allowed():
            if syntax.at_reply_start:
                index = first_text if buffer.startswith(syntax.start, first_text) else -1
            else:
                index = buffer.find(syntax.start)
            if index >= 0 and (best is None or (index, -len(syntax.start)) < (best[0], best[1])):
                best = (index, -len(syntax.start), syntax)
        return None if best is None else (best[0], best[2])

    def _held_from(self, buffer: str) -> int:
        """Where the tail that may still become a start marker begins (len(buffer): nothing held)."""
        held = len(buffer)
        first_text = skip_space(buffer, 0)
        for syntax in self._allowed():
            marker = syntax.start
            for size in range(min(len(marker) - 1, len(buffer)), 0, -1):
                begin = len(buffer) - size
                if syntax.at_reply_start and begin != first_text:
                    continue
                if buffer.endswith(marker[:size]):
                    held = min(held, begin)
                    break
        return held


def parse_tool_calls(
    text: str, fmt: ToolCallFormat, tools: Sequence[Mapping[str, Any]] | None = None
) -> ParsedReply:
    """Split a whole reply into visible text and calls (the streaming parser fed once)."""
    stream = ToolCallStream(fmt, tools)
    pieces = stream.feed(text) + stream.finish()
    visible = "".join(piece for piece in pieces if isinstance(piece, str))
    return ParsedReply(visible, list(stream.calls), list(stream.malformed))

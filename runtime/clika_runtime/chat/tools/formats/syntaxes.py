"""Call syntaxes shared by several formats.

* :class:`TaggedSyntax`: ``<tool_call>{json}</tool_call>`` (or an XML body);
  the end tag is looked for only after the JSON body ends, so an end tag
  inside a JSON string does not close the call.
* :class:`FencedJsonSyntax`: a Markdown ```json fence holding a call object
  (Qwen2.5-Coder answers that way); a fence whose JSON is no call stays text.
* :class:`JsonSequenceSyntax`: call objects written bare, optionally after a
  marker such as ``<|python_tag|>`` and joined by ``;`` (llama 3).
"""

from __future__ import annotations

from clika_runtime.chat.tools.definitions import ToolCall
from clika_runtime.chat.tools.formats.base import (
    CallSyntax,
    ParseContext,
    calls_from_json,
    scan_json_value,
    skip_space,
    split_json_values,
)
from clika_runtime.chat.tools.formats.xml_body import FUNCTION_START, parse_xml_calls


class TaggedSyntax(CallSyntax):
    """A call between a start tag and an end tag; the body is JSON or ``<function=...>`` XML."""

    def __init__(self, start: str, end: str, *, implicit: bool = False) -> None:
        self.start = start
        self.end = end
        self.implicit = implicit

    def block_end(self, block: str, final: bool) -> int | None:
        body = skip_space(block, len(self.start))
        if body == len(block):
            return len(block) if final else None
        if block[body] in "{[":
            return self._end_after_json(block, body, final)
        close = block.find(self.end, body)
        if close < 0:
            return len(block) if final else None
        return close + len(self.end)

    def _end_after_json(self, block: str, body: int, final: bool) -> int | None:
        json_end = scan_json_value(block, body)
        if json_end is None:
            if not final:
                return None
            # Broken JSON: the first end tag closes the block, so later calls still read.
            close = block.find(self.end, body)
            return close + len(self.end) if close >= 0 else len(block)
        after = skip_space(block, json_end)
        rest = block[after:]
        if rest.startswith(self.end):
            return after + len(self.end)
        if not final and self.end.startswith(rest):
            return None  # the end tag may still be on its way
        return json_end  # no end tag: the call ends with its JSON

    def body(self, block: str) -> str:
        text = block[len(self.start) :]
        stripped = text.rstrip()
        if stripped.endswith(self.end):
            text = stripped[: -len(self.end)]
        return text.strip()

    def parse(self, block: str, context: ParseContext) -> list[ToolCall] | None:
        body = self.body(block)
        if body.startswith(FUNCTION_START):
            return parse_xml_calls(body, block, context)
        if body[:1] in ("{", "["):
            return calls_from_json(body, block, context)
        return None


class FencedJsonSyntax(TaggedSyntax):
    """A ```json fence holding one call object (or a list of them)."""

    def __init__(self) -> None:
        super().__init__("```json", "```", implicit=True)

    def viable(self, block: str) -> bool:
        body = skip_space(block, len(self.start))
        return body == len(block) or block[body] in "{["

    def parse(self, block: str, context: ParseContext) -> list[ToolCall] | None:
        body = self.body(block)
        return calls_from_json(body, block, context) if body[:1] in ("{", "[") else None


class JsonSequenceSyntax(CallSyntax):
    """Bare call objects, one after another, optionally joined by ``separator``.

    With ``start="{"`` the syntax is implicit and only counts at the reply's
    start (a reply that is JSON for the user stays text unless it names an
    offered tool); with a marker such as ``<|python_tag|>`` it is explicit.
    """

    def __init__(self, start: str = "{", separator: str = ";") -> None:
        self.start = start
        self.separator = separator
        self.implicit = start == "{"
        self.at_reply_start = self.implicit
        self._body_offset = 0 if self.implicit else len(start)

    def viable(self, block: str) -> bool:
        if not self.implicit:
            return True
        key = skip_space(block, 1)
        return key == len(block) or block[key] == '"'

    def block_end(self, block: str, final: bool) -> int | None:
        pos = skip_space(block, self._body_offset)
        end = None  # after the last call object (and its separator)
        while pos < len(block) and block[pos] in "{[":
            value_end = scan_json_value(block, pos)
            if value_end is None:
                return len(block) if final else None
            after = skip_space(block, value_end)
            has_separator = bool(self.separator) and block.startswith(self.separator, after)
            end = after + len(self.separator) if has_separator else value_end
            pos = skip_space(block, end)
        if pos == len(block) and not final:
            return None  # another call (or its separator) may follow
        if end is None and pos < len(block):
            return pos  # no call after the marker: the block ends where the text goes on, however it arrives
        return end if end is not None else len(block)

    def parse(self, block: str, context: ParseContext) -> list[ToolCall] | None:
        values = split_json_values(block[self._body_offset :], self.separator)
        if not values:
            return None
        calls: list[ToolCall] = []
        for value in values:
            parsed = calls_from_json(value, value if len(values) > 1 else block, context)
            if parsed is None:
                return None
            calls.extend(parsed)
        return calls

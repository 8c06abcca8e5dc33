"""``/v1/responses`` objects and stream events, built from a reply's events.

A reply becomes output items in order: a ``reasoning`` item, a ``message``
with one ``output_text`` part, ``function_call`` items. Streamed, each item
is opened (``response.output_item.added``), filled by deltas and closed
(``...done``), between ``response.created`` / ``response.in_progress`` and
``response.completed`` (``response.incomplete`` when the token limit cut it),
every event numbered by ``sequence_number`` and sent as a named SSE event.
"""

from __future__ import annotations

import json
import secrets
from typing import Any

from clika_runtime.chat.tools.definitions import ToolCall
from clika_runtime.engine.report import GenerationReport
from clika_runtime.server.backend import CallDelta, Event, Finished, ReasoningDelta, TextDelta
from clika_runtime.server.streaming import Reply


def item_id(prefix: str) -> str:
    return f"{prefix}_{secrets.token_hex(12)}"


def named_sse(payload: dict[str, Any]) -> bytes:
    return (
        f"event: {payload['type']}\ndata: ".encode()
        + json.dumps(payload, ensure_ascii=False).encode()
        + b"\n\n"
    )


def usage(report: GenerationReport) -> dict[str, Any]:
    return {
        "input_tokens": report.prompt_tokens,
        "input_tokens_details": {"cached_tokens": report.cached_tokens},
        "output_tokens": report.completion_tokens,
        "output_tokens_details": {"reasoning_tokens": 0},
        "total_tokens": report.total_tokens,
    }


class ResponseObject:
    """The ``response`` object of one request: its fixed fields, then its output and end state."""

    def __init__(self, model: str, created: int, echoed: dict[str, Any]) -> None:
        self.base = {
            "id": item_id("resp"),
            "object": "response",
            "created_at": created,
            "model": model,
            "error": None,
            "incomplete_details": None,
            "previous_response_id": None,
            "store": False,
            "text": {"format": {"type": "text"}},
            "truncation": "disabled",
            **echoed,
        }

    def in_progress(self) -> dict[str, Any]:
        return {**self.base, "status": "in_progress", "output": [], "usage": None}

    def finished(self, output: list[dict[str, Any]], finished: Finished) -> dict[str, Any]:
        cut = finished.finish_reason == "length"
        return {
            **self.base,
            "status": "incomplete" if cut else "completed",
            "incomplete_details": {"reason": "max_output_tokens"} if cut else None,
            "output": output,
            "usage": usage(finished.report),
        }

    def whole(self, reply: Reply) -> dict[str, Any]:
        """The non-streamed answer."""
        assert reply.finished is not None
        output = []
        if reply.reasoning:
            output.append(reasoning_item(item_id("rs"), "".join(reply.reasoning)))
        text = "".join(reply.text)
        if text or not reply.calls:
            output.append(message_item(item_id("msg"), text))
        output += [call_item(item_id("fc"), call) for call in reply.calls]
        return self.finished(output, reply.finished)


def message_item(ident: str, text: str, status: str = "completed") -> dict[str, Any]:
    content = [text_part(text)] if status == "completed" else []
    return {"type": "message", "id": ident, "status": status, "role": "assistant", "content": content}


def text_part(text: str) -> dict[str, Any]:
    return {"type": "output_text", "text": text, "annotations": [], "logprobs": []}


def reasoning_item(ident: str, text: str, status: str = "completed") -> dict[str, Any]:
    content = [{"type": "reasoning_text", "text": text}] if status == "completed" else []
    return {"type": "reasoning", "id": ident, "status": status, "summary": [], "content": content}


def call_item(ident: str, call: ToolCall, status: str = "completed") -> dict[str, Any]:
    arguments = call.arguments_json if status == "completed" else ""
    return {
        "type": "function_call",
        "id": ident,
        "call_id": call.id,
        "name": call.name,
        "arguments": arguments,
        "status": status,
    }


class ResponseEvents:
    """The stream events of one response, item by item as the reply's events arrive."""

    def __init__(self, response: ResponseObject) -> None:
        self.response = response
        self.sequence = 0
        self.output: list[dict[str, Any]] = []
        self.open: dict[str, Any] | None = None  # the item being filled: kind, id, text so far
        self.ended = False

    def event(self, kind: str, **fields: Any) -> dict[str, Any]:
        payload = {"type": kind, "sequence_number": self.sequence, **fields}
        self.sequence += 1
        return payload

    def start(self) -> list[dict[str, Any]]:
        snapshot = self.response.in_progress()
        return [
            self.event("response.created", response=snapshot),
            self.event("response.in_progress", response=snapshot),
        ]

    def for_event(self, event: Event) -> list[dict[str, Any]]:
        if isinstance(event, TextDelta):
            return self._delta("message", event.text)
        if isinstance(event, ReasoningDelta):
            return self._delta("reasoning", event.text)
        if isinstance(event, CallDelta):
            return [*self._close(), *self._call(event.call)]
        self.ended = True
        final = self.response.finished(self.output, event)
        kind = "response.incomplete" if final["status"] == "incomplete" else "response.completed"
        return [*self._close(), self.event(kind, response=final)]

    def error(self, message: str, code: str) -> dict[str, Any]:
        return self.event("error", code=code, message=message, param=None)

    # -- items -----------------------------------------------------------------------------------

    def _delta(self, kind: str, text: str) -> list[dict[str, Any]]:
        events = []
        if self.open is None or self.open["kind"] != kind:
            events += self._close()
            events += self._open(kind)
        assert self.open is not None
        self.open["text"] += text
        where = {"item_id": self.open["id"], "output_index": len(self.output), "content_index": 0}
        name = "response.output_text.delta" if kind == "message" else "response.reasoning_text.delta"
        extra = {"logprobs": []} if kind == "message" else {}
        return [*events, self.event(name, **where, delta=text, **extra)]

    def _open(self, kind: str) -> list[dict[str, Any]]:
        ident = item_id("msg" if kind == "message" else "rs")
        self.open = {"kind": kind, "id": ident, "text": ""}
        index = len(self.output)
        if kind == "message":
            item = message_item(ident, "", "in_progress")
            part = text_part("")
        else:
            item = reasoning_item(ident, "", "in_progress")
            part = {"type": "reasoning_text", "text": ""}
        return [
            self.event("response.output_item.added", output_index=index, item=item),
            self.event(
                "response.content_part.added", item_id=ident, output_index=index, content_index=0, part=part
            ),
        ]

    def _close(self) -> list[dict[str, Any]]:
        if self.open is None:
            return []
        kind, ident, text = self.open["kind"], self.open["id"], self.open["text"]
        self.open = None
        index = len(self.output)
        where = {"item_id": ident, "output_index": index, "content_index": 0}
        if kind == "message":
            item, part = message_item(ident, text), text_part(text)
            done = self.event("response.output_text.done", **where, text=text, logprobs=[])
        else:
            item, part = reasoning_item(ident, text), {"type": "reasoning_text", "text": text}
            done = self.event("response.reasoning_text.done", **where, text=text)
        self.output.append(item)
        return [
            done,
            self.event("response.content_part.done", **where, part=part),
            self.event("response.output_item.done", output_index=index, item=item),
        ]

    def _call(self, call: ToolCall) -> list[dict[str, Any]]:
        ident = item_id("fc")
        index = len(self.output)
        item = call_item(ident, call)
        self.output.append(item)
        where = {"item_id": ident, "output_index": index}
        return [
            self.event(
                "response.output_item.added", output_index=index, item=call_item(ident, call, "in_progress")
            ),
            self.event("response.function_call_arguments.delta", **where, delta=call.arguments_json),
            self.event(
                "response.function_call_arguments.done",
                **where,
                name=call.name,
                arguments=call.arguments_json,
            ),
            self.event("response.output_item.done", output_index=index, item=item),
        ]

"""Ollama response objects and NDJSON stream lines, built from a reply's events.

A stream is one JSON object per line, ``done: false`` until the last, which
carries ``done_reason`` and the counts and durations (nanoseconds) Ollama
reports: ``prompt_eval_count`` / ``eval_count`` and their times.
"""

from __future__ import annotations

import json
import time
from datetime import datetime, timezone
from typing import Any

from clika_runtime.chat.tools.definitions import ToolCall
from clika_runtime.engine.report import GenerationReport
from clika_runtime.server.backend import CallDelta, Event, Finished, ReasoningDelta, TextDelta
from clika_runtime.server.streaming import Reply

MEDIA_TYPE = "application/x-ndjson"
_NS = 1_000_000_000


def ndjson(payload: dict[str, Any]) -> bytes:
    return json.dumps(payload, ensure_ascii=False).encode() + b"\n"


def created_at(seconds: float | None = None) -> str:
    moment = datetime.fromtimestamp(time.time() if seconds is None else seconds, tz=timezone.utc)
    return moment.strftime("%Y-%m-%dT%H:%M:%S.%fZ")


def final_fields(finished: Finished) -> dict[str, Any]:
    """``done_reason`` and the counts and durations of a finished reply."""
    report = finished.report
    reason = "length" if report.finish_reason == "length" else "stop"
    return {"done": True, "done_reason": reason, **_timings(report)}


def _timings(report: GenerationReport) -> dict[str, Any]:
    first = report.time_to_first_token_s or report.total_s
    return {
        "total_duration": int(report.total_s * _NS),
        "load_duration": 0,
        "prompt_eval_count": report.prompt_tokens,
        "prompt_eval_duration": int(max(first - report.queue_s, 0.0) * _NS),
        "eval_count": report.completion_tokens,
        "eval_duration": int(max(report.total_s - first, 0.0) * _NS),
    }


def ollama_call(call: ToolCall) -> dict[str, Any]:
    return {"id": call.id, "function": {"name": call.name, "arguments": call.arguments}}


def loaded(model: str) -> dict[str, Any]:
    """What Ollama answers to a request with nothing to generate: the model is loaded."""
    return {"model": model, "created_at": created_at(), "done": True, "done_reason": "load"}


# -- /api/chat -------------------------------------------------------------------------------


def chat_response(model: str, reply: Reply) -> dict[str, Any]:
    assert reply.finished is not None
    message: dict[str, Any] = {"role": "assistant", "content": "".join(reply.text)}
    if reply.reasoning:
        message["thinking"] = "".join(reply.reasoning)
    if reply.calls:
        message["tool_calls"] = [ollama_call(call) for call in reply.calls]
    return {"model": model, "created_at": created_at(), "message": message, **final_fields(reply.finished)}


def chat_line(model: str, event: Event) -> dict[str, Any]:
    message: dict[str, Any] = {"role": "assistant", "content": ""}
    done: dict[str, Any] = {"done": False}
    if isinstance(event, TextDelta):
        message["content"] = event.text
    elif isinstance(event, ReasoningDelta):
        message["thinking"] = event.text
    elif isinstance(event, CallDelta):
        message["tool_calls"] = [ollama_call(event.call)]
    else:
        done = final_fields(event)
    return {"model": model, "created_at": created_at(), "message": message, **done}


# -- /api/generate ---------------------------------------------------------------------------


def generate_response(model: str, reply: Reply) -> dict[str, Any]:
    assert reply.finished is not None
    body: dict[str, Any] = {"model": model, "created_at": created_at(), "response": "".join(reply.text)}
    if reply.reasoning:
        body["thinking"] = "".join(reply.reasoning)
    return {**body, **final_fields(reply.finished)}


def generate_line(model: str, event: Event) -> dict[str, Any] | None:
    base: dict[str, Any] = {"model": model, "created_at": created_at()}
    if isinstance(event, TextDelta):
        return {**base, "response": event.text, "done": False}
    if isinstance(event, ReasoningDelta):
        return {**base, "response": "", "thinking": event.text, "done": False}
    if isinstance(event, Finished):
        return {**base, "response": "", **final_fields(event)}
    return None  # a raw prompt has no tool-call channel

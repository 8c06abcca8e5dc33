"""OpenAI response bodies and stream chunks, built from a reply's events."""

from __future__ import annotations

import json
import secrets
from typing import Any

from clika_runtime.engine.report import GenerationReport
from clika_runtime.server.backend import CallDelta, Event, Finished, ReasoningDelta, TextDelta
from clika_runtime.server.openai.logprobs import TokenText, chat_logprobs, completion_logprobs
from clika_runtime.server.streaming import Reply

SYSTEM_FINGERPRINT = "clika-runtime"
DONE = b"data: [DONE]\n\n"


def new_id(prefix: str) -> str:
    return f"{prefix}-{secrets.token_hex(12)}"


def sse(payload: dict[str, Any]) -> bytes:
    """One server-sent event carrying ``payload`` as JSON."""
    return b"data: " + json.dumps(payload, ensure_ascii=False).encode() + b"\n\n"


def usage(report: GenerationReport) -> dict[str, Any]:
    return {
        "prompt_tokens": report.prompt_tokens,
        "completion_tokens": report.completion_tokens,
        "total_tokens": report.total_tokens,
        "prompt_tokens_details": {"cached_tokens": report.cached_tokens},
    }


# -- chat completions ------------------------------------------------------------------------


def chat_completion(
    reply_id: str, model: str, created: int, replies: list[Reply], token_text: TokenText | None = None
) -> dict[str, Any]:
    """The ``chat.completion`` object of finished replies (one choice each; the prompt counted once);
    with ``token_text``, each choice's token log-probabilities."""
    choices = [_chat_choice(index, reply) for index, reply in enumerate(replies)]
    if token_text is not None:
        for choice, reply in zip(choices, replies, strict=True):
            assert reply.finished is not None
            choice["logprobs"] = chat_logprobs(reply.finished.report.logprobs, token_text)
    return {
        "id": reply_id,
        "object": "chat.completion",
        "created": created,
        "model": model,
        "system_fingerprint": SYSTEM_FINGERPRINT,
        "choices": choices,
        "usage": choices_usage([reply.finished.report for reply in replies if reply.finished]),
    }


def _chat_choice(index: int, reply: Reply) -> dict[str, Any]:
    assert reply.finished is not None
    text = "".join(reply.text)
    message: dict[str, Any] = {"role": "assistant", "content": text if text or not reply.calls else None}
    if reply.calls:
        message["tool_calls"] = [call.to_message() for call in reply.calls]
    if reply.reasoning:
        message["reasoning_content"] = "".join(reply.reasoning)
    return {
        "index": index,
        "message": message,
        "logprobs": None,
        "finish_reason": reply.finished.finish_reason,
    }


def choices_usage(reports: list[GenerationReport]) -> dict[str, Any]:
    """Usage of n choices of one prompt: the prompt once, every choice's completion."""
    if len(reports) == 1:
        return usage(reports[0])
    prompt = reports[0].prompt_tokens
    completion = sum(report.completion_tokens for report in reports)
    return {
        "prompt_tokens": prompt,
        "completion_tokens": completion,
        "total_tokens": prompt + completion,
        "prompt_tokens_details": {"cached_tokens": reports[0].cached_tokens},
    }


class ChatChunks:
    """``chat.completion.chunk`` objects for one streamed reply."""

    def __init__(self, reply_id: str, model: str, created: int, include_usage: bool, index: int = 0) -> None:
        self.base = {
            "id": reply_id,
            "object": "chat.completion.chunk",
            "created": created,
            "model": model,
            "system_fingerprint": SYSTEM_FINGERPRINT,
        }
        self.include_usage = include_usage
        self.index = index  # which of n choices these chunks carry

    def chunk(self, delta: dict[str, Any], finish_reason: str | None = None) -> dict[str, Any]:
        choice = {"index": self.index, "delta": delta, "logprobs": None, "finish_reason": finish_reason}
        payload = {**self.base, "choices": [choice]}
        if self.include_usage:
            payload["usage"] = None  # OpenAI's shape: null until the last chunk
        return payload

    def first(self) -> dict[str, Any]:
        return self.chunk({"role": "assistant", "content": ""})

    def for_event(self, event: Event) -> list[dict[str, Any]]:
        """The chunks one event becomes (a tool call: its name, then its arguments, as OpenAI streams them)."""
        if isinstance(event, TextDelta):
            return [self.chunk({"content": event.text})]
        if isinstance(event, ReasoningDelta):
            return [self.chunk({"reasoning_content": event.text})]
        if isinstance(event, CallDelta):
            call = event.call
            head = {"index": event.index, "id": call.id, "type": "function"}
            head["function"] = {"name": call.name, "arguments": ""}
            body = {"index": event.index, "function": {"arguments": call.arguments_json}}
            return [self.chunk({"tool_calls": [head]}), self.chunk({"tool_calls": [body]})]
        chunks = [self.chunk({}, event.finish_reason)]
        if self.include_usage:
            chunks.append({**self.base, "choices": [], "usage": usage(event.report)})
        return chunks


# -- completions ----------------------------------------------------------------------------


def completion(
    reply_id: str, model: str, created: int, replies: list[Reply], token_text: TokenText | None = None
) -> dict[str, Any]:
    """The ``text_completion`` object, one choice per prompt (with ``token_text``, logprobs)."""
    choices = []
    totals = {"prompt_tokens": 0, "completion_tokens": 0, "total_tokens": 0}
    cached = 0
    for index, reply in enumerate(replies):
        assert reply.finished is not None
        report = reply.finished.report
        choices.append(
            {
                "index": index,
                "text": "".join(reply.text),
                "logprobs": None if token_text is None else _completion_logprobs(reply, token_text),
                "finish_reason": reply.finished.finish_reason,
            }
        )
        totals["prompt_tokens"] += report.prompt_tokens
        totals["completion_tokens"] += report.completion_tokens
        totals["total_tokens"] += report.total_tokens
        cached += report.cached_tokens
    return {
        "id": reply_id,
        "object": "text_completion",
        "created": created,
        "model": model,
        "system_fingerprint": SYSTEM_FINGERPRINT,
        "choices": choices,
        "usage": {**totals, "prompt_tokens_details": {"cached_tokens": cached}},
    }


def _completion_logprobs(reply: Reply, token_text: TokenText) -> dict[str, Any]:
    assert reply.finished is not None
    echoed = len(reply.text[0]) if reply.echoed else 0
    return completion_logprobs(reply.finished.report.logprobs, token_text, echoed)


class CompletionChunks:
    """``text_completion`` stream chunks for one prompt."""

    def __init__(self, reply_id: str, model: str, created: int, include_usage: bool) -> None:
        self.base = {"id": reply_id, "object": "text_completion", "created": created, "model": model}
        self.include_usage = include_usage

    def chunk(self, text: str, finish_reason: str | None = None) -> dict[str, Any]:
        choice = {"index": 0, "text": text, "logprobs": None, "finish_reason": finish_reason}
        payload = {**self.base, "choices": [choice]}
        if self.include_usage:
            payload["usage"] = None
        return payload

    def for_event(self, event: Event) -> list[dict[str, Any]]:
        if isinstance(event, TextDelta):
            return [self.chunk(event.text)]
        if isinstance(event, Finished):
            chunks = [self.chunk("", event.finish_reason)]
            if self.include_usage:
                chunks.append({**self.base, "choices": [], "usage": usage(event.report)})
            return chunks
        return []

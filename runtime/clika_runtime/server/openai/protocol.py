"""OpenAI request bodies in, checked values out: every refusal is a 400 naming the field.

Sampling fields become :class:`~clika_runtime.engine.config.GenerationConfig`
overrides (:mod:`clika_runtime.server.sampling`: ``max_tokens`` /
``max_completion_tokens`` -> ``max_new_tokens``);
``response_format`` / ``json_schema`` / ``grammar`` become a compiled
constraint (:mod:`clika_runtime.server.structured`); fields this server
cannot honour (``suffix``) are refused; ``logprobs`` come from the model's raw
distribution; ``n`` choices
decode together (``MAX_CHOICES`` at most) rather than silently ignored, so a
client never reads an answer that does not mean what it asked for.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from clika_runtime.engine.config import MAX_LOGPROBS
from clika_runtime.server.errors import bad_request
from clika_runtime.server.protocol import (
    ChatRequest,
    check_flag,
    check_message,
    check_model,
    check_object,
    check_tools,
    is_int,
    parse_tool_choice,
)
from clika_runtime.server.sampling import sampling_options

MAX_CHOICES = 8  # n: choices of one request decode together, sharing the prompt's KV


@dataclass(frozen=True)
class CompletionRequest:
    """A checked ``/v1/completions`` body: one prompt per entry (text, or token ids)."""

    model: str
    prompts: list[str | list[int]]
    stream: bool = False
    include_usage: bool = False
    options: dict[str, Any] = field(default_factory=dict)
    max_tokens_given: bool = False
    echo: bool = False  # the reply's text starts with the prompt's
    n: int = 1  # choices per prompt


def parse_chat(body: Any) -> ChatRequest:
    """Check a chat completions body (raises a 400 ApiError naming the bad field)."""
    body = check_object(body)
    tools = check_tools(body.get("tools"))
    return ChatRequest(
        model=check_model(body),
        messages=[check_message(m, i) for i, m in enumerate(_list(body, "messages", required=True))],
        stream=check_flag(body, "stream"),
        include_usage=_include_usage(body),
        tools=tools,
        tool_choice=parse_tool_choice(body.get("tool_choice"), tools),
        parallel_tool_calls=check_flag(body, "parallel_tool_calls", True),
        options=_with_logprobs(
            sampling_options(body, "max_completion_tokens", "max_tokens"), chat_logprobs(body)
        ),
        max_tokens_given=body.get("max_completion_tokens", body.get("max_tokens")) is not None,
        n=_choices(body),
    )


def parse_completion(body: Any) -> CompletionRequest:
    """Check a (legacy) completions body."""
    body = check_object(body)
    if body.get("suffix"):
        raise bad_request("'suffix' (fill-in-the-middle) is not supported by this server", "suffix")
    if body.get("best_of") not in (None, 1):
        raise bad_request("'best_of' must be 1 on this server", "best_of")
    request = CompletionRequest(
        model=check_model(body),
        prompts=_prompts(body.get("prompt")),
        stream=check_flag(body, "stream"),
        include_usage=_include_usage(body),
        options=_with_logprobs(sampling_options(body, "max_tokens"), completion_logprobs(body)),
        max_tokens_given=body.get("max_tokens") is not None,
        echo=check_flag(body, "echo"),
        n=_choices(body),
    )
    if request.stream and len(request.prompts) != 1:
        raise bad_request("a streamed completion takes exactly one prompt", "prompt")
    return request


def _with_logprobs(options: dict[str, Any], logprobs: int | None) -> dict[str, Any]:
    if logprobs is not None:
        options["logprobs"] = logprobs
    return options


def _choices(body: Mapping[str, Any]) -> int:
    n = body.get("n")
    if n is None:
        return 1
    if not is_int(n) or not 1 <= n <= MAX_CHOICES:
        raise bad_request(f"'n' must be an integer from 1 to {MAX_CHOICES}, got {n!r}", "n")
    return n


def chat_logprobs(body: Mapping[str, Any]) -> int | None:
    """Chat's ``logprobs`` (a flag) and ``top_logprobs`` (0..20) as the engine's option."""
    wanted, top = body.get("logprobs"), body.get("top_logprobs")
    if wanted not in (None, True, False):
        raise bad_request(f"'logprobs' must be true or false, got {wanted!r}", "logprobs")
    if top is not None and (not is_int(top) or not 0 <= top <= MAX_LOGPROBS):
        raise bad_request(
            f"'top_logprobs' must be an integer from 0 to {MAX_LOGPROBS}, got {top!r}", "top_logprobs"
        )
    if top and not wanted:
        raise bad_request("'top_logprobs' needs 'logprobs': true", "top_logprobs")
    return (top or 0) if wanted else None


def completion_logprobs(body: Mapping[str, Any]) -> int | None:
    """Completions' ``logprobs`` (how many alternatives, 0..5 in OpenAI's API; up to 20 here)."""
    value = body.get("logprobs")
    if value is None or value is False:
        return None
    if not is_int(value) or not 0 <= value <= MAX_LOGPROBS:
        raise bad_request(
            f"'logprobs' must be an integer from 0 to {MAX_LOGPROBS}, got {value!r}", "logprobs"
        )
    return value


def _include_usage(body: Mapping[str, Any]) -> bool:
    options = body.get("stream_options")
    if options is None:
        return False
    if not isinstance(options, Mapping):
        raise bad_request("'stream_options' must be an object", "stream_options")
    if not body.get("stream"):
        raise bad_request("'stream_options' is only allowed when 'stream' is true", "stream_options")
    return check_flag(options, "include_usage")


def _list(body: Mapping[str, Any], name: str, *, required: bool = False) -> list[Any]:
    value = body.get(name)
    if value is None and not required:
        return []
    if not isinstance(value, list) or (required and not value):
        raise bad_request(f"'{name}' must be a non-empty array", name)
    return value


def _prompts(value: Any) -> list[str | list[int]]:
    if isinstance(value, str):
        return [value]
    if isinstance(value, list) and value:
        if all(isinstance(item, str) for item in value):
            return list(value)
        if all(is_int(item) for item in value):
            return [list(value)]
        if all(isinstance(item, list) and item and all(is_int(t) for t in item) for item in value):
            return [list(item) for item in value]
    raise bad_request(
        "'prompt' must be a string, an array of strings, or token ids (an array of integers, or arrays of them)",
        "prompt",
    )

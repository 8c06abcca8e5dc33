"""OpenAI request bodies in, checked values out: every refusal is a 400 naming the field.

Sampling fields become :class:`~clika_runtime.engine.config.GenerationConfig`
overrides (``max_tokens`` / ``max_completion_tokens`` -> ``max_new_tokens``);
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

from clika_runtime.chat.tools.choice import AUTO, NONE, REQUIRED, ToolChoice, tool_choice_from
from clika_runtime.engine.config import MAX_LOGPROBS
from clika_runtime.server.audio_parts import input_audio_part
from clika_runtime.server.errors import bad_request
from clika_runtime.server.json_input import load_json
from clika_runtime.server.structured import openai_constraint

MAX_STOP_STRINGS = 4
MAX_CHOICES = 8  # n: choices of one request decode together, sharing the prompt's KV
ROLES = ("system", "developer", "user", "assistant", "tool")


@dataclass(frozen=True)
class ChatRequest:
    """A checked ``/v1/chat/completions`` body."""

    model: str
    messages: list[dict[str, Any]]
    stream: bool = False
    include_usage: bool = False
    tools: list[dict[str, Any]] | None = None
    tool_choice: ToolChoice = ToolChoice()
    parallel_tool_calls: bool = True  # a required call may be several
    options: dict[str, Any] = field(default_factory=dict)  # GenerationConfig overrides
    max_tokens_given: bool = False
    n: int = 1  # choices


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


# -- pieces ----------------------------------------------------------------------------------------


def check_object(body: Any) -> dict[str, Any]:
    """A request body that is a JSON object; a 400 saying what it is otherwise."""
    if not isinstance(body, dict):
        raise bad_request(f"the request body must be a JSON object, got {_json_kind(body)}")
    return body


def check_model(body: Mapping[str, Any]) -> str:
    """The body's ``model``: the id of the served model."""
    model = body.get("model")
    if not isinstance(model, str) or not model:
        raise bad_request("'model' is required: the id of the served model (see /v1/models)", "model")
    return model


def _with_logprobs(options: dict[str, Any], logprobs: int | None) -> dict[str, Any]:
    if logprobs is not None:
        options["logprobs"] = logprobs
    return options


def _choices(body: Mapping[str, Any]) -> int:
    n = body.get("n")
    if n is None:
        return 1
    if not _is_token(n) or not 1 <= n <= MAX_CHOICES:
        raise bad_request(f"'n' must be an integer from 1 to {MAX_CHOICES}, got {n!r}", "n")
    return n


def chat_logprobs(body: Mapping[str, Any]) -> int | None:
    """Chat's ``logprobs`` (a flag) and ``top_logprobs`` (0..20) as the engine's option."""
    wanted, top = body.get("logprobs"), body.get("top_logprobs")
    if wanted not in (None, True, False):
        raise bad_request(f"'logprobs' must be true or false, got {wanted!r}", "logprobs")
    if top is not None and (not _is_token(top) or not 0 <= top <= MAX_LOGPROBS):
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
    if not _is_token(value) or not 0 <= value <= MAX_LOGPROBS:
        raise bad_request(
            f"'logprobs' must be an integer from 0 to {MAX_LOGPROBS}, got {value!r}", "logprobs"
        )
    return value


def check_flag(body: Mapping[str, Any], name: str, default: bool = False) -> bool:
    """A true/false field (``default`` when absent); a 400 naming it otherwise."""
    value = body.get(name)
    if value is None:
        return default
    if not isinstance(value, bool):
        raise bad_request(f"'{name}' must be true or false, got {value!r}", name)
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


def check_message(message: Any, index: int, field: str = "messages") -> dict[str, Any]:
    """One chat turn checked (``field``: the request field holding the turns, for the 400's param)."""
    param = f"{field}[{index}]"
    role = check_role(message, param, ROLES)
    turn = {key: value for key, value in message.items() if value is not None}
    turn["role"] = "system" if role == "developer" else role  # chat templates know no developer role
    content = message.get("content")
    if content is None and role != "assistant":  # an assistant turn may hold only tool calls
        raise bad_request(f"{param}.content is required for a {role} message", f"{param}.content")
    turn["content"] = _content_text(content, f"{param}.content")
    if role == "tool" and not isinstance(message.get("tool_call_id"), str):
        raise bad_request(f"{param}.tool_call_id is required for a tool message", f"{param}.tool_call_id")
    if turn.get("tool_calls") is not None:
        turn["tool_calls"] = _tool_calls(turn["tool_calls"], f"{param}.tool_calls")
    return turn


def check_role(message: Any, param: str, roles: tuple[str, ...]) -> str:
    """The role of ``message`` (a turn object), one of ``roles``; a 400 naming ``param`` otherwise."""
    if not isinstance(message, dict):
        raise bad_request(f"{param} must be an object with 'role' and 'content'", param)
    role = message.get("role")
    if role not in roles:
        raise bad_request(f"{param}.role must be one of {', '.join(roles)}, got {role!r}", f"{param}.role")
    return role


def _tool_calls(calls: Any, param: str) -> list[Any]:
    """An assistant turn's calls, with ``arguments`` strings read as bounded JSON (templates need objects)."""
    if not isinstance(calls, list):
        raise bad_request(f"{param} must be an array of tool calls", param)
    checked = []
    for index, call in enumerate(calls):
        function = call.get("function") if isinstance(call, dict) else None
        if not isinstance(function, dict) or not isinstance(function.get("name"), str):
            raise bad_request(
                f"{param}[{index}] must be {{'type': 'function', 'function': {{'name': ...}}}}", param
            )
        arguments = function.get("arguments")
        if isinstance(arguments, str):
            where = f"{param}[{index}].function.arguments"
            parsed = load_json(arguments, where, where) if arguments.strip() else {}
            call = {**call, "function": {**function, "arguments": parsed}}
        checked.append(call)
    return checked


def _content_text(content: Any, param: str) -> str | list[dict[str, Any]]:
    """A string, or the text parts of a content array joined; with ``image_url`` or ``input_audio``
    parts the parts themselves (text, ``{"type": "image_url", "url", "param"}`` and
    ``{"type": "input_audio", "data", "format", "param"}``, the media read later)."""
    if content is None:
        return ""
    if isinstance(content, str):
        return content
    if not isinstance(content, list):
        raise bad_request(f"{param} must be a string or an array of content parts", param)
    parts: list[dict[str, Any]] = []
    for index, part in enumerate(content):
        kind = part.get("type") if isinstance(part, dict) else None
        where = f"{param}[{index}]"
        if kind == "image_url":
            parts.append({"type": "image_url", "url": _image_url(part, where), "param": f"{where}.image_url"})
            continue
        if kind == "input_audio":
            parts.append(input_audio_part(part, where))
            continue
        if kind != "text" or not isinstance(part.get("text"), str):
            raise bad_request(
                f"{where} is a {kind or type(part).__name__!s} part; "
                "this server reads text, image_url and input_audio parts",
                where,
            )
        parts.append({"type": "text", "text": part["text"]})
    if all(part["type"] == "text" for part in parts):
        return "".join(part["text"] for part in parts)
    return parts


def text_content(content: Any, param: str, kinds: tuple[str, ...] = ("text",)) -> str:
    """A string, or the parts of ``kinds`` of a content array joined; a 400 naming the first part of
    another kind (the front ends that read text only: Responses input items)."""
    if isinstance(content, str):
        return content
    if not isinstance(content, list):
        raise bad_request(f"{param} must be a string or an array of content parts", param)
    texts = []
    for index, part in enumerate(content):
        kind = part.get("type") if isinstance(part, dict) else None
        if kind not in kinds or not isinstance(part.get("text"), str):
            raise bad_request(
                f"{param}[{index}] is a {kind or type(part).__name__!s} part; this model reads text parts only",
                f"{param}[{index}]",
            )
        texts.append(part["text"])
    return "".join(texts)


def _image_url(part: dict[str, Any], where: str) -> str:
    value = part.get("image_url")
    url = value.get("url") if isinstance(value, dict) else value
    if not isinstance(url, str) or not url:
        raise bad_request(
            f"{where}.image_url must be {{'url': 'data:image/...;base64,...'}}", f"{where}.image_url"
        )
    return url


def tool_list(value: Any) -> list[Any] | None:
    """A body's ``tools`` as a list (None when absent); a 400 unless it is an array."""
    if value is None:
        return None
    if not isinstance(value, list):
        raise bad_request("'tools' must be an array of tool definitions", "tools")
    return value


def check_tools(value: Any) -> list[dict[str, Any]] | None:
    """``tools`` in the chat shape, each a function with a name (None when absent or empty)."""
    value = tool_list(value)
    for index, tool in enumerate(value or ()):
        if not isinstance(tool, dict) or tool.get("type", "function") != "function":
            raise bad_request(f"tools[{index}] must be {{'type': 'function', 'function': {{...}}}}", "tools")
        function = tool.get("function")
        if (
            not isinstance(function, dict)
            or not isinstance(function.get("name"), str)
            or not function["name"]
        ):
            raise bad_request(f"tools[{index}].function needs a non-empty 'name'", f"tools[{index}].function")
    return value or None


def parse_tool_choice(value: Any, tools: list[dict[str, Any]] | None) -> ToolChoice:
    """A body's ``tool_choice`` on its checked ``tools`` (chat or Responses shape); a 400 naming it
    otherwise. Absent: auto with tools, none without."""
    if value is None:
        return ToolChoice(AUTO if tools else NONE)
    if isinstance(value, str) and value not in (AUTO, NONE, REQUIRED):
        raise bad_request(
            f"tool_choice must be 'auto', 'none', 'required' or a function, got {value!r}", "tool_choice"
        )
    try:
        return tool_choice_from(value, tools)
    except ValueError as exc:
        raise bad_request(str(exc), "tool_choice") from None


def _prompts(value: Any) -> list[str | list[int]]:
    if isinstance(value, str):
        return [value]
    if isinstance(value, list) and value:
        if all(isinstance(item, str) for item in value):
            return list(value)
        if all(_is_token(item) for item in value):
            return [list(value)]
        if all(isinstance(item, list) and item and all(_is_token(t) for t in item) for item in value):
            return [list(item) for item in value]
    raise bad_request(
        "'prompt' must be a string, an array of strings, or token ids (an array of integers, or arrays of them)",
        "prompt",
    )


def _is_token(value: Any) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


# -- sampling ----------------------------------------------------------------------------------

# OpenAI name -> GenerationConfig name, for the fields passed through unchanged.
_PASSED = {
    "temperature": "temperature",
    "top_p": "top_p",
    "seed": "seed",
    "presence_penalty": "presence_penalty",
    "frequency_penalty": "frequency_penalty",
    # Widely used extensions (vLLM, llama.cpp's server).
    "top_k": "top_k",
    "min_p": "min_p",
    "repetition_penalty": "repetition_penalty",
    "reasoning_effort": "reasoning_effort",
    "ignore_eos": "ignore_eos",
    "prompt_lookup_num_tokens": "prompt_lookup_num_tokens",  # as in Hugging Face's generate
    "num_assistant_tokens": "num_assistant_tokens",  # with a model loaded with an assistant
}


def sampling_options(body: Mapping[str, Any], *token_fields: str) -> dict[str, Any]:
    options: dict[str, Any] = {}
    for name in token_fields:
        if body.get(name) is not None:
            options["max_new_tokens"] = _positive_int(body[name], name)
            break
    if body.get("temperature") is not None and not _number(body["temperature"], 0.0, 2.0):
        raise bad_request(
            f"'temperature' must be a number in [0, 2], got {body['temperature']!r}", "temperature"
        )
    for name, target in _PASSED.items():
        if body.get(name) is not None:
            options[target] = body[name]
    stop = check_stops(body.get("stop"))
    if stop:
        options["stop"] = stop
    constraint = openai_constraint(body)
    if constraint is not None:
        options["response_format"] = constraint
    kwargs = body.get("chat_template_kwargs")
    if isinstance(kwargs, Mapping) and kwargs.get("enable_thinking") is not None:
        options["enable_thinking"] = kwargs["enable_thinking"]
    return options


def _positive_int(value: Any, name: str) -> int:
    if not _is_token(value) or value < 1:
        raise bad_request(f"'{name}' must be an integer >= 1, got {value!r}", name)
    return value


def _number(value: Any, low: float, high: float) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool) and low <= value <= high


def check_stops(value: Any, param: str = "stop", most: int | None = MAX_STOP_STRINGS) -> tuple[str, ...]:
    """Stop strings: one non-empty string or an array of them (at most ``most``); a 400 naming ``param``."""
    if value is None:
        return ()
    stops = [value] if isinstance(value, str) else value
    if not isinstance(stops, list) or not all(isinstance(s, str) and s for s in stops):
        raise bad_request("'stop' must be a non-empty string or an array of them", param)
    if most is not None and len(stops) > most:
        raise bad_request(f"'stop' takes at most {most} strings, got {len(stops)}", param)
    return tuple(stops)


def _json_kind(value: Any) -> str:
    return {list: "an array", str: "a string", type(None): "null", bool: "a boolean"}.get(
        type(value), "a number" if isinstance(value, (int, float)) else type(value).__name__
    )


# GenerationConfig field -> the request field a client wrote (for the 400's ``param``).
REQUEST_FIELD = {"max_new_tokens": "max_tokens", **{v: k for k, v in _PASSED.items()}}

"""The chat request every front end's body becomes, and the checks of what the bodies share:
the body object, ``model``, flags, chat turns (their content parts and tool calls), ``tools`` and
``tool_choice``. Every refusal is a 400 naming the field."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from clika_runtime.chat.tools.choice import AUTO, NONE, REQUIRED, ToolChoice, tool_choice_from
from clika_runtime.server.errors import bad_request
from clika_runtime.server.json_input import load_json
from clika_runtime.server.media_parts import image_url_part, input_audio_part

ROLES = ("system", "developer", "user", "assistant", "tool")


@dataclass(frozen=True)
class ChatRequest:
    """A checked chat request: what a chat body of every front end becomes (OpenAI's chat
    completions, the Responses API, Ollama's chat and generate)."""

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


def check_flag(body: Mapping[str, Any], name: str, default: bool = False) -> bool:
    """A true/false field (``default`` when absent); a 400 naming it otherwise."""
    value = body.get(name)
    if value is None:
        return default
    if not isinstance(value, bool):
        raise bad_request(f"'{name}' must be true or false, got {value!r}", name)
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
            parts.append(image_url_part(_image_url(part, where), f"{where}.image_url"))
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


def is_int(value: Any) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


def _json_kind(value: Any) -> str:
    return {list: "an array", str: "a string", type(None): "null", bool: "a boolean"}.get(
        type(value), "a number" if isinstance(value, (int, float)) else type(value).__name__
    )

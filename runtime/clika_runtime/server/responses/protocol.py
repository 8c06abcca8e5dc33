"""``/v1/responses`` request bodies in (the stateless subset), a checked chat request out.

``input`` is a string (one user turn) or a list of items: messages (content
a string or ``input_text`` / ``output_text`` parts), ``function_call`` items
and their ``function_call_output``; ``instructions`` become the system turn.
Function tools arrive in the Responses shape (``name`` at the top level) and
leave in the chat shape. What needs stored state or other machinery is a 400
naming the field: ``previous_response_id``, ``conversation``, ``background``,
hosted tools, non-text formats and inputs.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from clika_runtime.chat.tools.choice import AUTO, NONE
from clika_runtime.server.errors import bad_request
from clika_runtime.server.protocol import (
    ChatRequest,
    check_flag,
    check_message,
    check_model,
    check_object,
    check_tools,
    parse_tool_choice,
    text_content,
    tool_list,
)
from clika_runtime.server.sampling import sampling_options
from clika_runtime.server.structured import responses_constraint

_TEXT_PARTS = ("input_text", "output_text", "text")
_STATEFUL = ("previous_response_id", "conversation", "prompt")


@dataclass(frozen=True)
class ResponsesRequest:
    """The checked body: the chat request it runs as, and the fields the response echoes."""

    chat: ChatRequest
    echoed: dict[str, Any]


def parse_responses(body: Any) -> ResponsesRequest:
    body = check_object(body)
    _refuse_unsupported(body)
    model = check_model(body)
    tools = check_tools(_chat_tools(body.get("tools")))
    messages = _instructions(body.get("instructions")) + _input_messages(body.get("input"))
    options = sampling_options({k: v for k, v in body.items() if k != "stop"}, "max_output_tokens")
    constraint = responses_constraint(body.get("text"))
    if constraint is not None:
        options["response_format"] = constraint
    reasoning = body.get("reasoning")
    if isinstance(reasoning, Mapping) and reasoning.get("effort") is not None:
        options["reasoning_effort"] = reasoning["effort"]
    chat = ChatRequest(
        model=model,
        messages=[check_message(message, index, "input") for index, message in enumerate(messages)],
        stream=check_flag(body, "stream"),
        tools=tools,
        tool_choice=parse_tool_choice(body.get("tool_choice"), tools),
        parallel_tool_calls=check_flag(body, "parallel_tool_calls", True),
        options=options,
        max_tokens_given=body.get("max_output_tokens") is not None,
    )
    echoed = {
        "instructions": body.get("instructions"),
        "tools": body.get("tools") or [],
        "tool_choice": body.get("tool_choice") or (AUTO if tools else NONE),
        "temperature": body.get("temperature"),
        "top_p": body.get("top_p"),
        "max_output_tokens": body.get("max_output_tokens"),
        "metadata": body.get("metadata") or {},
        "parallel_tool_calls": chat.parallel_tool_calls,
        "reasoning": {"effort": options.get("reasoning_effort"), "summary": None},
        "user": body.get("user"),
    }
    return ResponsesRequest(chat, echoed)


def _refuse_unsupported(body: Mapping[str, Any]) -> None:
    for name in _STATEFUL:
        if body.get(name) is not None:
            raise bad_request(
                f"'{name}' needs stored responses; this server is stateless: send the whole conversation "
                "in 'input'",
                name,
            )
    if body.get("background"):
        raise bad_request("'background' responses are not supported by this server", "background")
    if body.get("include"):
        raise bad_request("'include' is not supported by this server", "include")
    if body.get("top_logprobs"):
        raise bad_request("'top_logprobs' are not supported by this server", "top_logprobs")


def _instructions(value: Any) -> list[dict[str, Any]]:
    if value is None:
        return []
    if not isinstance(value, str):
        raise bad_request("'instructions' must be a string", "instructions")
    return [{"role": "system", "content": value}]


def _input_messages(value: Any) -> list[dict[str, Any]]:
    if isinstance(value, str):
        return [{"role": "user", "content": value}]
    if not isinstance(value, list) or not value:
        raise bad_request("'input' must be a string or a non-empty array of input items", "input")
    messages: list[dict[str, Any]] = []
    for index, item in enumerate(value):
        param = f"input[{index}]"
        if not isinstance(item, dict):
            raise bad_request(f"{param} must be an object", param)
        kind = item.get("type", "message")
        if kind == "message":
            messages.append(
                {**item, "content": text_content(item.get("content"), f"{param}.content", _TEXT_PARTS)}
            )
            messages[-1].pop("type", None)
        elif kind == "function_call":
            _call_into(messages, item, param)
        elif kind == "function_call_output":
            output = item.get("output")
            if not isinstance(output, str) or not isinstance(item.get("call_id"), str):
                raise bad_request(f"{param} needs a string 'call_id' and 'output'", param)
            messages.append({"role": "tool", "tool_call_id": item["call_id"], "content": output})
        elif kind == "reasoning":
            continue  # a past reply's reasoning: chat templates leave earlier turns' reasoning out
        else:
            raise bad_request(
                f"{param} is a {kind!r} item; this server reads messages and function calls", param
            )
    return messages


def _call_into(messages: list[dict[str, Any]], item: Mapping[str, Any], param: str) -> None:
    """A ``function_call`` item joins the assistant turn before it (or opens one)."""
    name, arguments, call_id = item.get("name"), item.get("arguments", "{}"), item.get("call_id")
    if not isinstance(name, str) or not isinstance(arguments, str) or not isinstance(call_id, str):
        raise bad_request(f"{param} needs string 'call_id', 'name' and 'arguments'", param)
    call = {"id": call_id, "type": "function", "function": {"name": name, "arguments": arguments}}
    if messages and messages[-1]["role"] == "assistant":
        messages[-1]["tool_calls"] = [*(messages[-1].get("tool_calls") or []), call]
    else:
        messages.append({"role": "assistant", "content": None, "tool_calls": [call]})


def _chat_tools(value: Any) -> list[dict[str, Any]] | None:
    """Responses function tools (``{"type": "function", "name": ...}``) in the chat shape."""
    value = tool_list(value)
    if value is None:
        return None
    tools = []
    for index, tool in enumerate(value):
        if not isinstance(tool, dict) or tool.get("type") != "function":
            kind = tool.get("type") if isinstance(tool, dict) else type(tool).__name__
            raise bad_request(
                f"tools[{index}] is a {kind!r} tool; this server runs function tools only", "tools"
            )
        function = {key: tool[key] for key in ("name", "description", "parameters", "strict") if key in tool}
        tools.append({"type": "function", "function": function})
    return tools

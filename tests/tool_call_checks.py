"""What the required-call tests ask and check: a chat completion's calls, whole or streamed, and
that each is a call of an offered tool whose arguments validate (the ``jsonschema`` library)."""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from typing import Any

import jsonschema

Call = tuple[str, dict[str, Any]]  # (name, arguments)


def requested_calls(client: Any, request: Mapping[str, Any], *, stream: bool) -> list[Call]:
    """The calls of the chat completion ``request`` asks for; it must end with ``tool_calls``."""
    if not stream:
        reply = client.chat.completions.create(**request).choices[0]
        assert reply.finish_reason == "tool_calls", reply
        return [
            (call.function.name, json.loads(call.function.arguments)) for call in reply.message.tool_calls
        ]
    calls: dict[int, list[str]] = {}
    finish = None
    for chunk in client.chat.completions.create(**request, stream=True):
        for part in chunk.choices[0].delta.tool_calls or ():
            call = calls.setdefault(part.index, ["", ""])
            call[0] += part.function.name or ""
            call[1] += part.function.arguments or ""
        finish = chunk.choices[0].finish_reason or finish
    assert finish == "tool_calls", calls
    return [(name, json.loads(arguments)) for name, arguments in calls.values()]


def check_calls(
    calls: Sequence[Call], tools: Sequence[Mapping[str, Any]], named: str | None = None, *, one: bool = False
) -> None:
    """Each call names one of ``tools`` (``named`` when given) and its arguments validate against
    that tool's parameters; a strict or closed tool's hold no other key. ``one``: a single call."""
    functions = {tool["function"]["name"]: tool["function"] for tool in tools}
    assert calls and (not one or len(calls) == 1), calls
    for name, arguments in calls:
        assert name in functions and (named is None or name == named), calls
        schema = functions[name]["parameters"]
        jsonschema.validate(arguments, schema)
        if functions[name].get("strict") or schema.get("additionalProperties") is False:
            assert set(arguments) <= set(schema["properties"]), arguments

"""Python functions as tools the model can call, and a toolkit that runs the calls.

::

    @tool
    def weather(city: str, unit: Literal["C", "F"] = "C") -> str:
        '''Today's weather in a city.

        Args:
            city: the city's name
        '''

    @tool("get_time", "Get the current time")      # name and description given
    async def get_time() -> dict: ...

    kit = Toolkit([weather, get_time])
    kit.definitions()          # the OpenAI envelopes a chat template renders
    await kit.run(call)        # a ToolOutput: the text the model reads next

A tool's schema comes from its type hints and docstring
(:mod:`clika_runtime.chat.tools.schema`) or is given whole (``schema=``). A call
never raises into the loop that runs it: unknown tools, arguments that do not
fit the schema and exceptions inside the function all come back as an error
output the model reads, as OpenAI's and Anthropic's tool loops do.
"""

from __future__ import annotations

import asyncio
import inspect
import json
import time
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from typing import Any

from clika_runtime.chat.tools.definitions import ToolCall, normalize_tool
from clika_runtime.chat.tools.own_thread import on_own_thread
from clika_runtime.chat.tools.schema import function_schema

_JSON_TYPES: dict[str, tuple[type, ...]] = {
    "string": (str,),
    "integer": (int,),
    "number": (int, float),
    "boolean": (bool,),
    "array": (list,),
    "object": (dict,),
    "null": (type(None),),
}


@dataclass(frozen=True)
class Tool:
    """A function the model may call: its name, description, JSON schema and the callable."""

    name: str
    description: str
    parameters: Mapping[str, Any]
    function: Callable[..., Any]

    def definition(self) -> dict[str, Any]:
        """The tool in the OpenAI envelope (``{"type": "function", "function": {...}}``)."""
        body = {"name": self.name, "description": self.description, "parameters": dict(self.parameters)}
        return normalize_tool(body)

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        return self.function(*args, **kwargs)


@dataclass(frozen=True)
class ToolOutput:
    """What running one call gave: the text the model reads next, and whether it failed.

    ``vetoed`` is set when a hook refused the call before it ran."""

    call: ToolCall
    content: str
    is_error: bool = False
    vetoed: bool = False
    duration_ms: int = 0


def tool(
    name: str | Callable[..., Any] | None = None,
    description: str | None = None,
    *,
    schema: Mapping[str, Any] | None = None,
) -> Any:
    """Make a function a :class:`Tool`: ``@tool``, ``@tool("name", "description")`` or
    ``@tool(schema={...})`` (an explicit parameters schema instead of the derived one)."""
    if callable(name):
        return make_tool(name)

    def decorate(function: Callable[..., Any]) -> Tool:
        return make_tool(function, name=name, description=description, schema=schema)

    return decorate


def make_tool(
    function: Callable[..., Any],
    *,
    name: str | None = None,
    description: str | None = None,
    schema: Mapping[str, Any] | None = None,
) -> Tool:
    """A :class:`Tool` for ``function`` (see :func:`tool`)."""
    if isinstance(function, Tool):
        return function
    if not callable(function):
        raise ValueError(f"a tool must be callable, got {type(function).__name__}")
    derived_description, derived_schema = function_schema(function)
    if schema is not None and (not isinstance(schema, Mapping) or schema.get("type", "object") != "object"):
        raise ValueError("a tool's schema must be a JSON schema object ({'type': 'object', ...})")
    tool_name = name or getattr(function, "__name__", "")
    if not isinstance(tool_name, str) or not tool_name.isidentifier():
        raise ValueError(f"a tool's name must be an identifier, got {tool_name!r}")
    return Tool(
        name=tool_name,
        description=description if description is not None else derived_description,
        parameters=dict(schema) if schema is not None else derived_schema,
        function=function,
    )


def text_result(text: str) -> dict[str, Any]:
    """A tool result made of one text block (the shape agent SDKs' tools return)."""
    return {"content": [{"type": "text", "text": str(text)}]}


class Toolkit:
    """A set of tools offered together; :meth:`run` executes one call the model made."""

    def __init__(self, tools: Iterable[Tool | Callable[..., Any]] = ()) -> None:
        self._tools: dict[str, Tool] = {}
        for item in tools:
            self.add(item)

    def add(self, item: Tool | Callable[..., Any]) -> Tool:
        """Offer one more tool (a :class:`Tool` or a plain function); names must be unique."""
        made = make_tool(item)
        if made.name in self._tools:
            raise ValueError(f"the toolkit already has a tool named {made.name!r}")
        self._tools[made.name] = made
        return made

    @property
    def names(self) -> tuple[str, ...]:
        return tuple(self._tools)

    def get(self, name: str) -> Tool | None:
        return self._tools.get(name)

    def definitions(self) -> list[dict[str, Any]]:
        """Every tool in the OpenAI envelope, in the order they were added."""
        return [item.definition() for item in self._tools.values()]

    def __len__(self) -> int:
        return len(self._tools)

    def __contains__(self, name: object) -> bool:
        return name in self._tools

    async def run(self, call: ToolCall) -> ToolOutput:
        """Run one call (a plain function on a thread of its own, a coroutine function on the loop)."""
        started = time.perf_counter()
        found = self._tools.get(call.name)
        if found is None:
            known = ", ".join(self._tools) or "none"
            return _failed(call, f"no tool named {call.name!r} (tools: {known})", started)
        problem = argument_problem(found.parameters, call.arguments)
        if problem:
            return _failed(call, f"invalid arguments for {call.name}: {problem}", started)
        try:
            value = await _invoke(found.function, dict(call.arguments))
        except asyncio.CancelledError:
            raise
        except Exception as error:  # the model reads what went wrong and may try again
            return _failed(call, f"{type(error).__name__}: {error}", started)
        return ToolOutput(call, result_text(value), duration_ms=_elapsed_ms(started))


def argument_problem(schema: Mapping[str, Any], arguments: Mapping[str, Any]) -> str:
    """What is wrong with ``arguments`` against a tool's top-level schema ('' when nothing):
    missing required names, names it does not take, and values of the wrong JSON type."""
    properties = schema.get("properties") or {}
    missing = [name for name in schema.get("required") or () if name not in arguments]
    if missing:
        return f"missing required argument(s) {missing}"
    if schema.get("additionalProperties", True) is False or properties:
        unknown = sorted(set(arguments) - set(properties))
        if unknown:
            return f"unexpected argument(s) {unknown}; takes {sorted(properties)}"
    for name, value in arguments.items():
        expected = (properties.get(name) or {}).get("type")
        if isinstance(expected, str) and not _has_type(value, expected):
            return f"argument {name!r} must be of type {expected}, got {type(value).__name__}"
    return ""


def result_text(value: Any) -> str:
    """The text a tool's return value gives the model: a string as is, text blocks joined,
    anything else as JSON."""
    if isinstance(value, str):
        return value
    if isinstance(value, Mapping) and isinstance(value.get("content"), list):
        blocks = value["content"]
        if all(isinstance(block, Mapping) and block.get("type") == "text" for block in blocks):
            return "".join(str(block.get("text", "")) for block in blocks)
    if value is None:
        return ""
    return json.dumps(value, ensure_ascii=False, default=str)


def _has_type(value: Any, expected: str) -> bool:
    kinds = _JSON_TYPES.get(expected)
    if kinds is None:
        return True
    if isinstance(value, bool) and expected in ("integer", "number"):
        return False
    return isinstance(value, kinds)


async def _invoke(function: Callable[..., Any], arguments: dict[str, Any]) -> Any:
    if inspect.iscoroutinefunction(function):
        return await function(**arguments)
    value = await on_own_thread(function, **arguments)  # a Ctrl-C meanwhile does not wait for it
    return await value if inspect.isawaitable(value) else value


def _failed(call: ToolCall, message: str, started: float) -> ToolOutput:
    return ToolOutput(call, f"error: {message}", is_error=True, duration_ms=_elapsed_ms(started))


def _elapsed_ms(started: float) -> int:
    return int((time.perf_counter() - started) * 1000)

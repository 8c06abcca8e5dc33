"""Python functions as tools: schemas from hints and docstrings, and running calls."""

from __future__ import annotations

import asyncio
import enum
from typing import Literal

import pytest

from clika_runtime.chat.tools.definitions import ToolCall
from clika_runtime.chat.tools.schema import function_schema, parse_docstring
from clika_runtime.chat.tools.toolkit import Toolkit, argument_problem, result_text, text_result, tool


class Unit(enum.Enum):
    CELSIUS = "celsius"
    FAHRENHEIT = "fahrenheit"


def forecast(city: str, days: int = 3, unit: Unit = Unit.CELSIUS, hourly: bool | None = None) -> str:
    """The weather forecast for a city.

    Longer text that is not the description.

    Args:
        city: the city's name, e.g. Paris
        days: how many days
            ahead to look
    Returns:
        a sentence
    """
    return f"{city} {days} {unit}"


def test_a_schema_comes_from_hints_defaults_and_the_docstring():
    description, schema = function_schema(forecast)
    assert description == "The weather forecast for a city."
    assert schema == {
        "type": "object",
        "properties": {
            "city": {"type": "string", "description": "the city's name, e.g. Paris"},
            "days": {"type": "integer", "description": "how many days ahead to look", "default": 3},
            "unit": {"type": "string", "enum": ["celsius", "fahrenheit"]},
            "hourly": {"anyOf": [{"type": "boolean"}, {"type": "null"}], "default": None},
        },
        "required": ["city"],
    }


def test_rest_style_params_and_collections():
    def search(query: str, tags: list[str], limit: Literal[5, 10] = 5, filters: dict | None = None) -> list:
        """Search the notes.

        :param query: words to look for
        :param tags: only notes with these tags
        """

    _, schema = function_schema(search)
    assert schema["properties"]["tags"] == {
        "type": "array",
        "items": {"type": "string"},
        "description": "only notes with these tags",
    }
    assert schema["properties"]["limit"] == {"enum": [5, 10], "type": "integer", "default": 5}
    assert schema["properties"]["query"]["description"] == "words to look for"
    assert schema["required"] == ["query", "tags"]
    assert parse_docstring("One line.")[0] == "One line."


def test_a_hint_without_a_json_schema_is_refused_naming_the_parameter():
    def bad(when: object) -> str:
        return ""

    with pytest.raises(ValueError, match=r"tool 'bad', parameter 'when'"):
        tool(bad)


def test_the_decorator_forms_and_the_envelope():
    @tool("get_time", "Get the current time")
    async def get_time() -> dict:
        return text_result("noon")

    @tool(schema={"type": "object", "properties": {"x": {"type": "number"}}, "required": ["x"]})
    def square(x):
        return x * x

    assert get_time.definition() == {
        "type": "function",
        "function": {
            "name": "get_time",
            "description": "Get the current time",
            "parameters": {"type": "object", "properties": {}},
        },
    }
    assert square.parameters["required"] == ["x"] and square(3) == 9
    with pytest.raises(ValueError, match="already has a tool named 'square'"):
        Toolkit([square, square])
    with pytest.raises(ValueError, match="schema must be a JSON schema object"):
        tool(schema={"type": "string"})(lambda: None)


def test_calls_run_sync_and_async_functions_and_never_raise():
    @tool
    def add(a: int, b: int) -> int:
        """Add two numbers."""
        return a + b

    @tool
    async def fail(reason: str) -> str:
        """Always fails."""
        raise RuntimeError(reason)

    kit = Toolkit([add, fail])

    async def run(name: str, arguments: dict):
        return await kit.run(ToolCall("call_1", name, arguments))

    assert asyncio.run(run("add", {"a": 2, "b": 3})).content == "5"
    failed = asyncio.run(run("fail", {"reason": "disk full"}))
    assert failed.is_error and failed.content == "error: RuntimeError: disk full"
    unknown = asyncio.run(run("nope", {}))
    assert unknown.is_error and "no tool named 'nope' (tools: add, fail)" in unknown.content
    wrong = asyncio.run(run("add", {"a": "2", "b": 3}))
    assert wrong.is_error and "argument 'a' must be of type integer, got str" in wrong.content
    missing = asyncio.run(run("add", {"a": 1}))
    assert "missing required argument(s) ['b']" in missing.content


def test_argument_checks_and_result_text():
    schema = {"type": "object", "properties": {"n": {"type": "integer"}}, "required": ["n"]}
    assert argument_problem(schema, {"n": 1}) == ""
    assert "must be of type integer, got bool" in argument_problem(schema, {"n": True})
    assert "unexpected argument(s) ['m']" in argument_problem(schema, {"n": 1, "m": 2})
    assert result_text(text_result("hi")) == "hi"
    assert result_text({"a": 1}) == '{"a": 1}'
    assert result_text(None) == ""

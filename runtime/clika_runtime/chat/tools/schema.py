"""A tool's JSON schema derived from a Python function: its type hints and its docstring.

``def weather(city: str, unit: Literal["C", "F"] = "C") -> str`` becomes::

    {"type": "object",
     "properties": {"city": {"type": "string", "description": ...},
                    "unit": {"type": "string", "enum": ["C", "F"], "default": "C"}},
     "required": ["city"]}

The docstring's first paragraph is the tool's description; a Google-style
``Args:`` section (or reST ``:param name:`` lines) describes the parameters.
A hint that has no JSON counterpart is refused naming the parameter, so a tool
never reaches the model with a schema that cannot be satisfied.
"""

from __future__ import annotations

import enum
import inspect
import re
import types
import typing
from collections.abc import Callable, Mapping, Sequence
from typing import Any, Literal, Union, get_args, get_origin

_SCALARS: dict[Any, str] = {str: "string", int: "integer", float: "number", bool: "boolean"}
_ARG_SECTIONS = ("args:", "arguments:", "parameters:", "params:")
_SECTION_END = re.compile(r"^(returns?|raises?|yields?|examples?|notes?):\s*$", re.IGNORECASE)
_ARG_LINE = re.compile(r"^\s*(\*{0,2}\w+)\s*(?:\([^)]*\))?\s*:\s*(.*)$")
_REST_PARAM = re.compile(r"^\s*:param\s+(?:[^:]*\s)?(\w+)\s*:\s*(.*)$")


def function_schema(function: Callable[..., Any]) -> tuple[str, dict[str, Any]]:
    """``(description, parameters schema)`` of ``function``; ValueError naming a hint with no
    JSON counterpart."""
    signature = inspect.signature(function)
    hints = _hints(function)
    description, notes = parse_docstring(inspect.getdoc(function) or "")
    properties: dict[str, Any] = {}
    required: list[str] = []
    for name, parameter in signature.parameters.items():
        if parameter.kind in (parameter.VAR_POSITIONAL, parameter.VAR_KEYWORD):
            continue
        hint = hints.get(name, Any)
        try:
            schema = hint_schema(hint)
        except ValueError as error:
            raise ValueError(f"tool {function.__name__!r}, parameter {name!r}: {error}") from None
        if name in notes:
            schema["description"] = notes[name]
        if parameter.default is parameter.empty:
            required.append(name)
        elif _jsonable(parameter.default):
            schema["default"] = parameter.default
        properties[name] = schema
    parameters: dict[str, Any] = {"type": "object", "properties": properties}
    if required:
        parameters["required"] = required
    return description, parameters


def hint_schema(hint: Any) -> dict[str, Any]:
    """The JSON schema of one type hint (ValueError when it has none)."""
    if hint is Any or hint is inspect.Parameter.empty:
        return {}
    if hint in _SCALARS:
        return {"type": _SCALARS[hint]}
    if hint is type(None):
        return {"type": "null"}
    if isinstance(hint, type) and issubclass(hint, enum.Enum):
        return _enum_schema([member.value for member in hint])
    origin = get_origin(hint)
    if origin is Literal:
        return _enum_schema(list(get_args(hint)))
    if origin in (Union, types.UnionType):
        return _union_schema(get_args(hint))
    if hint in (list, tuple, set, frozenset) or origin in (list, tuple, set, frozenset, Sequence):
        items = get_args(hint)
        schema: dict[str, Any] = {"type": "array"}
        if items and items[0] is not Ellipsis:
            schema["items"] = hint_schema(items[0])
        return schema
    if hint is dict or origin in (dict, Mapping):
        return {"type": "object"}
    if _is_typed_dict(hint):
        return _typed_dict_schema(hint)
    raise ValueError(
        f"type {hint!r} has no JSON schema (use str, int, float, bool, list, dict, Literal or Enum)"
    )


def parse_docstring(doc: str) -> tuple[str, dict[str, str]]:
    """``(description, {parameter: description})`` from a docstring."""
    lines = doc.strip().splitlines()
    description: list[str] = []
    notes: dict[str, str] = {}
    in_args = False
    current = ""
    for line in lines:
        stripped = line.strip()
        rest = _REST_PARAM.match(line)
        if rest:
            current, notes[rest.group(1)] = rest.group(1), rest.group(2).strip()
            in_args = False
            continue
        if stripped.lower() in _ARG_SECTIONS:
            in_args, current = True, ""
            continue
        if _SECTION_END.match(stripped) or (stripped.startswith(":") and not rest):
            in_args, current = False, ""
            continue
        if in_args:
            current = _note_line(line, notes, current)
        elif not notes and (stripped or description):
            description.append(stripped)
    return _first_paragraph(description), notes


def _note_line(line: str, notes: dict[str, str], current: str) -> str:
    match = _ARG_LINE.match(line)
    if match and not line.startswith(" " * 8):
        name = match.group(1).lstrip("*")
        notes[name] = match.group(2).strip()
        return name
    if current and line.strip():
        notes[current] = f"{notes[current]} {line.strip()}".strip()
    return current


def _first_paragraph(lines: list[str]) -> str:
    paragraph: list[str] = []
    for line in lines:
        if not line:
            if paragraph:
                break
            continue
        paragraph.append(line)
    return " ".join(paragraph)


def _hints(function: Callable[..., Any]) -> dict[str, Any]:
    try:
        return typing.get_type_hints(function)
    except Exception as error:  # a hint naming a type that cannot be resolved
        raise ValueError(f"tool {function.__name__!r}: its type hints cannot be resolved ({error})") from None


def _enum_schema(values: list[Any]) -> dict[str, Any]:
    if not values or not all(_jsonable(value) for value in values):
        raise ValueError(f"enum values must be JSON scalars, got {values!r}")
    kinds = {_SCALARS.get(type(value)) for value in values}
    schema: dict[str, Any] = {"enum": values}
    if len(kinds) == 1 and None not in kinds:
        schema["type"] = kinds.pop()
    return schema


def _union_schema(members: tuple[Any, ...]) -> dict[str, Any]:
    present = [member for member in members if member is not type(None)]
    if len(present) == 1:  # Optional[X]: X, and null allowed
        inner = hint_schema(present[0])
        return {"anyOf": [inner, {"type": "null"}]} if inner else {}
    return {"anyOf": [hint_schema(member) for member in members]}


def _is_typed_dict(hint: Any) -> bool:
    return isinstance(hint, type) and issubclass(hint, dict) and hasattr(hint, "__annotations__")


def _typed_dict_schema(hint: Any) -> dict[str, Any]:
    fields = typing.get_type_hints(hint)
    required = sorted(getattr(hint, "__required_keys__", fields))
    return {
        "type": "object",
        "properties": {name: hint_schema(value) for name, value in fields.items()},
        "required": required,
    }


def _jsonable(value: Any) -> bool:
    return value is None or isinstance(value, (str, int, float, bool))

"""The pieces a format's call grammar is built from: Lark rules for a reply that is only calls.

Each format that can be constrained gives its :class:`~clika_runtime.chat.tools.formats.base.ToolCallFormat`
a ``call_rules`` function (:data:`CallRules`): from the offered tools, a way to write a literal
marker as a Lark term, and whether several calls may follow one another, it returns the rules
that define ``calls``. :mod:`clika_runtime.chat.tools.grammar` adds the ``start`` rule (and a
reasoning block where the template has one) and compiles the grammar.

Arguments are JSON schemas embedded as ``%json{...}``; a tool's schema is closed
(``additionalProperties: false``, bounded numbers) when its function says ``strict``, as
OpenAI's strict mode asks; otherwise it applies as written.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Mapping
from typing import Any

from clika_runtime.grammar.constraint import GrammarError, closed_schema

LiteralTerm = Callable[[str], str]
"""A literal piece of a call as a Lark term (a special token of the vocabulary named by id)."""

CallRules = Callable[[list[dict[str, Any]], LiteralTerm, bool], list[str]]
"""(tools, literal, parallel) -> the Lark rules of ``calls`` in one format."""

# JSON written the way the formats' own examples write it (and the models were trained on).
JSON_STYLE = {"whitespace_flexible": False, "item_separator": ", ", "key_separator": ": "}


def arguments_schema(tool: Mapping[str, Any]) -> dict[str, Any]:
    """The JSON schema a call's arguments must match: the function's ``parameters`` (any object when
    it has none), closed when the function is ``strict``."""
    function = tool["function"]
    name = function["name"]
    schema = function.get("parameters")
    if schema is None:
        schema = {"type": "object", "properties": {}}
    if not isinstance(schema, Mapping):
        raise GrammarError(f"tool {name!r}: 'parameters' must be a JSON schema object")
    if schema.get("type", "object") != "object":
        raise GrammarError(f"tool {name!r}: 'parameters' must describe an object, not {schema.get('type')!r}")
    return closed_schema(schema) if function.get("strict") is True else dict(schema)


def json_term(schema: Mapping[str, Any]) -> str:
    """A Lark term matching JSON valid under ``schema``, written in :data:`JSON_STYLE`."""
    return "%json" + json.dumps({**schema, "x-guidance": JSON_STYLE}, ensure_ascii=False)


def call_object(tools: list[dict[str, Any]], arguments_key: str) -> dict[str, Any]:
    """The JSON schema of one call object: ``{"name": <an offered name>, <arguments_key>: {...}}``."""
    shapes = [
        {
            "type": "object",
            "properties": {
                "name": {"const": tool["function"]["name"]},
                arguments_key: arguments_schema(tool),
            },
            "required": ["name", arguments_key],
            "additionalProperties": False,
        }
        for tool in tools
    ]
    return shapes[0] if len(shapes) == 1 else {"anyOf": shapes}


def joined(item: str, separator: str, parallel: bool) -> str:
    """The ``calls`` rule: one ``item``, or (``parallel``) several joined by ``separator``."""
    return f"calls: {item} ({separator} {item})*" if parallel else f"calls: {item}"


def keyword_items(
    schema: Mapping[str, Any], item: Callable[[str, Mapping[str, Any]], str]
) -> list[tuple[str, bool]]:
    """One Lark term per declared property, required ones first: (term, required)."""
    properties = schema.get("properties") or {}
    required = [key for key in schema.get("required") or () if key in properties]
    optional = [key for key in properties if key not in required]
    return [(item(key, properties[key]), True) for key in required] + [
        (item(key, properties[key]), False) for key in optional
    ]


def listed(items: list[tuple[str, bool]], separator: str) -> str:
    """The items in order, the required ones always, each optional one or not, ``separator`` (a Lark
    term, or "" for none) between the ones present; "" when there are none."""
    required = [term for term, needed in items if needed]
    optional = [term for term, needed in items if not needed]
    glue = f" {separator} " if separator else " "
    lead = f"{separator} " if separator else ""
    if required:
        return glue.join(required) + "".join(f" ({lead}{term})?" for term in optional)
    if not optional:
        return ""
    # No required item: the first one present opens the list, the later ones follow it.
    choices = [
        term + "".join(f" ({lead}{later})?" for later in optional[first + 1 :])
        for first, term in enumerate(optional)
    ]
    return "(" + " | ".join(choices) + ")?"

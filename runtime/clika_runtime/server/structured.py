"""The structured-output fields of every front end, as one constraint or a 400 naming the field.

* OpenAI chat and completions: ``response_format`` (``json_object``, ``json_schema``, ``text``);
* llama.cpp's server: ``json_schema`` (a schema) and ``grammar`` (GBNF);
* OpenAI Responses: ``text.format`` (``{"type": "json_schema", "name", "schema", "strict"}``);
* Ollama: ``format`` (``"json"`` or a schema).

Compiling is bounded (:mod:`clika_runtime.grammar.constraint`) and runs where
the request is parsed, off the event loop.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from clika_runtime.grammar import Constraint, GrammarError, constraint_from
from clika_runtime.server.errors import bad_request


def openai_constraint(body: Mapping[str, Any]) -> Constraint | None:
    """The constraint an OpenAI-style body asks for (at most one of its three fields)."""
    asked = [name for name in ("response_format", "json_schema", "grammar") if body.get(name) is not None]
    if len(asked) > 1:
        raise bad_request(
            f"give one of 'response_format', 'json_schema' and 'grammar', not {asked}", asked[1]
        )
    if not asked:
        return None
    name = asked[0]
    value = body[name]
    if name == "json_schema":
        value = {"type": "json_schema", "json_schema": {"name": "schema", "schema": value}}
    elif name == "grammar":
        if not isinstance(value, str):
            raise bad_request("'grammar' must be a GBNF grammar (a string)", "grammar")
        value = {"type": "gbnf", "grammar": value}
    return _compiled(value, name)


def responses_constraint(text: Any) -> Constraint | None:
    """The constraint of a Responses body's ``text.format``."""
    if not isinstance(text, Mapping) or text.get("format") is None:
        return None
    fmt = text["format"]
    if isinstance(fmt, Mapping) and fmt.get("type") == "json_schema" and "json_schema" not in fmt:
        # The Responses API puts the schema's fields beside its type.
        fmt = {"type": "json_schema", "json_schema": {k: v for k, v in fmt.items() if k != "type"}}
    return _compiled(fmt, "text.format")


def ollama_constraint(value: Any) -> Constraint | None:
    """The constraint of an Ollama body's ``format`` ('' and None: none)."""
    if value in (None, ""):
        return None
    return _compiled(value, "format")


def _compiled(value: Any, field: str) -> Constraint | None:
    try:
        return constraint_from(value, field=field)
    except GrammarError as error:
        raise bad_request(str(error), field) from None

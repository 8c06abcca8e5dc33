"""What a caller asks the reply to follow, as one :class:`Constraint`.

Accepted shapes (each front end speaks one of them):

* OpenAI's ``response_format``: ``{"type": "json_object"}``, ``{"type": "json_schema",
  "json_schema": {"name", "schema", "strict"}}``, ``{"type": "text"}`` (no constraint);
* llama.cpp's body fields: ``json_schema`` (a schema) and ``grammar`` (GBNF);
* Ollama's ``format``: ``"json"`` or a schema object;
* the Python API: any of those, a pydantic model class, ``{"type": "regex", "pattern"}``,
  ``{"type": "lark", "grammar"}``, ``{"type": "gbnf", "grammar"}``.

Object schemas are closed (``additionalProperties: false`` where a schema lists its
properties and says nothing of others) and numbers without bounds get 16 digits
before the point at most (as llama.cpp's grammars do) and 10 after it, unless
``json_schema.strict`` is False.

Compiling is bounded: a source larger than ``MAX_SOURCE_CHARS``, or a grammar
the engine would need more than its item or lexer-state limits for, is refused
with a :class:`GrammarError` naming the problem, never a hang.
"""

from __future__ import annotations

import contextlib
import json
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from typing import Any

MAX_SOURCE_CHARS = 200_000
MAX_SCHEMA_DEPTH = 64
NUMBER_BOUND = 10**16 - 1
FRACTION_STEP = 1e-10  # at most 10 digits after a number's point (the engine takes no finer step)
KINDS = ("json_schema", "json", "regex", "lark", "gbnf")
# Bounds on what compiling one grammar may cost (llguidance's own defaults are larger).
LIMITS = {"max_items_in_row": 2000, "max_lexer_states": 50_000, "max_grammar_size": 500_000}
ANY_JSON_OBJECT = {"type": "object"}
SCHEMA_TYPES = ("object", "array", "string", "number", "integer", "boolean", "null")
SCHEMA_KEYWORDS = {"properties", "anyOf", "oneOf", "allOf", "$ref", "enum", "const", "items", "$defs"}


class GrammarError(ValueError):
    """A constraint that cannot be compiled: its message names the problem."""


@dataclass(frozen=True)
class Constraint:
    """A compiled constraint: its kind, the llguidance grammar, and a short name for logs."""

    kind: str
    grammar: str
    name: str = ""

    @property
    def is_json(self) -> bool:
        return self.kind in ("json_schema", "json")


def constraint_from(value: Any, *, field: str = "response_format") -> Constraint | None:
    """The :class:`Constraint` ``value`` asks for (None for no constraint); GrammarError naming
    ``field`` and the problem otherwise."""
    if value is None:
        return None
    if isinstance(value, type) and hasattr(value, "model_json_schema"):  # a pydantic model class
        return compile_constraint(
            "json_schema", closed_schema(value.model_json_schema()), value.__name__, field
        )
    if isinstance(value, str):
        if value == "json":
            return compile_constraint("json", ANY_JSON_OBJECT, "json", field)
        raise GrammarError(
            f"{field}: {value!r} is not a format (use 'json', a JSON schema or a format object)"
        )
    if not isinstance(value, Mapping):
        raise GrammarError(f"{field} must be an object, got {type(value).__name__}")
    return _from_mapping(value, field)


def _from_mapping(value: Mapping[str, Any], field: str) -> Constraint | None:
    kind = value.get("type")
    if kind == "text":
        return None
    if kind == "json_object":
        schema = value.get("schema") or ANY_JSON_OBJECT
        return compile_constraint("json", schema, "json_object", field)
    if kind == "json_schema" and isinstance(value.get("json_schema"), Mapping):
        body = value["json_schema"]
        schema = body.get("schema")
        if not isinstance(schema, Mapping):
            raise GrammarError(f"{field}.json_schema.schema must be a JSON schema object")
        if body.get("strict", True) is not False:
            schema = closed_schema(schema)
        return compile_constraint("json_schema", schema, str(body.get("name") or "schema"), field)
    if kind == "regex":
        return compile_constraint("regex", _text(value, "pattern", field), "regex", field)
    if kind in ("lark", "gbnf"):
        return compile_constraint(kind, _text(value, "grammar", field), kind, field)
    if kind in SCHEMA_TYPES or (kind is None and SCHEMA_KEYWORDS & set(value)):
        return compile_constraint("json_schema", closed_schema(value), "schema", field)  # a bare JSON schema
    raise GrammarError(
        f"{field}: unknown format {kind!r}; expected json_object, json_schema, regex, lark, gbnf or text"
    )


def closed_schema(schema: Any, depth: int = 0) -> Any:
    """``schema`` with ``additionalProperties: false`` on every object that lists its properties and
    says nothing of others: the reply has exactly the fields asked for (OpenAI's strict mode, and
    what a pydantic model means), not any number of extra keys."""
    if depth > MAX_SCHEMA_DEPTH:
        raise GrammarError(f"the JSON schema nests deeper than {MAX_SCHEMA_DEPTH} levels")
    if isinstance(schema, list):
        return [closed_schema(item, depth + 1) for item in schema]
    if not isinstance(schema, Mapping):
        return schema
    closed = {key: closed_schema(value, depth + 1) for key, value in schema.items()}
    if isinstance(schema.get("properties"), Mapping) and "additionalProperties" not in schema:
        closed["additionalProperties"] = False
    if schema.get("type") in ("integer", "number"):
        # A small model can repeat a digit until its budget ends: like llama.cpp's grammars,
        # give a number at most 16 digits before its point unless the schema bounds it.
        closed.setdefault("minimum", -NUMBER_BOUND)
        closed.setdefault("maximum", NUMBER_BOUND)
    if schema.get("type") == "number" and "multipleOf" not in schema:
        # Nor zeros after the point without end ("100.0000..." is 100 and within any bound).
        closed["multipleOf"] = FRACTION_STEP
    return closed


def compile_constraint(kind: str, source: Any, name: str, field: str) -> Constraint:
    """Compile and check one constraint within the bounds (see the module docstring)."""
    llguidance = _engine()
    text = source if isinstance(source, str) else bounded_json(source, kind, field)
    if len(text) > MAX_SOURCE_CHARS:
        raise GrammarError(
            f"{field}: the {kind} is {len(text)} characters; at most {MAX_SOURCE_CHARS} are taken"
        )
    with _panics_named(kind, field):
        grammar = _grammar(llguidance, kind, text, field)
        problem = llguidance.LLMatcher.validate_grammar(grammar, limits=parser_limits())
    if problem and not problem.startswith("WARNING"):
        raise GrammarError(f"{field}: invalid {kind}: {problem.strip()}")
    return Constraint(kind, grammar, name)


def bounded_json(value: Any, kind: str, field: str) -> str:
    """``value`` as JSON text, stopping as soon as it passes ``MAX_SOURCE_CHARS`` (a schema built
    in Python can share sub-objects, so its text may be far larger than the object)."""
    pieces: list[str] = []
    size = 0
    try:
        for piece in json.JSONEncoder(ensure_ascii=False).iterencode(value):
            size += len(piece)
            if size > MAX_SOURCE_CHARS:
                raise GrammarError(f"{field}: the {kind} is over {MAX_SOURCE_CHARS} characters as JSON")
            pieces.append(piece)
    except (TypeError, ValueError, RecursionError) as error:
        if isinstance(error, GrammarError):
            raise
        raise GrammarError(f"{field}: the {kind} is not JSON: {error}") from None
    return "".join(pieces)


@contextlib.contextmanager
def _panics_named(kind: str, field: str) -> Iterator[None]:
    """A panic inside the grammar engine (a Rust ``PanicException``, which derives from
    BaseException and so escapes ``except Exception``) as the GrammarError of the source that
    caused it: some invalid schemas make it panic while writing its error message."""
    try:
        yield
    except GrammarError:
        raise
    except BaseException as error:
        if type(error).__name__ != "PanicException":
            raise
        first_line = str(error).splitlines()[0][:200] if str(error) else "the grammar engine failed"
        raise GrammarError(f"{field}: invalid {kind}: {first_line}") from None


def parser_limits() -> Any:
    """The grammar engine's limits for one grammar (compile and every step)."""
    return _engine().LLParserLimits(**LIMITS)


def _grammar(llguidance: Any, kind: str, source: Any, field: str) -> str:
    matcher = llguidance.LLMatcher
    try:
        if kind in ("json_schema", "json"):
            return matcher.grammar_from_json_schema(source, defaults={"whitespace_flexible": False})
        if kind == "regex":
            return matcher.grammar_from_regex(source)
        if kind == "gbnf":
            from llguidance.gbnf_to_lark import gbnf_to_lark

            return matcher.grammar_from_lark(gbnf_to_lark(source))
        return matcher.grammar_from_lark(source)
    except (ValueError, TypeError) as error:
        raise GrammarError(f"{field}: invalid {kind}: {error}") from None
    except Exception as error:  # the GBNF converter's own parse errors
        raise GrammarError(f"{field}: invalid {kind}: {error}") from None


def _text(value: Mapping[str, Any], key: str, field: str) -> str:
    text = value.get(key)
    if not isinstance(text, str) or not text:
        raise GrammarError(f"{field}.{key} must be a non-empty string")
    return text


def _engine() -> Any:
    try:
        import llguidance
    except ImportError:
        raise GrammarError(
            "structured output needs the grammar engine: pip install 'clika-runtime[structured]'"
        ) from None
    return llguidance

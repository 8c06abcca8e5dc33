"""Structured output on a real model (slow): Qwen2.5-Coder-0.5B-Instruct int4 behind the server,
the real openai client, 20 varied JSON schemas. Every reply parses and validates (the jsonschema
library), whole and streamed, alone and eight at once."""

from __future__ import annotations

import json
from concurrent.futures import ThreadPoolExecutor

import jsonschema
import openai
import pytest

from clika_runtime import modelverse
from clika_runtime.server import start_server

pytestmark = pytest.mark.slow

MODEL = "qwen"
STR, INT, NUM, BOOL = {"type": "string"}, {"type": "integer"}, {"type": "number"}, {"type": "boolean"}


def obj(required: dict, optional: dict | None = None) -> dict:
    return {"type": "object", "properties": {**required, **(optional or {})}, "required": list(required)}


SCHEMAS = [
    ("a person", obj({"name": STR, "age": {"type": "integer", "minimum": 0, "maximum": 130}})),
    ("a city", obj({"city": STR, "country": STR, "population": INT})),
    (
        "a yes/no verdict",
        obj(
            {"answer": {"enum": ["yes", "no"]}, "confidence": {"type": "number", "minimum": 0, "maximum": 1}}
        ),
    ),
    ("three colours", obj({"colours": {"type": "array", "items": STR, "minItems": 3, "maxItems": 3}})),
    ("a book", obj({"title": STR, "author": STR}, {"year": INT, "isbn": STR})),
    ("a point", obj({"x": NUM, "y": NUM})),
    (
        "a todo list",
        obj({"items": {"type": "array", "items": obj({"task": STR, "done": BOOL}), "maxItems": 4}}),
    ),
    ("an address", obj({"street": STR, "zip": {"type": "string", "pattern": "^[0-9]{5}$"}, "city": STR})),
    ("a weekday", obj({"day": {"enum": ["monday", "tuesday", "wednesday", "thursday", "friday"]}})),
    (
        "a product",
        obj(
            {
                "name": STR,
                "price": {"type": "number", "minimum": 0},
                "tags": {"type": "array", "items": STR, "maxItems": 3},
            }
        ),
    ),
    ("a rating", obj({"stars": {"type": "integer", "minimum": 1, "maximum": 5}, "comment": STR})),
    ("a nested order", obj({"id": INT, "customer": obj({"name": STR, "email": STR}), "total": NUM})),
    ("a boolean flag set", obj({"debug": BOOL, "verbose": BOOL, "dry_run": BOOL})),
    (
        "a date",
        obj(
            {
                "year": {"type": "integer", "minimum": 1900, "maximum": 2100},
                "month": {"type": "integer", "minimum": 1, "maximum": 12},
            }
        ),
    ),
    (
        "a matrix",
        obj(
            {
                "rows": {
                    "type": "array",
                    "items": {"type": "array", "items": INT, "maxItems": 2},
                    "maxItems": 2,
                }
            }
        ),
    ),
    ("a language", obj({"language": {"enum": ["python", "rust", "go"]}, "reason": STR})),
    # Bounded free text: the reply's end within max_tokens is the grammar's guarantee, not the model's
    # choice (an unbounded note let Qwen ramble past 160 tokens after a last-digit change in the logits).
    (
        "an optional note",
        obj(
            {"title": {"type": "string", "maxLength": 60}},
            {"note": {"type": "string", "maxLength": 200}, "priority": {"enum": ["low", "high"]}},
        ),
    ),
    ("a temperature", obj({"celsius": NUM, "unit": {"const": "C"}})),
    ("a key-value pair", obj({"key": {"type": "string", "maxLength": 20}, "value": {"anyOf": [STR, INT]}})),
    (
        "a team",
        obj(
            {
                "team": STR,
                "members": {
                    "type": "array",
                    "items": obj({"name": STR, "role": STR}),
                    "minItems": 1,
                    "maxItems": 2,
                },
            }
        ),
    ),
]


@pytest.fixture(scope="module")
def client(qwen05_gguf):
    from clika_export.api import cached_export

    model = modelverse.load(cached_export(qwen05_gguf, precision="int4", progress=False))
    with start_server(model, model_id=MODEL, max_active=8) as server:
        yield openai.OpenAI(base_url=server.url, api_key="none", max_retries=0, timeout=600)
    model.close()


def reply(client: openai.OpenAI, what: str, schema: dict, *, stream: bool) -> dict:
    request = {
        "model": MODEL,
        "messages": [{"role": "user", "content": f"Give {what} as JSON."}],
        "max_tokens": 160,
        "temperature": 0,
        "response_format": {
            "type": "json_schema",
            "json_schema": {"name": "answer", "schema": schema, "strict": True},
        },
    }
    if stream:
        chunks = client.chat.completions.create(**request, stream=True)
        text, finish = "", None
        for chunk in chunks:
            if chunk.choices:
                text += chunk.choices[0].delta.content or ""
                finish = chunk.choices[0].finish_reason or finish
    else:
        choice = client.chat.completions.create(**request).choices[0]
        text, finish = choice.message.content, choice.finish_reason
    assert finish == "stop", f"{what}: ended by {finish}: {text!r}"
    value = json.loads(text)
    jsonschema.validate(value, schema)
    return value


def test_twenty_schemas_one_at_a_time_whole_and_streamed(client):
    for index, (what, schema) in enumerate(SCHEMAS):
        reply(client, what, schema, stream=index % 2 == 1)


def test_eight_schemas_at_once(client):
    with ThreadPoolExecutor(8) as pool:
        futures = [
            pool.submit(reply, client, what, schema, stream=i % 2 == 0)
            for i, (what, schema) in enumerate(SCHEMAS[:8])
        ]
        for future in futures:
            future.result()

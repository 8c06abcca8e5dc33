"""Structured output through the server, on the tiny random llama, with the real clients:
OpenAI's response_format (json_object, json_schema via ``chat.completions.parse``), llama.cpp's
``json_schema`` and ``grammar`` fields, the Responses API's ``text.format`` and Ollama's
``format``. The model's words are noise; what is checked is that every reply follows its format."""

from __future__ import annotations

import json
import re

import httpx
import jsonschema
import ollama
import openai
import pytest
from pydantic import BaseModel

from clika_runtime.server import start_server

MODEL = "tiny"
SCHEMA = {
    "type": "object",
    "properties": {"ok": {"type": "boolean"}, "n": {"type": "integer", "minimum": 0, "maximum": 9}},
    "required": ["ok", "n"],
}


class Verdict(BaseModel):
    ok: bool
    score: int


@pytest.fixture(scope="module")
def server(tiny_model):
    with start_server(tiny_model, model_id=MODEL, max_active=4) as running:
        yield running


@pytest.fixture(scope="module")
def client(server):
    return openai.OpenAI(base_url=server.url, api_key="none", max_retries=0, timeout=120)


def ask(**extra):
    return {
        "model": MODEL,
        "messages": [{"role": "user", "content": "answer in JSON"}],
        "max_tokens": 60,
        **extra,
    }


def test_json_schema_whole_and_streamed(client):
    fmt = {"type": "json_schema", "json_schema": {"name": "thing", "schema": SCHEMA, "strict": True}}
    whole = client.chat.completions.create(**ask(response_format=fmt, temperature=1.0, seed=1))
    jsonschema.validate(json.loads(whole.choices[0].message.content), SCHEMA)
    assert whole.choices[0].finish_reason == "stop"
    chunks = client.chat.completions.create(**ask(response_format=fmt, temperature=1.0, seed=2, stream=True))
    text = "".join(c.choices[0].delta.content or "" for c in chunks if c.choices)
    jsonschema.validate(json.loads(text), SCHEMA)


def test_parse_with_a_pydantic_model_and_json_object(client):
    parsed = client.chat.completions.parse(
        model=MODEL, messages=[{"role": "user", "content": "judge"}], response_format=Verdict, max_tokens=60
    )
    assert isinstance(parsed.choices[0].message.parsed, Verdict)
    # Any object: random weights may write a key until the token budget ends (finish "length",
    # as OpenAI's JSON mode does); a reply that ended by itself is one whole object.
    for seed in range(3):
        choice = client.chat.completions.create(
            **ask(response_format={"type": "json_object"}, seed=seed)
        ).choices[0]
        assert choice.message.content.startswith("{")
        if choice.finish_reason == "stop":
            assert isinstance(json.loads(choice.message.content), dict)
        else:
            assert choice.finish_reason == "length"


def test_llama_cpp_fields_and_completions(client, server):
    gbnf = client.chat.completions.create(**ask(extra_body={"grammar": 'root ::= ("yes" | "no")'}))
    assert gbnf.choices[0].message.content in ("yes", "no")
    schema = client.chat.completions.create(
        **ask(extra_body={"json_schema": SCHEMA}, temperature=1.0, seed=4)
    )
    jsonschema.validate(json.loads(schema.choices[0].message.content), SCHEMA)
    completion = client.completions.create(
        model=MODEL, prompt="id:", max_tokens=20, extra_body={"grammar": 'root ::= [a-f]{4} "-" [0-9]{2}'}
    )
    assert re.fullmatch("[a-f]{4}-[0-9]{2}", completion.choices[0].text)


def test_responses_text_format(client):
    response = client.responses.create(
        model=MODEL,
        input="answer in JSON",
        max_output_tokens=60,
        text={"format": {"type": "json_schema", "name": "thing", "schema": SCHEMA, "strict": True}},
    )
    jsonschema.validate(json.loads(response.output_text), SCHEMA)


def test_ollama_format(server):
    client = ollama.Client(host=server.base_url)
    chat = client.chat(
        model=MODEL, messages=[{"role": "user", "content": "x"}], format=SCHEMA, options={"num_predict": 60}
    )
    jsonschema.validate(json.loads(chat.message.content), SCHEMA)
    generated = client.generate(model=MODEL, prompt="x", format="json", options={"num_predict": 60})
    assert generated.response.startswith("{")
    if generated.done_reason == "stop":
        assert isinstance(json.loads(generated.response), dict)


@pytest.mark.parametrize(
    ("extra", "param", "problem"),
    [
        (
            {"response_format": {"type": "json_schema", "json_schema": {"schema": {"type": "nope"}}}},
            "response_format",
            "invalid json_schema",
        ),
        ({"response_format": {"type": "yaml"}}, "response_format", "unknown format 'yaml'"),
        ({"grammar": "root ::= ("}, "grammar", "invalid gbnf"),
        ({"grammar": 5}, "grammar", "must be a GBNF grammar"),
        ({"json_schema": SCHEMA, "grammar": 'root ::= "a"'}, "grammar", "give one of"),
    ],
)
def test_a_bad_format_is_a_400_naming_it(server, extra, param, problem):
    response = httpx.post(f"{server.url}/chat/completions", json=ask(**extra), timeout=60)
    assert response.status_code == 400
    error = response.json()["error"]
    assert error["param"] == param and problem in error["message"]


def test_a_bad_ollama_format_is_a_400(server):
    response = httpx.post(
        f"{server.base_url}/api/chat", json={"model": MODEL, "messages": [], "format": "xml"}, timeout=60
    )
    assert response.status_code == 400 and "'xml' is not a format" in response.json()["error"]

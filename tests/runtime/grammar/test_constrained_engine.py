"""Constrained decoding through the real engine, on the tiny random llama: whatever the random
weights prefer, a constrained reply follows its schema, regex or grammar; free rows in the same
batch decode exactly as they do alone; drafting keeps the constrained reply unchanged."""

from __future__ import annotations

import json
import re

import jsonschema
import pytest
from pydantic import BaseModel

from clika_runtime.grammar import GrammarError

SCHEMA = {
    "type": "object",
    "properties": {
        "ok": {"type": "boolean"},
        "count": {"type": "integer", "minimum": 0, "maximum": 99},
        "tag": {"enum": ["red", "green"]},
        "items": {"type": "array", "items": {"type": "integer"}, "maxItems": 3},
    },
    "required": ["ok", "count", "tag"],
}
AS_FORMAT = {"type": "json_schema", "json_schema": {"name": "thing", "schema": SCHEMA}}


class Pair(BaseModel):
    left: int
    right: bool


@pytest.mark.parametrize("temperature", [0.0, 1.0])
def test_a_schema_reply_parses_and_validates(tiny_model, temperature):
    for seed in range(4):
        reply = tiny_model.generate(
            f"prompt {seed}", max_new_tokens=80, temperature=temperature, seed=seed, response_format=AS_FORMAT
        )
        assert tiny_model.report.finish_reason == "stop"
        jsonschema.validate(json.loads(reply), SCHEMA)


def test_regex_gbnf_lark_and_a_pydantic_model(tiny_model):
    options = {"max_new_tokens": 40, "temperature": 1.0, "seed": 7}
    regex = tiny_model.generate(
        "x", response_format={"type": "regex", "pattern": "[a-c]{3}-[0-9]{2}"}, **options
    )
    assert re.fullmatch("[a-c]{3}-[0-9]{2}", regex)
    gbnf = tiny_model.generate(
        "x", response_format={"type": "gbnf", "grammar": 'root ::= "yes" | "no"'}, **options
    )
    assert gbnf in ("yes", "no")
    lark = tiny_model.generate(
        "x", response_format={"type": "lark", "grammar": 'start: "<" /[0-9]+/ ">"'}, **options
    )
    assert re.fullmatch("<[0-9]+>", lark)
    pair = tiny_model.generate("x", response_format=Pair, **options)
    Pair.model_validate_json(pair)


def test_constrained_and_free_rows_share_a_batch(tiny_model):
    greedy = {"max_new_tokens": 24, "temperature": 0.0}
    free_alone = [tiny_model.generate(p, **greedy) for p in ("one", "two")]
    streams = [
        tiny_model.stream_generate("one", **greedy),
        tiny_model.stream_generate(
            "json please", response_format=AS_FORMAT, **{**greedy, "max_new_tokens": 80}
        ),
        tiny_model.stream_generate("two", **greedy),
    ]
    replies = ["".join(stream) for stream in streams]
    assert [replies[0], replies[2]] == free_alone
    jsonschema.validate(json.loads(replies[1]), SCHEMA)


def test_drafting_keeps_a_constrained_greedy_reply(tiny_model):
    # A reply that repeats itself, so prompt lookup drafts; every draft is cut to what the grammar allows.
    repeating = {
        "type": "object",
        "properties": {"xs": {"type": "array", "items": {"enum": ["aaaa", "bbbb"]}}},
        "required": ["xs"],
    }
    options = {"max_new_tokens": 60, "temperature": 0.0, "response_format": repeating}
    plain = tiny_model.generate("repeat repeat repeat", **options)
    drafted = tiny_model.generate("repeat repeat repeat", prompt_lookup_num_tokens=4, **options)
    assert drafted == plain and tiny_model.report.draft_tokens > 0


def test_a_bad_format_is_refused_before_the_request_runs(tiny_model):
    with pytest.raises(GrammarError, match="invalid json_schema"):
        tiny_model.generate(
            "x", response_format={"type": "json_schema", "json_schema": {"schema": {"type": "nope"}}}
        )
    with pytest.raises(GrammarError, match="unknown format 'xml'"):
        tiny_model.generate("x", response_format={"type": "xml"})

"""Constraints compiled from every shape callers send, and their masks on a byte-level
vocabulary (one token per byte, so allowed sets can be read as characters)."""

from __future__ import annotations

import json

import numpy as np
import pytest
from conftest import tiny_tokenizer
from pydantic import BaseModel

from clika_runtime.grammar import GrammarError, constraint_from
from clika_runtime.grammar.masks import MaskedRow, StepMasks
from clika_runtime.grammar.matcher import GrammarMatcher
from clika_runtime.grammar.vocabulary import grammar_vocabulary
from clika_runtime.text.tokenizer import Tokenizer

VOCAB = 272  # wider than the tokenizer's 259: ids past it are never allowed


@pytest.fixture(scope="module")
def tokenizer() -> Tokenizer:
    inner = tiny_tokenizer()
    return Tokenizer(inner, eos_token_ids=[inner.token_to_id("</s>")])


@pytest.fixture(scope="module")
def vocabulary(tokenizer):
    return grammar_vocabulary(tokenizer, VOCAB)


def walk(matcher: GrammarMatcher, tokenizer: Tokenizer, text: str) -> None:
    for token in tokenizer.encode(text, add_special_tokens=False):
        assert matcher.accept(token), f"refused at {text!r}"


def allowed_text(matcher: GrammarMatcher, tokenizer: Tokenizer) -> set[str]:
    allowed = StepMasks.of([matcher], VOCAB).start().allowed()[0]
    return {tokenizer.decode([int(i)], skip_special_tokens=False) for i in np.flatnonzero(allowed)}


class Person(BaseModel):
    name: str
    age: int


@pytest.mark.parametrize(
    ("value", "kind"),
    [
        ({"type": "json_object"}, "json"),
        ("json", "json"),
        (
            {"type": "json_schema", "json_schema": {"name": "p", "schema": Person.model_json_schema()}},
            "json_schema",
        ),
        (Person, "json_schema"),
        ({"type": "object", "properties": {"a": {"type": "integer"}}}, "json_schema"),
        ({"type": "regex", "pattern": "[0-9]{3}"}, "regex"),
        ({"type": "lark", "grammar": 'start: "yes" | "no"'}, "lark"),
        ({"type": "gbnf", "grammar": 'root ::= "yes" | "no"'}, "gbnf"),
    ],
)
def test_every_shape_compiles(value, kind):
    assert constraint_from(value).kind == kind


def test_text_and_none_are_no_constraint():
    assert constraint_from(None) is None and constraint_from({"type": "text"}) is None


@pytest.mark.parametrize(
    ("value", "problem"),
    [
        ({"type": "json_schema", "json_schema": {"schema": {"type": "strin"}}}, "invalid json_schema"),
        ({"type": "json_schema", "json_schema": {"name": "x"}}, "json_schema.schema must be a JSON schema"),
        ({"type": "regex", "pattern": "(ab"}, "unclosed group"),
        ({"type": "lark", "grammar": "start: undefined_rule"}, "invalid lark"),
        ({"type": "gbnf", "grammar": "root ::= ("}, "invalid gbnf"),
        ({"type": "yaml"}, "unknown format 'yaml'"),
        ("xml", "'xml' is not a format"),
        (42, "must be an object, got int"),
        ({"type": "regex", "pattern": "a" * 300_000}, "at most 200000 are taken"),
    ],
)
def test_bad_constraints_are_refused_naming_the_problem(value, problem):
    with pytest.raises(GrammarError, match=problem):
        constraint_from(value)


def test_a_schema_whose_json_has_no_end_is_refused_before_it_is_written_out():
    # Sub-objects shared 40 ways at 60 levels: a small object whose JSON text has no end.
    schema: dict = {"type": "string"}
    for depth in range(60):
        schema = {"type": "object", "properties": {f"p{depth}_{i}": schema for i in range(40)}}
    with pytest.raises(GrammarError):
        constraint_from({"type": "json_schema", "json_schema": {"name": "deep", "schema": schema}})


def test_a_json_schema_mask_allows_exactly_what_the_schema_can_continue(tokenizer, vocabulary):
    matcher = GrammarMatcher(constraint_from(Person), vocabulary)
    assert allowed_text(matcher, tokenizer) == {"{"}
    walk(matcher, tokenizer, '{"name":"Ada","age":')
    digits = allowed_text(matcher, tokenizer)
    assert set("123456789-") <= digits and "}" not in digits and '"' not in digits
    walk(matcher, tokenizer, "36}")
    assert matcher.is_accepting()
    assert allowed_text(matcher, tokenizer) == {"</s>"}  # only the end of the reply is left
    assert matcher.accept(tokenizer.eos_token_ids[0]) and matcher.finished


def test_a_refused_token_leaves_the_matcher_in_error(tokenizer, vocabulary):
    matcher = GrammarMatcher(constraint_from({"type": "regex", "pattern": "[0-9]+"}), vocabulary)
    assert not matcher.accept(tokenizer.encode("x", add_special_tokens=False)[0])
    assert matcher.finished and matcher.error


def test_drafts_are_checked_without_advancing(tokenizer, vocabulary):
    matcher = GrammarMatcher(constraint_from({"type": "regex", "pattern": "ab+c"}), vocabulary)
    draft = tokenizer.encode("abbxc", add_special_tokens=False)
    assert matcher.accepted_prefix(draft) == 3
    assert allowed_text(matcher, tokenizer) == {"a"}  # still at the start


def test_masks_apply_to_the_rows_they_belong_to(tokenizer, vocabulary):
    digits = GrammarMatcher(constraint_from({"type": "regex", "pattern": "[0-9]"}), vocabulary)
    yes_no = GrammarMatcher(constraint_from({"type": "gbnf", "grammar": 'root ::= "yes" | "no"'}), vocabulary)
    logits = np.zeros((3, VOCAB), dtype=np.float32)
    StepMasks([MaskedRow(digits, 0), MaskedRow(yes_no, 2)], 3, VOCAB).start().apply(logits)
    allowed = [
        {tokenizer.decode([int(i)], skip_special_tokens=False) for i in np.flatnonzero(np.isfinite(row))}
        for row in logits
    ]
    assert allowed[0] == set("0123456789") and allowed[2] == {"y", "n"}
    assert np.isfinite(logits[1]).all()  # a free row is untouched


def test_a_generated_reply_parses_as_the_schema(tokenizer, vocabulary):
    # Walk the grammar with a fixed preference (close what is open, else the lowest allowed id):
    # whatever the choices, the text the grammar lets through is valid.
    matcher = GrammarMatcher(constraint_from(Person), vocabulary)
    eos = tokenizer.eos_token_ids[0]
    preferred = [eos, *tokenizer.encode('"}7', add_special_tokens=False)]
    made: list[int] = []
    while not matcher.finished and len(made) < 200:
        allowed = set(np.flatnonzero(StepMasks.of([matcher], VOCAB).start().allowed()[0]).tolist())
        pick = next((token for token in preferred if token in allowed), min(allowed))
        assert matcher.accept(pick)
        made.append(pick)
    assert matcher.finished  # the closing brace completes it: no end token is needed
    Person.model_validate(json.loads(tokenizer.decode([token for token in made if token != eos])))


def test_a_draft_row_gets_a_mask_per_position(tokenizer, vocabulary):
    matcher = GrammarMatcher(constraint_from({"type": "regex", "pattern": "ab[0-9]c"}), vocabulary)
    draft = tuple(tokenizer.encode("ab", add_special_tokens=False))
    masks = StepMasks([MaskedRow(matcher, 1, draft)], 4, VOCAB).start()
    allowed = masks.allowed([1, 2, 3])
    texts = [{tokenizer.decode([int(i)]) for i in np.flatnonzero(row)} for row in allowed]
    assert texts == [{"a"}, {"b"}, set("0123456789")]
    assert allowed_text(matcher, tokenizer) == {"a"}  # the matcher itself did not move


def test_a_schema_the_grammar_engine_panics_on_is_a_grammar_error():
    # Found by the fuzz tier: llguidance cuts an invalid value to 100 bytes for its message and
    # panics when the cut falls inside a character (a PanicException, not an Exception).
    schema = {"maximum": {"": "ú" * 60}}
    with pytest.raises(GrammarError, match="response_format: invalid json"):
        constraint_from({"type": "json_object", "schema": schema})

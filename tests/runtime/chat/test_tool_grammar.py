"""The grammar of a required tool call, on a byte-level vocabulary (one token per byte, so a refusal
lands on the exact character): every format's own call text is accepted and reads back as the same
calls; a wrong name, arguments outside the tool's schema, text around the call, a second call when
parallel calls are off, are each refused at the token where they go wrong. Call markers that are
special tokens of the vocabulary are matched as those tokens."""

from __future__ import annotations

import json

import numpy as np
import pytest
from conftest import tiny_tokenizer

from clika_runtime.chat.tools.choice import REQUIRED, ToolChoice, chosen_tools, tool_choice_from
from clika_runtime.chat.tools.formats import get_format
from clika_runtime.chat.tools.grammar import arguments_schema, tool_call_grammar
from clika_runtime.chat.tools.stream import parse_tool_calls
from clika_runtime.grammar import GrammarError
from clika_runtime.grammar.constraint import Constraint, compile_constraint
from clika_runtime.grammar.masks import StepMasks
from clika_runtime.grammar.matcher import GrammarMatcher
from clika_runtime.grammar.vocabulary import grammar_vocabulary
from clika_runtime.text.tokenizer import Tokenizer

VOCAB = 280
MARKERS = ["<tool_call>", "</tool_call>", "[TOOL_CALLS]", "</think>"]
WEATHER = {
    "type": "function",
    "function": {
        "name": "get_weather",
        "strict": True,
        "parameters": {
            "type": "object",
            "properties": {"city": {"type": "string"}, "unit": {"enum": ["C", "F"]}},
            "required": ["city"],
        },
    },
}
ADD = {
    "type": "function",
    "function": {
        "name": "add",
        "parameters": {
            "type": "object",
            "properties": {"a": {"type": "integer"}, "b": {"type": "integer"}},
            "required": ["a", "b"],
        },
    },
}
TOOLS = [WEATHER, ADD]
CALLS = [
    {"function": {"name": "get_weather", "arguments": {"city": "Paris", "unit": "C"}}},
    {"function": {"name": "add", "arguments": {"a": 1, "b": 2}}},
]
FORMATS = ["hermes", "generic", "llama3_json", "mistral", "pythonic", "qwen_xml"]


def _tokenizer(markers_are_tokens: bool) -> Tokenizer:
    inner = tiny_tokenizer()
    if markers_are_tokens:
        inner.add_special_tokens(MARKERS)
    return Tokenizer(inner, eos_token_ids=[inner.token_to_id("</s>")])


@pytest.fixture(scope="module", params=[True, False], ids=["markers-as-tokens", "markers-as-text"])
def vocab(request):
    tokenizer = _tokenizer(request.param)
    return tokenizer, grammar_vocabulary(tokenizer, VOCAB)


def tool_call_constraint(fmt: str, tools, vocabulary, **options) -> Constraint:
    """The grammar compiled as a turn compiles it (``required_call_constraint``'s last step)."""
    return compile_constraint(
        "lark", tool_call_grammar(fmt, tools, vocabulary, **options), "tool call", "tools"
    )


def matcher(vocabulary, fmt: str, tools=TOOLS, **options) -> GrammarMatcher:
    return GrammarMatcher(tool_call_constraint(fmt, tools, vocabulary, **options), vocabulary)


def refused_at(tokenizer: Tokenizer, held: GrammarMatcher, text: str) -> str | None:
    """The text up to and including the first refused token (None: all accepted)."""
    ids = tokenizer.encode(text, add_special_tokens=False)
    for index, token in enumerate(ids):
        if not held.accept(token):
            return tokenizer.decode(ids[: index + 1], skip_special_tokens=False)
    return None


def call_text(fmt: str, calls=CALLS) -> str:
    if fmt == "pythonic":  # the grammar writes JSON literals, which read back the same
        return "[" + ", ".join(_pythonic(call["function"]) for call in calls) + "]"
    return get_format(fmt).format_calls(calls)


def _pythonic(function: dict) -> str:
    arguments = ", ".join(f"{key}={json.dumps(value)}" for key, value in function["arguments"].items())
    return f"{function['name']}({arguments})"


@pytest.mark.parametrize("fmt", FORMATS)
def test_the_formats_own_calls_are_accepted_and_read_back(vocab, fmt):
    tokenizer, vocabulary = vocab
    for calls in (CALLS, CALLS[:1], CALLS[1:]):
        held = matcher(vocabulary, fmt)
        text = call_text(fmt, calls)
        assert refused_at(tokenizer, held, text) is None, held.error
        assert held.is_accepting()
        read = parse_tool_calls(text, get_format(fmt), TOOLS).calls
        assert [(c.name, c.arguments) for c in read] == [
            (c["function"]["name"], c["function"]["arguments"]) for c in calls
        ]


@pytest.mark.parametrize("fmt", FORMATS)
def test_a_name_not_offered_is_refused_where_it_goes_wrong(vocab, fmt):
    tokenizer, vocabulary = vocab
    text = call_text(fmt, [{"function": {"name": "get_time", "arguments": {}}}])
    where = refused_at(tokenizer, matcher(vocabulary, fmt), text)
    assert where is not None and where.endswith("get_t"), where


@pytest.mark.parametrize(
    ("arguments", "refused_after"),
    [
        ('{"unit": "C"}', '{"u'),  # the required city first
        ('{"city": 7}', '{"city": 7'),  # a string
        ('{"city": "Paris", "country": "FR"}', '{"city": "Paris", "c'),  # strict: no other key
        ('{"city": "Paris", "unit": "K"}', '"unit": "K'),  # not in the enum
    ],
)
def test_arguments_outside_the_schema_are_refused_token_by_token(vocab, arguments, refused_after):
    tokenizer, vocabulary = vocab
    text = '<tool_call>\n{"name": "get_weather", "arguments": ' + arguments + "}\n</tool_call>"
    where = refused_at(tokenizer, matcher(vocabulary, "hermes"), text)
    assert where is not None and where.endswith(refused_after), where


def test_a_tool_that_is_not_strict_takes_other_keys(vocab):
    tokenizer, vocabulary = vocab
    text = '<tool_call>\n{"name": "add", "arguments": {"a": 1, "b": 2, "c": 3}}\n</tool_call>'
    assert refused_at(tokenizer, matcher(vocabulary, "hermes"), text) is None
    assert arguments_schema(ADD).get("additionalProperties") is None
    assert arguments_schema(WEATHER)["additionalProperties"] is False


def test_text_before_the_call_is_refused(vocab):
    tokenizer, vocabulary = vocab
    where = refused_at(tokenizer, matcher(vocabulary, "hermes"), "Sure! <tool_call>")
    assert where == "S"


def test_one_call_only_when_parallel_calls_are_off(vocab):
    tokenizer, vocabulary = vocab
    held = matcher(vocabulary, "hermes", parallel=False)
    one, two = call_text("hermes", CALLS[:1]), call_text("hermes", CALLS[1:])
    assert refused_at(tokenizer, held, one) is None
    assert held.finished  # nothing may follow: the reply ends there
    assert refused_at(tokenizer, held, "\n" + two) is not None
    parallel = matcher(vocabulary, "hermes")
    assert refused_at(tokenizer, parallel, one + "\n" + two) is None


def test_mistral_one_call_only_when_parallel_calls_are_off(vocab):
    tokenizer, vocabulary = vocab
    text = call_text("mistral")
    where = refused_at(tokenizer, matcher(vocabulary, "mistral", parallel=False), text)
    assert where is not None and where.endswith("}},"), where


def test_a_special_marker_is_its_token_and_only_it(vocab):
    tokenizer, vocabulary = vocab
    held = matcher(vocabulary, "hermes")
    allowed = np.flatnonzero(StepMasks.of([held], VOCAB).start().allowed()[0])
    marker = tokenizer.inner.token_to_id("<tool_call>")
    if marker is not None:  # the vocabulary has it: the grammar names that one token
        assert list(allowed) == [marker]
        assert f"<[{marker}]>" in tool_call_grammar("hermes", TOOLS, vocabulary)
    else:  # spelled out: its first character only
        assert [tokenizer.decode([int(t)]) for t in allowed] == ["<"]


def test_reasoning_comes_first_when_the_prompt_opened_it(vocab):
    tokenizer, vocabulary = vocab
    held = matcher(vocabulary, "hermes", reasoning="open")
    text = "I should look up <b>Paris</b>.</think>\n\n" + call_text("hermes", CALLS[:1])
    assert refused_at(tokenizer, held, text) is None and held.is_accepting()
    optional = matcher(vocabulary, "hermes", reasoning="optional")
    assert refused_at(tokenizer, optional, call_text("hermes", CALLS[:1])) is None


def test_bad_tool_schemas_are_named():
    vocabulary = grammar_vocabulary(_tokenizer(False), VOCAB)
    bad = {"type": "function", "function": {"name": "f", "parameters": {"type": "string"}}}
    with pytest.raises(GrammarError, match="'f': 'parameters' must describe an object"):
        tool_call_constraint("hermes", [bad], vocabulary)
    broken = {
        "type": "function",
        "function": {"name": "g", "parameters": {"type": "object", "properties": 3}},
    }
    with pytest.raises(GrammarError, match="tools: invalid lark"):
        tool_call_constraint("hermes", [broken], vocabulary)
    with pytest.raises(GrammarError, match="cannot be constrained"):
        tool_call_constraint("unknown", TOOLS, vocabulary)


@pytest.mark.parametrize(
    ("value", "expected"),
    [
        (None, ToolChoice()),
        ("auto", ToolChoice()),
        ("required", ToolChoice(REQUIRED)),
        ("add", ToolChoice(REQUIRED, "add")),
        ({"type": "function", "function": {"name": "add"}}, ToolChoice(REQUIRED, "add")),
        ({"type": "function", "name": "add"}, ToolChoice(REQUIRED, "add")),
    ],
)
def test_tool_choice_values(value, expected):
    assert tool_choice_from(value, TOOLS) == expected


@pytest.mark.parametrize(
    ("value", "tools", "problem"),
    [
        ("required", None, "needs 'tools'"),
        ("get_time", TOOLS, "'get_time', which is not among the tools offered"),
        ({"type": "function"}, TOOLS, "names no function"),
        (3, TOOLS, "tool_choice must be"),
    ],
)
def test_bad_tool_choices_are_named(value, tools, problem):
    with pytest.raises(ValueError, match=problem):
        tool_choice_from(value, tools)


def test_the_chosen_tools():
    assert chosen_tools(TOOLS, ToolChoice("none")) is None
    assert chosen_tools(TOOLS, ToolChoice(REQUIRED, "add")) == [ADD]
    assert chosen_tools(TOOLS, ToolChoice(REQUIRED)) == TOOLS


def test_an_xml_text_value_keeps_its_length_and_cannot_close_the_call(vocab):
    tokenizer, vocabulary = vocab
    short = {
        "type": "function",
        "function": {
            "name": "f",
            "parameters": {"type": "object", "properties": {"s": {"type": "string", "maxLength": 5}}},
        },
    }
    opened = "<tool_call>\n<function=f>\n<parameter=s>\n"
    assert (
        refused_at(tokenizer, matcher(vocabulary, "qwen_xml", [short]), opened + "abcdef")
        == opened + "abcdef"
    )
    city = "<tool_call>\n<function=get_weather>\n<parameter=city>\nP</function>"
    assert refused_at(tokenizer, matcher(vocabulary, "qwen_xml"), city) == city


def test_a_strict_numbers_fraction_ends(vocab):
    tokenizer, vocabulary = vocab
    price = {
        "type": "function",
        "function": {
            "name": "pay",
            "strict": True,
            "parameters": {
                "type": "object",
                "properties": {"amount": {"type": "number"}},
                "required": ["amount"],
            },
        },
    }
    opened = '<tool_call>\n{"name": "pay", "arguments": {"amount": 100.'
    assert refused_at(tokenizer, matcher(vocabulary, "hermes", [price]), opened + "0" * 10 + "}}") is None
    assert (
        refused_at(tokenizer, matcher(vocabulary, "hermes", [price]), opened + "0" * 11) == opened + "0" * 11
    )

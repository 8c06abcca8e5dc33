"""Tool-call formats: whole replies and the same replies streamed in random pieces agree.

Every case states the visible text and the calls a reply holds; the reply is
then fed to the streaming parser in random-sized pieces under several seeds,
which must give the same visible text and the same calls, and must never show
a piece of call markup that it later takes back.
"""

from __future__ import annotations

import random

import pytest

from clika_runtime.chat.reply.parser import ReplyParser
from clika_runtime.chat.tools.definitions import ToolCall, normalize_tools
from clika_runtime.chat.tools.formats import FORMATS, detect_format, get_format
from clika_runtime.chat.tools.stream import ToolCallStream, parse_tool_calls

TOOLS = [
    {
        "type": "function",
        "function": {
            "name": "get_weather",
            "parameters": {
                "type": "object",
                "properties": {
                    "city": {"type": "string"},
                    "days": {"type": "integer"},
                    "metric": {"type": "boolean"},
                    "hours": {"type": "array"},
                },
            },
        },
    },
    {"name": "now", "parameters": {"type": "object", "properties": {}}},
]
PARIS = ("get_weather", {"city": "Paris"})

# (format, reply, visible text, [(name, arguments)], malformed blocks)
CASES = [
    # hermes
    ("hermes", "Just text, no calls.", "Just text, no calls.", [], 0),
    (
        "hermes",
        '<tool_call>\n{"name": "get_weather", "arguments": {"city": "Paris"}}\n</tool_call>',
        "",
        [PARIS],
        0,
    ),
    (
        "hermes",
        'Checking.\n\n<tool_call>\n{"name": "get_weather", "arguments": {"city": "Paris"}}\n</tool_call>\n'
        '<tool_call>\n{"name": "now", "arguments": {}}\n</tool_call>',
        "Checking.",
        [PARIS, ("now", {})],
        0,
    ),
    (
        "hermes",
        '<tool_call>{"name": "get_weather", "arguments": {"city": "</tool_call> <tool_call>"}}</tool_call> done',
        "done",
        [("get_weather", {"city": "</tool_call> <tool_call>"})],
        0,
    ),
    (
        "hermes",
        '<tool_call>{"name": "get_weather", "arguments": "{\\"city\\": \\"Paris\\"}"}</tool_call>',
        "",
        [PARIS],
        0,
    ),
    ("hermes", '<tool_call>{"name": "get_weather", "arguments": {"city": "Paris"}}', "", [PARIS], 0),
    (
        "hermes",
        'Oops <tool_call>{"name": "get_weather", "arguments": {city: Paris}}</tool_call> then '
        '<tool_call>{"name": "now", "arguments": {}}</tool_call>',
        'Oops <tool_call>{"name": "get_weather", "arguments": {city: Paris}}</tool_call> then',
        [("now", {})],
        1,
    ),
    ("hermes", "a < b and <tool_ stays text", "a < b and <tool_ stays text", [], 0),
    (
        "hermes",
        'Sure:\n```json\n{"name": "get_weather", "arguments": {"city": "Paris"}}\n```',
        "Sure:",
        [PARIS],
        0,
    ),
    ("hermes", 'Here:\n```json\n{"city": "Paris"}\n```', 'Here:\n```json\n{"city": "Paris"}\n```', [], 0),
    (
        "hermes",
        '```json\n{"name": "delete_everything", "arguments": {}}\n```',
        '```json\n{"name": "delete_everything", "arguments": {}}\n```',
        [],
        0,
    ),
    ("hermes", "```python\nprint('[x]')\n```", "```python\nprint('[x]')\n```", [], 0),
    ("hermes", '{"name": "get_weather", "arguments": {"city": "Paris"}}', "", [PARIS], 0),
    (
        "hermes",
        '{"name": "unknown_tool", "arguments": {}}',
        '{"name": "unknown_tool", "arguments": {}}',
        [],
        0,
    ),
    (  # a long call (the parser re-scans it only where it may end)
        "hermes",
        '<tool_call>{"name": "get_weather", "arguments": {"city": "' + "x" * 700 + '"}}</tool_call>',
        "",
        [("get_weather", {"city": "x" * 700})],
        0,
    ),
    (  # an unterminated bare call followed by text: the text is released once the call reads as ended
        "generic",
        '{"name": "now", "arguments": {}} and then ' + "words " * 60,
        "and then " + "words " * 60,
        [("now", {})],
        0,
    ),
    # mistral
    (
        "mistral",
        '[TOOL_CALLS][{"name": "get_weather", "arguments": {"city": "Paris"}, "id": "abcDEF123"}, '
        '{"name": "now", "arguments": {}}]',
        "",
        [PARIS, ("now", {})],
        0,
    ),
    (
        "mistral",
        'Let me look.[TOOL_CALLS]get_weather[ARGS]{"city": "Paris"}[TOOL_CALLS]now[CALL_ID]a1b2c3d4e[ARGS]{}',
        "Let me look.",
        [PARIS, ("now", {})],
        0,
    ),
    ("mistral", "[TOOL_CALLS] this is not a call", "[TOOL_CALLS] this is not a call", [], 0),
    (
        "mistral",
        '[TOOL_CALLS][{"name": "get_weather", "arguments": [1}]',
        '[TOOL_CALLS][{"name": "get_weather", "arguments": [1}]',
        [],
        1,
    ),
    ("mistral", "[INST] is a word here", "[INST] is a word here", [], 0),
    # llama3_json
    ("llama3_json", '{"name": "get_weather", "parameters": {"city": "Paris"}}', "", [PARIS], 0),
    (
        "llama3_json",
        '  {"name": "get_weather", "parameters": {"city": "Paris"}}; {"name": "now", "parameters": {}}',
        "",
        [PARIS, ("now", {})],
        0,
    ),
    ("llama3_json", '<|python_tag|>{"name": "get_weather", "parameters": {"city": "Paris"}}', "", [PARIS], 0),
    (
        "llama3_json",
        '{"type": "function", "name": "get_weather", "parameters": {"city": "Paris"}}',
        "",
        [PARIS],
        0,
    ),
    ("llama3_json", '{"answer": 42, "name": 7}', '{"answer": 42, "name": 7}', [], 0),
    ("llama3_json", 'The JSON is {"name": "get_weather"}', 'The JSON is {"name": "get_weather"}', [], 0),
    ("llama3_json", "{ not json at all", "{ not json at all", [], 0),
    # pythonic
    ("pythonic", '[get_weather(city="Paris")]', "", [PARIS], 0),
    (
        "pythonic",
        "[get_weather(city='Pa]ri\\'s', days=3, metric=true, hours=[1, 2]), now()]",
        "",
        [("get_weather", {"city": "Pa]ri's", "days": 3, "metric": True, "hours": [1, 2]}), ("now", {})],
        0,
    ),
    ("pythonic", "[1] cites a paper", "[1] cites a paper", [], 0),
    ("pythonic", "[see below] for details", "[see below] for details", [], 0),
    ("pythonic", '[get_weather("Paris")]', '[get_weather("Paris")]', [], 0),
    ("pythonic", "[os.system(cmd='rm -rf /')]", "[os.system(cmd='rm -rf /')]", [], 0),
    ("pythonic", 'Answer: [get_weather(city="Paris")]', 'Answer: [get_weather(city="Paris")]', [], 0),
    # qwen_xml
    (
        "qwen_xml",
        "I'll check.\n<tool_call>\n<function=get_weather>\n<parameter=city>\nParis\n</parameter>\n"
        "<parameter=days>\n3\n</parameter>\n<parameter=metric>\ntrue\n</parameter>\n</function>\n</tool_call>",
        "I'll check.",
        [("get_weather", {"city": "Paris", "days": 3, "metric": True})],
        0,
    ),
    (
        "qwen_xml",
        "<function=get_weather>\n<parameter=city>\nNew\nYork\n</parameter>\n</function>",
        "",
        [("get_weather", {"city": "New\nYork"})],
        0,
    ),
    (
        "qwen_xml",
        '<tool_call>\n{"name": "get_weather", "arguments": {"city": "Paris"}}\n</tool_call>',
        "",
        [PARIS],
        0,
    ),
    ("qwen_xml", "<tool_call>\nnonsense\n</tool_call>", "<tool_call>\nnonsense\n</tool_call>", [], 1),
    # generic
    ("generic", '{"name": "get_weather", "arguments": {"city": "Paris"}}', "", [PARIS], 0),
    ("generic", '<tool_call>{"name": "now", "arguments": {}}</tool_call>', "", [("now", {})], 0),
    ("generic", '```json\n[{"name": "now", "arguments": {}}]\n```\n', "", [("now", {})], 0),
    ("generic", "Plain answer with {braces} inside.", "Plain answer with {braces} inside.", [], 0),
]

SEEDS = range(8)


def _calls(items) -> list[tuple[str, dict]]:
    return [(call.name, call.arguments) for call in items if isinstance(call, ToolCall)]


def _stream(fmt: str, reply: str, seed: int) -> tuple[str, list[ToolCall], list[str]]:
    rng = random.Random(seed)
    stream = ToolCallStream(get_format(fmt), TOOLS)
    out: list = []
    pos = 0
    while pos < len(reply):
        size = rng.randint(1, 7)
        out += stream.feed(reply[pos : pos + size])
        pos += size
    out += stream.finish()
    visible = "".join(piece for piece in out if isinstance(piece, str))
    return visible, [piece for piece in out if isinstance(piece, ToolCall)], stream.malformed


@pytest.mark.parametrize(("fmt", "reply", "visible", "calls", "malformed"), CASES)
def test_whole_reply(fmt, reply, visible, calls, malformed):
    parsed = parse_tool_calls(reply, get_format(fmt), TOOLS)
    assert parsed.text == visible
    assert _calls(parsed.calls) == calls
    assert len(parsed.malformed) == malformed
    for call in parsed.calls:
        assert call.id and call.raw and call.raw in reply


@pytest.mark.parametrize("seed", SEEDS)
@pytest.mark.parametrize(("fmt", "reply", "visible", "calls", "malformed"), CASES)
def test_streamed_reply_matches_the_whole(fmt, reply, visible, calls, malformed, seed):
    streamed_visible, streamed_calls, streamed_malformed = _stream(fmt, reply, seed)
    assert streamed_visible == visible
    assert _calls(streamed_calls) == calls
    assert [call.raw for call in streamed_calls] == [
        call.raw for call in parse_tool_calls(reply, get_format(fmt), TOOLS).calls
    ]
    assert len(streamed_malformed) == malformed


@pytest.mark.parametrize("fmt", sorted(FORMATS))
def test_markup_never_leaks_into_visible_pieces(fmt):
    # One character at a time: every visible piece must belong to the text around the calls.
    history_calls = [{"function": {"name": "get_weather", "arguments": {"city": "Paris"}}}]
    reply = get_format(fmt).format_calls(history_calls)
    stream = ToolCallStream(get_format(fmt), TOOLS)
    pieces = []
    for char in reply:
        pieces += stream.feed(char)
    pieces += stream.finish()
    assert [piece for piece in pieces if isinstance(piece, str)] == []
    assert _calls(pieces) == [PARIS]


@pytest.mark.parametrize("fmt", sorted(FORMATS))
def test_a_format_reads_the_calls_it_writes(fmt):
    history = [
        {
            "id": "abcdefghi",
            "type": "function",
            "function": {"name": "get_weather", "arguments": '{"city": "Paris", "days": 2}'},
        },
        {"function": {"name": "now", "arguments": {}}},
    ]
    written = get_format(fmt).format_calls(history)
    parsed = parse_tool_calls(written, get_format(fmt), TOOLS)
    assert _calls(parsed.calls) == [("get_weather", {"city": "Paris", "days": 2}), ("now", {})]
    assert parsed.text == ""


def test_mistral_call_ids_are_nine_alphanumerics():
    parsed = parse_tool_calls('[TOOL_CALLS][{"name": "now", "arguments": {}}]', get_format("mistral"), TOOLS)
    (call,) = parsed.calls
    assert len(call.id) == 9 and call.id.isalnum()


def test_tool_call_message_shape():
    call = ToolCall(id="call_1", name="get_weather", arguments={"city": "Paris"}, raw="...")
    assert call.to_message() == {
        "id": "call_1",
        "type": "function",
        "function": {"name": "get_weather", "arguments": '{"city": "Paris"}'},
    }


@pytest.mark.parametrize(
    ("source", "fmt"),
    [
        ("{{ '[TOOL_CALLS]' }}{% if tools %}{% endif %}", "mistral"),
        ("<tool_call>\n<function=example_function_name>", "qwen_xml"),
        ("For each function call ... <tool_call></tool_call> XML tags", "hermes"),
        ("format of [func_name1(params_name1=params_value1)]", "pythonic"),
        ("{{- '<|python_tag|>' }}", "llama3_json"),
        ("{% for m in messages %}{{ m.content }}{% endfor %}", "generic"),
    ],
)
def test_detect_format_from_template_source(source, fmt):
    assert detect_format(source).name == fmt


def test_normalize_tools_accepts_both_shapes_and_names_problems():
    bare = {"name": "now", "description": "d", "parameters": {"type": "object", "properties": {}}}
    assert normalize_tools([bare]) == [{"type": "function", "function": bare}]
    assert normalize_tools([{"type": "function", "function": bare}]) == [
        {"type": "function", "function": bare}
    ]
    assert normalize_tools(None) is None and normalize_tools([]) is None
    with pytest.raises(ValueError, match="tool type 'retrieval' is not supported"):
        normalize_tools([{"type": "retrieval", "function": bare}])
    with pytest.raises(ValueError, match="non-empty string 'name'"):
        normalize_tools([{"function": {"name": ""}}])
    with pytest.raises(ValueError, match="'parameters' must be a JSON schema object"):
        normalize_tools([{"name": "x", "parameters": "none"}])
    with pytest.raises(ValueError, match="needs a 'function' object"):
        normalize_tools([{"description": "nameless"}])
    with pytest.raises(ValueError, match="must be a list"):
        normalize_tools(bare)


def test_a_finished_stream_refuses_more_text():
    stream = ToolCallStream(get_format("hermes"), TOOLS)
    stream.feed("hi")
    stream.finish()
    with pytest.raises(ValueError, match="finished"):
        stream.feed("more")


# -- a whole reply's channels: reasoning, visible text, calls (scripted streams) -------------

REPLY_CASES = [
    # (reply, prompt left <think> open, reasoning, visible, calls)
    (
        '<think>\nMaybe <tool_call>{"name": "now", "arguments": {}}</tool_call>?\n</think>\n\nChecking.\n'
        '<tool_call>\n{"name": "get_weather", "arguments": {"city": "Paris"}}\n</tool_call>',
        False,
        'Maybe <tool_call>{"name": "now", "arguments": {}}</tool_call>?',
        "Checking.",
        [PARIS],
    ),
    (
        'The user wants weather.\n</think>\n\n<tool_call>{"name": "get_weather", "arguments": {"city": "Paris"}}'
        "</tool_call>",
        True,
        "The user wants weather.",
        "",
        [PARIS],
    ),
    ("<think>short</think>Plain answer.", False, "short", "Plain answer.", []),
]


@pytest.mark.parametrize("seed", range(4))
@pytest.mark.parametrize(("reply", "opened", "reasoning", "visible", "calls"), REPLY_CASES)
def test_reply_parser_routes_reasoning_text_and_calls(reply, opened, reasoning, visible, calls, seed):
    parser = ReplyParser(reasoning=True, start_in_reasoning=opened, fmt=get_format("hermes"), tools=TOOLS)
    rng = random.Random(seed)
    out: list = []
    pos = 0
    while pos < len(reply):
        size = rng.randint(1, 6)
        out += parser.feed(reply[pos : pos + size])
        pos += size
    out += parser.finish()
    assert "".join(piece for piece in out if isinstance(piece, str)) == visible == parser.text
    assert _calls(out) == calls == _calls(parser.tool_calls)
    assert parser.reasoning == reasoning


def test_reply_parser_without_tools_or_reasoning_passes_text_through():
    parser = ReplyParser()
    text = '<think>x</think><tool_call>{"name": "now", "arguments": {}}</tool_call>'
    assert parser.feed(text) + parser.finish() == [text]
    assert parser.tool_calls == [] and parser.reasoning == ""

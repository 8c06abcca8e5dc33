"""Reply text the model writes, fuzzed: the six tool-call parsers and the reasoning splitter, fed
token by token.

A model writes anything: markup fragments, half calls, broken JSON, markers
split across tokens. Property: the streamed result equals the whole reply
parsed at once (no state lost between pieces), visible text is only ever
text the model wrote, and nothing raises.
"""

from __future__ import annotations

from fuzz_budget import budget, count
from hypothesis import example, given
from hypothesis import strategies as st

from clika_runtime.chat.reply.reasoning import CONTENT, REASONING, ReasoningStream, split_reasoning
from clika_runtime.chat.tools.formats import FORMATS, get_format
from clika_runtime.chat.tools.stream import ToolCallStream, parse_tool_calls

TOOLS = [
    {
        "type": "function",
        "function": {
            "name": "get_weather",
            "parameters": {"type": "object", "properties": {"city": {"type": "string"}}},
        },
    }
]
# The pieces replies are made of: every format's markup, JSON and Python call fragments.
MARKUP = [
    "<tool_call>", "</tool_call>", "<function=", "</function>", "<parameter=", "</parameter>",
    "[TOOL_CALLS]", "<|python_tag|>", "<|eom_id|>", "```json", "```", "[", "]", "{", "}", "(", ")",
    '"name"', '"arguments"', '"parameters"', ":", ",", '"get_weather"', "get_weather", '"city"',
    "city=", '"Paris"', "'Paris'", "\n", " ", "<think>", "</think>", "\\", '"', "null", "1e999",
]  # fmt: skip
TOKEN = st.one_of(st.sampled_from(MARKUP), st.text(max_size=6))
REPLY_TOKENS = st.lists(TOKEN, max_size=60)


def _written_calls(fmt: str) -> st.SearchStrategy[str]:
    """Well-formed calls of the format, so the fuzzing also walks the valid paths."""
    call = st.fixed_dictionaries(
        {"function": st.fixed_dictionaries({"name": st.just("get_weather"), "arguments": st.dictionaries(
            st.sampled_from(["city", "days"]), st.one_of(st.text(max_size=8), st.integers()), max_size=2
        )})}
    )  # fmt: skip
    return st.lists(call, min_size=1, max_size=2).map(get_format(fmt).format_calls)


@given(
    fmt=st.sampled_from(sorted(FORMATS)),
    tokens=REPLY_TOKENS,
    calls=st.none() | st.sampled_from(sorted(FORMATS)).flatmap(_written_calls),
    offered=st.booleans(),
)
@example(  # a marker with no call after it ends its block where the text goes on (found by this test)
    fmt="llama3_json",
    tokens=["<|python_tag|>", "<tool_call>", "<|python_tag|>", "<tool_call>", "<tool_call>", "<tool_call>"],
    calls='{"name": "get_weather", "parameters": {}}',
    offered=False,
)
@budget(900)
def test_tool_call_parsers_fed_token_by_token_agree_with_the_whole_reply(fmt, tokens, calls, offered):
    count("tool-call parsers (6 formats, token by token)")
    if calls is not None:
        tokens = [*tokens[: len(tokens) // 2], *_split(calls), *tokens[len(tokens) // 2 :]]
    reply = "".join(tokens)
    tools = TOOLS if offered else None
    stream = ToolCallStream(get_format(fmt), tools)
    pieces = []
    for token in tokens:
        pieces += stream.feed(token)
    pieces += stream.finish()
    whole = parse_tool_calls(reply, get_format(fmt), tools)
    visible = "".join(piece for piece in pieces if isinstance(piece, str))
    streamed_calls = [piece for piece in pieces if not isinstance(piece, str)]
    assert visible == whole.text
    assert [(c.name, c.arguments) for c in streamed_calls] == [(c.name, c.arguments) for c in whole.calls]
    assert len(visible) <= len(reply)


@given(tokens=REPLY_TOKENS, start_in_reasoning=st.booleans())
@budget(900)
def test_the_reasoning_splitter_fed_token_by_token_agrees_with_the_whole_reply(tokens, start_in_reasoning):
    count("reasoning splitter (token by token)")
    stream = ReasoningStream(start_in_reasoning)
    pieces = []
    for token in tokens:
        pieces += stream.feed(token)
    pieces += stream.finish()
    assert {channel for channel, _ in pieces} <= {REASONING, CONTENT}
    reasoning = "".join(text for channel, text in pieces if channel == REASONING)
    content = "".join(text for channel, text in pieces if channel == CONTENT)
    assert (reasoning, content) == split_reasoning("".join(tokens), start_in_reasoning)
    assert len(reasoning) + len(content) <= len("".join(tokens))


def _split(text: str) -> list[str]:
    """``text`` in pieces of three characters (how a tokenizer might cut it)."""
    return [text[i : i + 3] for i in range(0, len(text), 3)]

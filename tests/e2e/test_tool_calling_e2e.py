"""Tool calling end to end on Qwen2.5-Coder-0.5B-Instruct (slow).

The GGUF is exported at int4 (cached in ``$CLIKA_CACHE``). A ChatSession
offered ``get_weather(city, unit)`` must call it with the right arguments,
keep the call and the tool's answer in the OpenAI message shape, and answer
from the tool's result, both whole and streamed.

The 0.5B model, handed a tool result right after its call, repeats the call
instead of answering (transformers does the same on the same prompt: see
``test_a_repeated_call_after_the_result_is_the_models_own``). Shown one worked
exchange in the system text, it calls the tool and then answers from the
result; the example's numbers differ from the real result's, so an answer
quoting the real ones read them from the tool turn.
"""

from __future__ import annotations

import functools
import json

import pytest
from support import gguf_references
from support.reference_answers import ReferenceAnswers
from weather_exchange import QUESTION, SYSTEM

from clika_runtime import modelverse
from clika_runtime.chat.session import ChatSession
from clika_runtime.chat.tools.definitions import ToolCall

pytestmark = pytest.mark.slow

WEATHER = {
    "type": "function",
    "function": {
        "name": "get_weather",
        "description": "Get the current weather in a city",
        "parameters": {
            "type": "object",
            "properties": {
                "city": {"type": "string", "description": "The city name"},
                "unit": {
                    "type": "string",
                    "enum": ["celsius", "fahrenheit"],
                    "description": "Temperature unit",
                },
            },
            "required": ["city", "unit"],
        },
    },
}
ARGUMENTS = {"city": "Paris", "unit": "celsius"}
RESULT = json.dumps({"temperature": 18, "unit": "celsius", "condition": "light rain"})
GREEDY = {"temperature": 0.0}


@pytest.fixture(scope="module")
def qwen(qwen05_gguf):
    from clika_export.api import cached_export

    model = modelverse.load(cached_export(qwen05_gguf, precision="int4", progress=False))
    yield model
    model.close()


@pytest.fixture
def chat(qwen):
    with ChatSession(qwen, system=SYSTEM, tools=[WEATHER], default_budget=64) as session:
        yield session


def _assert_call_turn(chat: ChatSession, calls: list[ToolCall]) -> ToolCall:
    assert [(call.name, call.arguments) for call in calls] == [("get_weather", ARGUMENTS)]
    assert chat.report.finish == "tool_calls" and chat.tool_calls == calls
    call = calls[0]
    assert call.id.startswith("call_") and '"get_weather"' in call.raw  # the model's own text of the call
    # The history's assistant turn: empty content, the call in the OpenAI shape (arguments a JSON string).
    assert chat.messages[-1] == {"role": "assistant", "content": "", "tool_calls": [call.to_message()]}
    function = call.to_message()["function"]
    assert function["name"] == "get_weather" and json.loads(function["arguments"]) == ARGUMENTS
    return call


def _add_result(chat: ChatSession, call: ToolCall) -> None:
    chat.add_tool_result(call.id, RESULT, name="get_weather")
    assert chat.messages[-1] == {
        "role": "tool",
        "tool_call_id": call.id,
        "content": RESULT,
        "name": "get_weather",
    }


def _assert_answer(qwen, chat: ChatSession, answer: str) -> None:
    assert "18" in answer and "25" not in answer, answer  # the tool's temperature, not the example's
    assert "<tool_call>" not in answer and "get_weather" not in answer, answer
    assert chat.report.finish == "stop" and chat.tool_calls == []
    history = chat.messages
    assert [turn["role"] for turn in history] == ["system", "user", "assistant", "tool", "assistant"]
    assert history[-1] == {"role": "assistant", "content": answer}
    # The model read the whole conversation: the call and the result rendered as the template renders them.
    prompt = qwen.render(history[:-1], tools=[WEATHER])
    assert (
        '<tool_call>\n{"name": "get_weather", "arguments": {"city": "Paris", "unit": "celsius"}}\n</tool_call>'
        in prompt
    )
    assert f"<|im_start|>user\n<tool_response>\n{RESULT}\n</tool_response><|im_end|>" in prompt
    assert chat.report.prompt_tokens == len(qwen.tokenizer.encode(prompt))


def test_calls_the_tool_then_answers_from_its_result(qwen, chat):
    assert (qwen.supports_tools, qwen.tool_call_format) == (True, "hermes")
    reply = chat.send(QUESTION, **GREEDY)
    assert reply == ""  # the whole reply was the call: no markup leaks into the visible text
    call = _assert_call_turn(chat, chat.tool_calls)
    _add_result(chat, call)
    answer = chat.respond(**GREEDY)
    _assert_answer(qwen, chat, answer)


def test_the_same_streamed(qwen, chat):
    pieces = list(chat.send(QUESTION, stream=True, **GREEDY))
    calls = [piece for piece in pieces if isinstance(piece, ToolCall)]
    assert pieces[len(pieces) - len(calls) :] == calls  # text pieces first, then the calls
    assert "".join(piece for piece in pieces if isinstance(piece, str)) == ""
    call = _assert_call_turn(chat, calls)
    _add_result(chat, call)
    answer_pieces = list(chat.respond(stream=True, **GREEDY))
    assert answer_pieces and all(isinstance(piece, str) for piece in answer_pieces)
    _assert_answer(qwen, chat, "".join(answer_pieces))


def test_sampled_with_qwens_own_settings(chat):
    # Qwen's published sampling settings (the GGUF carries none): the turn still calls, then answers.
    sampling = {"temperature": 0.7, "top_p": 0.8, "top_k": 20, "repetition_penalty": 1.1, "seed": 1}
    chat.send(QUESTION, **sampling)
    call = _assert_call_turn(chat, chat.tool_calls)
    _add_result(chat, call)
    answer = chat.respond(**sampling)
    assert "18" in answer and chat.report.finish == "stop" and chat.tool_calls == [], answer


# -- against transformers reading the same GGUF ---------------------------------------------------

CALL = {
    "id": "call_1",
    "type": "function",
    "function": {"name": "get_weather", "arguments": json.dumps(ARGUMENTS)},
}
AFTER_RESULT = [
    {"role": "user", "content": QUESTION},
    {"role": "assistant", "content": "", "tool_calls": [CALL]},
    {"role": "tool", "tool_call_id": "call_1", "name": "get_weather", "content": RESULT},
]


@pytest.fixture(scope="module")
def reference(qwen05_gguf) -> ReferenceAnswers:
    """transformers' answers on Qwen's GGUF, kept on disk: its tokenizer loads on a miss only."""
    return ReferenceAnswers(qwen05_gguf)


def _reference_render(gguf, messages, content) -> str:
    """transformers' rendering with the call's arguments as an object and the call turn's ``content``."""
    turns = json.loads(json.dumps(messages))
    for turn in turns:
        for call in turn.get("tool_calls", ()):
            call["function"]["arguments"] = json.loads(call["function"]["arguments"])
            turn["content"] = content
    tokenizer = gguf_references.reference_tokenizer(gguf)
    return tokenizer.apply_chat_template(turns, tools=[WEATHER], add_generation_prompt=True, tokenize=False)


def _reference_ids(gguf, text: str) -> list[int]:
    return gguf_references.reference_tokenizer(gguf)(text, add_special_tokens=False)["input_ids"]


def test_the_tool_turns_render_as_transformers_renders_them(qwen, qwen05_gguf, reference):
    # The history keeps arguments as a JSON string (OpenAI's wire shape); the template must see the object
    # (given the string, transformers' ``tojson`` would quote it). Content "" and None render alike.
    for messages in (AFTER_RESULT, [{"role": "system", "content": SYSTEM}, *AFTER_RESULT]):
        ours = qwen.render(messages, tools=[WEATHER])
        for content in ("", None):
            render = functools.partial(_reference_render, qwen05_gguf, messages, content)
            assert ours == reference.recall_json("render", [messages, [WEATHER], content], render)
        ids = functools.partial(_reference_ids, qwen05_gguf, ours)
        assert qwen.tokenizer.encode(ours) == reference.recall_json("ids", ours, ids)


def test_a_repeated_call_after_the_result_is_the_models_own(qwen05_gguf):
    """Without the worked example the model answers a tool result by repeating its call, greedy decoding
    in transformers (float32 weights of the same GGUF) exactly as in our float32 export."""
    from clika_export.api import cached_export

    ours = modelverse.load(cached_export(qwen05_gguf, progress=False))
    try:
        prompt = ours.tokenizer.encode(ours.render(AFTER_RESULT, tools=[WEATHER]))
        config = ours.defaults.overlay({"temperature": 0.0, "max_new_tokens": 24})
        got = [
            token
            for delta in ours.engine.submit(prompt, config, detokenize=False)
            for token in delta.token_ids
        ]
    finally:
        ours.close()
    assert got == gguf_references.reference_greedy(qwen05_gguf, prompt, 24)
    repeated = ours.tokenizer.decode(got)  # the same ids: the text their tokenizer gives too
    assert repeated.startswith(
        '{"name": "get_weather", "arguments": {"city": "Paris", "unit": "celsius"}}'
    ), repeated

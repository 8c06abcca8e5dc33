"""ChatSession on a tiny random llama, exported and run through the real engine.

The tiny model's replies are noise, but greedy noise is reproducible: a
session's reply must equal ``generate`` on the same rendered conversation,
which checks that the session renders its whole history each turn.
"""

from __future__ import annotations

import pytest
from pacing import paced_steps

from clika_runtime import modelverse
from clika_runtime.chat.reply.outcome import ChatOutcome
from clika_runtime.chat.session import ChatSession

GREEDY = {"temperature": 0.0, "max_new_tokens": 12}


@pytest.fixture
def session(tiny_model):
    chat = ChatSession(tiny_model, system="You are terse.", default_budget=12)
    yield chat
    chat.close()


def test_send_keeps_the_history_and_matches_generate(tiny_model, session):
    first = session.send("hello", **GREEDY)
    assert session.messages == [
        {"role": "system", "content": "You are terse."},
        {"role": "user", "content": "hello"},
        {"role": "assistant", "content": first},
    ]
    assert first == tiny_model.generate(messages=session.messages[:2], **GREEDY)
    second = session.send("and now?", **GREEDY)
    history = session.messages
    assert [m["role"] for m in history] == ["system", "user", "assistant", "user", "assistant"]
    assert second == tiny_model.generate(messages=history[:4], **GREEDY)
    report = session.report
    assert isinstance(report, ChatOutcome) and report.text == second
    assert report.prompt_tokens == len(tiny_model.tokenizer.encode(tiny_model.render(history[:4])))
    assert report.finish in ("stop", "length") and session.tool_calls == []


def test_a_session_continues_a_conversation_given_as_messages(tiny_model, session):
    session.send("hello", **GREEDY)
    kept = session.messages
    with ChatSession(tiny_model, messages=kept, default_budget=12) as resumed:
        assert resumed.messages == kept and resumed.messages is not kept
        reply = resumed.send("and now?", **GREEDY)
    assert reply == session.send("and now?", **GREEDY)  # the same conversation, the same reply
    with pytest.raises(ValueError, match="not both"):
        ChatSession(tiny_model, system="terse", messages=kept)
    with pytest.raises(ValueError, match=r"messages\[0\] has role None"):
        ChatSession(tiny_model, messages=[{"content": "no role"}])


def test_streamed_reply_equals_the_whole_and_joins_history_when_done(session):
    whole = session.complete([*session.messages, {"role": "user", "content": "count"}], **GREEDY)
    pieces = session.send("count", stream=True, **GREEDY)
    assert session.messages[-1]["role"] == "system"  # not yet: the reply joins once complete
    assert "".join(pieces) == whole
    assert session.messages[-1] == {"role": "assistant", "content": whole}


def test_seed000_a_streamed_reply_closed_early_is_cancelled_and_never_joins(tiny_model, session):
    before = session.messages
    with paced_steps(tiny_model):
        pieces = session.send("go on", stream=True, temperature=0.0, max_new_tokens=64)
        next(pieces)
        pieces.close()
    assert session.report.finish == "cancelled"
    assert session.report.completion_tokens < 64
    assert session.messages == before  # the reply joins once complete; this one never completed


def test_a_new_turn_closes_the_open_stream_first(tiny_model, session):
    with paced_steps(tiny_model):
        pieces = session.send("one", stream=True, temperature=0.0, max_new_tokens=64)
        next(pieces)
    session.send("two", **GREEDY)
    assert [m["content"] for m in session.messages if m["role"] == "user"] == ["two"]
    assert [m["role"] for m in session.messages] == ["system", "user", "assistant"]


def test_complete_leaves_the_history_untouched(session):
    session.complete([{"role": "user", "content": "side question"}], **GREEDY)
    assert session.messages == [{"role": "system", "content": "You are terse."}]
    assert session.report is not None


def test_tool_results_and_respond(tiny_model, session):
    session.send("weather?", **GREEDY)
    session.add_tool_result("call_1", "sunny", name="get_weather")
    assert session.messages[-1] == {
        "role": "tool",
        "tool_call_id": "call_1",
        "content": "sunny",
        "name": "get_weather",
    }
    reply = session.respond(**GREEDY)
    assert session.messages[-1] == {"role": "assistant", "content": reply}
    assert reply == tiny_model.generate(messages=session.messages[:-1], **GREEDY)


def test_a_model_without_a_tools_slot_refuses_tools(tiny_model, session):
    tool = {"name": "get_weather", "parameters": {"type": "object", "properties": {}}}
    assert not session.card.supports_tools
    with pytest.raises(ValueError, match="takes no tool definitions"):
        session.send("hi", tools=[tool])
    with pytest.raises(ValueError, match="takes no tool definitions"):
        ChatSession(tiny_model, tools=[tool])


def test_reset_close_and_bad_input(tiny_model, session):
    session.send("hi", **GREEDY)
    session.reset()
    assert session.messages == [{"role": "system", "content": "You are terse."}]
    session.reset(keep_system=False)
    assert session.messages == []
    with pytest.raises(ValueError, match="conversation is empty"):
        session.respond()
    with pytest.raises(ValueError, match="content must be a string"):
        session.send(None)  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="no images"):
        session.send("look", images=[object()])
    with pytest.raises(ValueError, match="default_budget"):
        ChatSession(tiny_model, default_budget=0)
    session.close()
    assert session.closed
    with pytest.raises(ValueError, match="closed"):
        session.send("hi")


def test_card_describes_the_model(tiny_model):
    with ChatSession(tiny_model, model_id="tiny") as chat:
        card = chat.card
        assert (card.model_id, card.context_window, card.reasoning_mode) == (
            "tiny",
            tiny_model.max_seq,
            "never",
        )
        assert chat.engine is tiny_model.engine  # a session is a conversation on the model's engine


# -- a real tool-calling model --------------------------------------------------------------


@pytest.mark.slow
def test_qwen_coder_calls_a_tool_and_reads_its_result(qwen05_gguf, weather_tool):
    from clika_export.api import cached_export

    qwen = modelverse.load(cached_export(qwen05_gguf, progress=False))
    try:
        assert (qwen.supports_tools, qwen.tool_call_format) == (True, "hermes")
        with ChatSession(qwen, tools=[weather_tool], default_budget=64) as chat:
            pieces = list(
                chat.send("What is the weather like in Paris right now?", stream=True, temperature=0.0)
            )
            calls = [piece for piece in pieces if not isinstance(piece, str)]
            assert [(call.name, call.arguments) for call in calls] == [("get_weather", {"city": "Paris"})]
            assert pieces[-len(calls) :] == calls  # calls come after the text
            text = "".join(piece for piece in pieces if isinstance(piece, str))
            assert "<tool_call>" not in text and '"get_weather"' not in text
            assert chat.report.finish == "tool_calls" and chat.tool_calls == calls
            assert chat.messages[-1]["tool_calls"] == [calls[0].to_message()]
            chat.add_tool_result(calls[0].id, "18 degrees Celsius, light rain", name="get_weather")
            chat.respond(temperature=0.0)
            # The tool's answer reached the model in the template's own shape (what the 0.5B model makes
            # of it is its business: it tends to call the tool again).
            prompt = qwen.render(chat.messages[:-1], tools=[weather_tool])
            assert "<tool_response>\n18 degrees Celsius, light rain\n</tool_response>" in prompt
            assert chat.report.prompt_tokens == len(qwen.tokenizer.encode(prompt))
            assert chat.messages[-1]["role"] == "assistant"
    finally:
        qwen.close()

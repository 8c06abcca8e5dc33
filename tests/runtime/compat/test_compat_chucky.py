"""The Chucky client's shape over the local runtime (tiny random llama: its replies are noise,
so the tests check the protocol: message shapes, history, errors as results, streaming)."""

from __future__ import annotations

import asyncio
import base64
import hashlib
import hmac
import json

import pytest

from clika_runtime.compat.chucky import (
    Chucky,
    PromptResult,
    create_budget,
    create_token,
    get_assistant_text,
    get_result_text,
)

SHORT = {"temperature": 0.0, "max_new_tokens": 8}
RESULT_KEYS = {
    "type",
    "subtype",
    "result",
    "session_id",
    "total_cost_usd",
    "duration_ms",
    "num_turns",
    "usage",
}


def test_prompt_returns_a_result_message_with_usage(tiny_model):
    async def main() -> PromptResult:
        async with Chucky(model=tiny_model, options=SHORT, system_prompt="You are terse.") as client:
            return await client.prompt("hello")

    result = asyncio.run(main())
    assert RESULT_KEYS <= set(result) and result["type"] == "result" and result.subtype == "success"
    assert result.total_cost_usd == 0.0 and result.num_turns == 1
    assert result.usage["input_tokens"] > 0 and result.usage["output_tokens"] > 0
    assert get_result_text(result) == result.result and get_result_text({"type": "assistant"}) is None


def test_a_session_keeps_its_conversation_across_turns(tiny_model):
    async def main():
        client = Chucky(model=tiny_model, options=SHORT)
        session = client.create_session(system_prompt="You are a tutor.")
        seen = []
        for text in ("Hello, I am Alice", "What is my name?"):
            await session.send(text)
            seen.append([msg async for msg in session.receive()])
        messages = session.messages
        await session.close()
        await client.close()
        return seen, messages, session.session_id

    seen, messages, session_id = asyncio.run(main())
    for turn in seen:
        assert [msg["type"] for msg in turn] == ["assistant", "result"]
        assert get_assistant_text(turn[0]) == turn[1]["result"]
        assert turn[1]["session_id"] == session_id
    assert [m["role"] for m in messages] == ["system", "user", "assistant", "user", "assistant"]
    assert [m["content"] for m in messages if m["role"] == "user"] == [
        "Hello, I am Alice",
        "What is my name?",
    ]


def test_the_legacy_stream_yields_text_pieces_then_result_and_done(tiny_model):
    async def main():
        async with Chucky(model=tiny_model, options=SHORT) as client:
            return [event async for event in client.stream("tell me something")]

    events = asyncio.run(main())
    kinds = [event.type for event in events]
    assert kinds[-2:] == ["result", "done"] and set(kinds[:-2]) == {"message"}
    assert "".join(event.data for event in events[:-2]) == events[-2].data["result"]


def test_a_prompt_longer_than_the_context_is_an_error_result(tiny_model):
    async def main():
        async with Chucky(model=tiny_model, options=SHORT) as client:
            result = await client.prompt("word " * 400)
            events = [event async for event in client.stream("word " * 400)]
            return result, events

    result, events = asyncio.run(main())
    assert result["subtype"] == "error" and "context" in result["result"]
    assert [event.type for event in events] == ["error", "result", "done"]
    assert events[0].data["message"] == events[1].data["result"]


def test_a_name_that_is_no_local_model_needs_a_stand_in(tiny_llama_model, monkeypatch):
    monkeypatch.delenv("CLIKA_MODEL", raising=False)
    with pytest.raises(ValueError, match="set CLIKA_MODEL to the local model it stands for"):
        Chucky(model="claude-sonnet-4-5-20250929")
    monkeypatch.setenv("CLIKA_MODEL", str(tiny_llama_model))
    client = Chucky(model="claude-sonnet-4-5-20250929", threads=1)
    assert client.model.local_dir == tiny_llama_model
    asyncio.run(client.close())
    with pytest.raises(ValueError, match="this client is closed"):
        client.create_session()


def test_create_token_signs_its_claims():
    token = create_token(user_id="u1", project_id="p1", secret="s3", budget=create_budget(ai_dollars=1.0))
    header, claims, signature = token.split(".")
    expected = hmac.new(b"s3", f"{header}.{claims}".encode(), hashlib.sha256).digest()
    assert base64.urlsafe_b64decode(signature + "==") == expected
    decoded = json.loads(base64.urlsafe_b64decode(claims + "=="))
    assert decoded["sub"] == "u1" and decoded["budget"]["ai_dollars"] == 1.0

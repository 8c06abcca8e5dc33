"""Seed 003 (the Chucky client), the rows of its Session: the error message a streaming reader
waits for, ``num_turns`` counted as ``TurnResult.num_turns`` counts, a per-call ``model=`` that is
honoured, and ``send()`` after ``close()`` naming the closed session. A tiny model settles them:
none depends on what the model says."""

from __future__ import annotations

import asyncio

import pytest

from clika_runtime import modelverse
from clika_runtime.compat.chucky import Chucky
from clika_runtime.sessions import AsyncChat

SHORT = {"temperature": 0.0, "max_new_tokens": 4}


async def read_turn(session, message: str) -> list[dict]:
    await session.send(message)
    return [msg async for msg in session.stream()]


def test_seed003_session_stream_yields_an_error_message_for_an_error(tiny_model):
    async def main():
        async with Chucky(model=tiny_model, options=SHORT) as client:
            session = client.create_session()
            messages = await read_turn(session, "word " * 400)  # longer than the context
            # The seed's own snippet, as it is written.
            await session.send("word " * 400)
            printed = []
            async for msg in session.stream():
                if msg.get("type") == "error":
                    printed.append(f"Error: {msg.get('error', {}).get('message')}")
                    break
            await session.close()
            return messages, printed

    messages, printed = asyncio.run(main())
    assert [m["type"] for m in messages] == ["error", "result"]
    assert messages[0]["error"]["message"] == messages[1]["result"] and "context" in messages[1]["result"]
    assert messages[1]["subtype"] == "error"
    assert printed == [f"Error: {messages[0]['error']['message']}"]


def test_seed003_num_turns_counts_the_sessions_turns_as_turn_result_does(tiny_model):
    async def main():
        async with Chucky(model=tiny_model, options=SHORT) as client:
            session = client.create_session()
            first = (await read_turn(session, "Hello, I am Alice"))[-1]
            second = (await read_turn(session, "What is my name?"))[-1]
            replies = sum(1 for m in session.messages if m["role"] == "assistant")
            await session.close()
        plain = AsyncChat(tiny_model).create_session()  # the same two turns as TurnResults
        turns = [await plain.send(text, **SHORT) for text in ("Hello, I am Alice", "What is my name?")]
        return first, second, replies, turns

    first, second, replies, turns = asyncio.run(main())
    assert (first["num_turns"], second["num_turns"]) == (1, 2) and replies == 2
    assert [turn.num_turns for turn in turns] == [1, 2]


def test_seed003_a_per_call_model_is_honoured(tiny_model, tiny_llama_model):
    other = modelverse.load(tiny_llama_model, threads=1)

    async def main():
        async with Chucky(model=tiny_model, options=SHORT) as client:
            own_steps = tiny_model.engine.stats.steps
            result = await client.prompt("Hi", model=other)
            by_name = await client.prompt("Hi", model=str(tiny_llama_model))
            return own_steps, result, by_name

    try:
        own_steps, result, by_name = asyncio.run(main())
        assert result["subtype"] == by_name["subtype"] == "success"
        assert other.engine.stats.steps > 0  # the per-call model answered
        assert tiny_model.engine.stats.steps == own_steps  # the client's own did not
    finally:
        other.close()


def test_seed003_send_after_close_names_the_closed_session(tiny_model):
    async def main():
        async with Chucky(model=tiny_model, options=SHORT) as client:
            session = client.create_session()
            await read_turn(session, "hi")
            await session.close()
            with pytest.raises(ValueError, match=f"session {session.session_id} is closed"):
                await session.send("after close")

    asyncio.run(main())

"""Seed 000 (``ChatSession``): one rule for every session kind, "the reply joins the history once
complete (a streamed reply when its iterator finishes)". A reply stopped before its end leaves
the history as it was, in the synchronous ChatSession and in the async sessions alike."""

from __future__ import annotations

import asyncio

from pacing import paced_steps

from clika_runtime.sessions import AsyncChat

LONG = {"temperature": 0.0, "max_new_tokens": 64, "ignore_eos": True}
SHORT = {"temperature": 0.0, "max_new_tokens": 4}


def test_seed000_the_reply_joins_the_history_once_complete_in_a_chat_session(tiny_model):
    with tiny_model.chat_session(system="You are terse.") as chat:
        with paced_steps(tiny_model):
            stopped = chat.send("stopped", stream=True, **LONG)
            next(stopped)
            stopped.close()
        assert chat.messages == [{"role": "system", "content": "You are terse."}]
        pieces = chat.send("read to the end", stream=True, **SHORT)
        assert len(chat.messages) == 1  # not before its iterator finishes
        text = "".join(p for p in pieces if isinstance(p, str))
        assert chat.messages[1:] == [
            {"role": "user", "content": "read to the end"},
            {"role": "assistant", "content": text},
        ]


def test_seed000_the_reply_joins_the_history_once_complete_in_an_async_session(tiny_model):
    async def scenario():
        chat = AsyncChat(tiny_model, system="You are terse.")
        session = chat.create_session()
        with paced_steps(tiny_model):
            stream = session.stream("stopped", **LONG)
            await stream.__anext__()
            await stream.aclose()
        stopped = session.messages
        text = []
        async for event in session.stream("read to the end", **SHORT):
            if event.type == "text":
                text.append(event.text)
        return stopped, "".join(text), session.messages

    stopped, text, history = asyncio.run(scenario())
    assert stopped == [{"role": "system", "content": "You are terse."}]
    assert history[1:] == [
        {"role": "user", "content": "read to the end"},
        {"role": "assistant", "content": text},
    ]

"""The seeds' own code snippets on the real SmolLM2-135M-Instruct (slow), adapted to a local model:
the toolnexus client (``create_client`` over a stub server) becomes an ``AsyncChat`` on the model,
its toolkit has the built-in tools off (a local model is no place for a shell), and the
``RunCancelled`` is the runtime's. Each prints what its seed says it prints; what the 135M model
answers is not asserted where the stub scripted it. (Seed 003's snippets are the Chucky examples,
run by ``test_compat_chucky_examples.py``.)"""

from __future__ import annotations

import asyncio

import pytest
from toolnexus import create_toolkit

from clika_runtime import modelverse
from clika_runtime.sessions import AsyncChat, RunCancelled

pytestmark = pytest.mark.slow


@pytest.fixture(scope="module")
def model(smollm2_gguf):
    from clika_export.api import cached_export

    loaded = modelverse.load(cached_export(smollm2_gguf, precision="int4", progress=False))
    yield loaded
    loaded.close()


def test_seed000_the_chat_session_snippet(model, capsys):
    with model.chat_session(system="You are terse.", default_budget=24) as chat:
        print(chat.send("hi"))
        for piece in chat.send("and now?", stream=True):
            print(piece, end="", flush=True)
    out = capsys.readouterr().out
    replies = [m["content"] for m in chat.messages if m["role"] == "assistant"]
    assert len(replies) == 2 and out == f"{replies[0]}\n{replies[1]}"


def test_seed002_example_1_two_turns_growing_transcript(model, capsys):
    async def main():
        tk = await create_toolkit(builtins=False)
        try:
            client = AsyncChat(model, default_budget=16)
            convo = client.conversation(tk)

            await convo.send("first")
            n1 = len(convo.messages)
            await convo.send("second")
            n2 = len(convo.messages)

            assert n2 > n1, "the transcript must grow with each send()"
            users = [m["content"] for m in convo.messages if m.get("role") == "user"]
            assert users == ["first", "second"]

            print("ok:", n1, "->", n2, "messages")
        finally:
            await tk.close()

    asyncio.run(main())
    assert capsys.readouterr().out == "ok: 2 -> 4 messages\n"


def test_seed002_example_2_the_second_turn_reads_the_first(model, capsys):
    async def main():
        tk = await create_toolkit(builtins=False)
        try:
            client = AsyncChat(model, default_budget=24)
            convo = client.conversation(tk)

            a = await convo.send("My name is Muthu and my favorite number is 7. Reply 'noted'.")
            b = await convo.send("What is my name and favorite number?")

            print("ok:", a.text, "->", b.text)
            return a, b, convo.messages
        finally:
            await tk.close()

    a, b, messages = asyncio.run(main())
    assert capsys.readouterr().out == f"ok: {a.text} -> {b.text}\n"
    assert "My name is Muthu and my favorite number is 7." in b.last.prompt_text  # it read turn 1
    assert [m["content"] for m in messages if m["role"] == "assistant"] == [a.text, b.text]


def test_seed002_example_3_reset_clears_and_cancel_is_threaded_through(model, capsys):
    async def main():
        tk = await create_toolkit(builtins=False)
        try:
            client = AsyncChat(model, default_budget=16)

            convo = client.conversation(tk)
            await convo.send("first")
            assert len(convo.messages) > 0
            convo.reset()
            assert convo.messages == []
            await convo.send("after reset")
            users = [m["content"] for m in convo.messages if m.get("role") == "user"]
            assert users == ["after reset"]

            cancel = asyncio.Event()
            cancel.set()
            convo2 = client.conversation(tk, cancel=cancel)
            try:
                await convo2.send("should not complete")
                raised = False
            except RunCancelled:
                raised = True
            assert raised

            print("ok: reset ->", users, "| cancel raised RunCancelled:", raised)
        finally:
            await tk.close()

    asyncio.run(main())
    assert capsys.readouterr().out == "ok: reset -> ['after reset'] | cancel raised RunCancelled: True\n"

"""Seed 002 (toolnexus's ``Conversation``), the rows a tiny model settles: a toolnexus Toolkit
adapted, the RunResult's names and usage keys, ``messages`` read without copies,
``run(..., history=...)``, ``reset()`` clearing, retries of a turn the full queue refused. The
tool-running rows need a model that calls tools: ``tests/e2e/test_seed002_toolnexus_smollm2.py``."""

from __future__ import annotations

import asyncio
import threading

from toolnexus import create_toolkit
from toolnexus import tool as nexus_tool

from clika_runtime import modelverse
from clika_runtime.chat.tools.definitions import ToolCall
from clika_runtime.chat.tools.toolkit import Toolkit
from clika_runtime.engine.errors import QueueFullError
from clika_runtime.engine.stages import StageEvent
from clika_runtime.sessions import AsyncChat

SHORT = {"temperature": 0.0, "max_new_tokens": 4}


@nexus_tool
def add(a: int, b: int) -> str:
    """Add two numbers and return the sum."""
    return str(a + b)


def users(messages) -> list[str]:
    return [m["content"] for m in messages if m["role"] == "user"]


def test_seed002_conversation_takes_a_toolnexus_toolkit_and_adapts_its_tools(tiny_model):
    async def main():
        tk = await create_toolkit(builtins=False, extra_tools=[add])
        try:
            convo = AsyncChat(tiny_model).conversation(tk)
            output = await convo.toolkit.run(ToolCall("call_1", "add", {"a": 2, "b": 3}))
            refused = await convo.toolkit.run(ToolCall("call_2", "add", {"a": "two"}))
            return convo, output, refused
        finally:
            await tk.close()

    convo, output, refused = asyncio.run(main())
    assert isinstance(convo.toolkit, Toolkit) and convo.toolkit.names == ("add",)
    assert convo.toolkit.definitions()[0]["function"]["parameters"]["required"] == ["a", "b"]
    assert output.content == "5" and not output.is_error
    assert refused.is_error and "invalid arguments for add" in refused.content


def test_seed002_run_result_has_the_clients_names_and_usage_keys(tiny_model):
    async def main():
        return await AsyncChat(tiny_model, model_id="tiny").conversation().send("hi", **SHORT)

    result = asyncio.run(main())
    assert (result.turns, result.tool_call_count, result.model) == (1, 0, "tiny")
    assert (result.limit, result.pending, result.run_status) == (None, None, "done")
    usage = result.usage
    assert usage["prompt_tokens"] == usage["input_tokens"] > 0
    assert usage["completion_tokens"] == usage["output_tokens"] > 0
    assert usage["total_tokens"] == usage["prompt_tokens"] + usage["completion_tokens"]


def test_seed002_messages_is_not_copied_on_every_read(tiny_model):
    async def main():
        chat = AsyncChat(tiny_model, system="You are terse.")
        convo = chat.conversation()
        await convo.send("hi", **SHORT)
        session = chat.create_session()
        await session.send("hi", **SHORT)
        return convo, session

    convo, session = asyncio.run(main())
    assert convo.messages is convo.messages  # the transcript itself
    assert session.messages[1] is session.messages[1]  # a session's list holds its messages, not copies


def test_seed002_run_continues_a_history(tiny_model):
    async def main():
        chat = AsyncChat(tiny_model, system="You are terse.")
        first = await chat.run("first", **SHORT)
        second = await chat.run("second", history=list(first.messages), **SHORT)
        return first, second

    first, second = asyncio.run(main())
    assert users(second.messages) == ["first", "second"]
    assert [m["role"] for m in second.messages].count("system") == 1  # not added again
    assert list(second.messages[: len(first.messages)]) == list(first.messages)


def test_seed002_reset_clears_the_transcript_without_a_toolkit(tiny_model):
    async def main():
        convo = AsyncChat(tiny_model, system="You are terse.").conversation()
        await convo.send("first", **SHORT)
        convo.reset()
        cleared = list(convo.messages)
        await convo.send("after reset", **SHORT)
        return cleared, convo.messages

    cleared, after = asyncio.run(main())
    assert cleared == []
    assert users(after) == ["after reset"]
    assert after[0] == {"role": "system", "content": "You are terse."}  # a fresh conversation's


def test_seed002_a_turn_the_full_queue_refused_is_retried(tiny_llama_model):
    model = modelverse.load(tiny_llama_model, threads=1, max_active=1, max_queued=0)
    stepped, release = threading.Event(), threading.Event()

    def hold(event: StageEvent) -> None:
        if event.stage == "step":
            stepped.set()
            release.wait(timeout=60)

    model.set_stage_observer(hold)
    occupier = model.stream_generate("holding the only slot", max_new_tokens=100, ignore_eos=True)
    seen: list[dict] = []

    def on_error(info: dict) -> str:
        seen.append(info)
        release.set()
        occupier.cancel()  # the slot is free once this returns
        return "retry"

    async def main():
        chat = AsyncChat(model, max_active=1, max_queued=0, retries=1, retry_base_ms=1, on_error=on_error)
        return await chat.conversation().send("hi", **SHORT)

    try:
        assert stepped.wait(60)  # the occupier is in the engine
        result = asyncio.run(main())
    finally:
        release.set()
        model.set_stage_observer(None)
        model.close()
    assert [info["attempt"] for info in seen] == [0] and isinstance(seen[0]["error"], QueueFullError)
    assert result.turns == 1 and result.subtype == "success"

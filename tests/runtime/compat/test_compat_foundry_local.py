"""Foundry Local's Session shape over the local runtime, on the tiny random llama (its replies
are noise, so greedy replies are compared with the same request sent another way)."""

from __future__ import annotations

import asyncio
import threading

import pytest

from clika_runtime.compat.foundry_local import Item, Request, RequestOptions, Session
from clika_runtime.engine.stages import StageEvent
from clika_runtime.sessions import RunCancelled

GREEDY = RequestOptions(temperature=0.0, max_output_tokens=6)


def run(coroutine):
    return asyncio.run(coroutine)


def test_requests_keep_the_conversation_and_options_persist(tiny_model):
    async def main():
        session = await Session.new(tiny_model, system="You are terse.")
        await session.set_options(GREEDY)
        first = await session.process_request(Request([Item("hello")]))
        second = await session.process_request(Request("again", RequestOptions(max_output_tokens=2)))
        messages = session.messages
        await session.close()
        return first, second, messages

    first, second, messages = run(main())
    assert [m["role"] for m in messages] == ["system", "user", "assistant", "user", "assistant"]
    assert messages[2]["content"] == first.text and messages[4]["content"] == second.text
    assert first.usage["output_tokens"] <= 6 and second.usage["output_tokens"] <= 2
    assert first.text == tiny_model.generate(messages=messages[:2], temperature=0.0, max_new_tokens=6)


def test_a_streamed_request_yields_the_same_reply_in_items(tiny_model):
    async def main():
        session = await Session.new(tiny_model)
        await session.set_options(GREEDY)
        stream = session.process_streaming_request(Request(["tell me"]))
        pieces = [item.text async for item in stream]
        whole = await (await Session.new(tiny_model)).process_request(Request(["tell me"], GREEDY))
        return pieces, stream.result, whole

    pieces, result, whole = run(main())
    assert "".join(pieces) == result.result == whole.text and len(pieces) >= 1


def test_dropping_a_stream_or_the_awaiting_task_cancels_and_keeps_the_history(tiny_model):
    # The engine waits after each step until the test has dropped the reply, so the cancel
    # lands mid-reply whatever the machine's speed.
    go_on = threading.Event()
    stepped = threading.Event()

    def hold_after_each_step(event: StageEvent) -> None:
        if event.stage == "step":
            stepped.set()
            go_on.wait(timeout=60)

    async def main():
        tiny_model.set_stage_observer(hold_after_each_step)
        try:
            session = await Session.new(tiny_model, engine=tiny_model.engine)
            options = RequestOptions(temperature=0.0, max_output_tokens=64)
            stream = session.process_streaming_request(Request(["a long story"], options))
            first = asyncio.ensure_future(stream.__anext__())
            await asyncio.to_thread(stepped.wait, 60)
            go_on.set()
            await first
            await stream.aclose()
            go_on.clear()
            stepped.clear()
            task = asyncio.ensure_future(session.process_request(Request(["another"], options)))
            await asyncio.to_thread(stepped.wait, 60)  # the request is in the engine, held
            task.cancel()
            go_on.set()
            with pytest.raises(asyncio.CancelledError):
                await task
            return stream.result, session.messages
        finally:
            go_on.set()
            tiny_model.set_stage_observer(None)

    result, messages = run(main())
    assert result is None and messages == []


def test_an_input_queue_prefills_while_pieces_arrive(tiny_model):
    pieces = ["The first part of a long question, ", "then a second part, ", "and the end."]

    async def main():
        session = await Session.new(tiny_model)
        queue = session.create_input_queue()
        reply = asyncio.ensure_future(
            session.process_request(Request([Item("Q: ")], GREEDY).with_input_queue(queue))
        )
        for piece in pieces:
            queue.push(piece)
            while not queue.progress or queue.progress[-1][0] < len(
                "".join(pieces[: pieces.index(piece) + 1])
            ):
                await asyncio.sleep(0.01)  # let the prefill of what has arrived finish
        queue.close()
        response = await reply
        whole = await (await Session.new(tiny_model)).process_request(
            Request(["Q: " + "".join(pieces)], GREEDY)
        )
        return queue.progress, response, whole

    progress, response, whole = run(main())
    tokens = [computed for _, computed in progress]
    assert len(tokens) == 3 and tokens == sorted(tokens) and tokens[0] > 0
    assert response.usage["cache_read_input_tokens"] >= tokens[-1]
    assert response.text == whole.text


def test_an_aborted_or_closed_queue(tiny_model):
    async def main():
        session = await Session.new(tiny_model)
        queue = session.create_input_queue()
        reply = asyncio.ensure_future(session.process_request(Request().with_input_queue(queue)))
        queue.push("never sent")
        queue.abort()
        with pytest.raises(RunCancelled, match="aborted"):
            await reply
        closed = session.create_input_queue()
        closed.close()
        with pytest.raises(ValueError, match="the input queue is closed"):
            closed.push("late")
        return session.messages

    assert run(main()) == []


def test_a_clone_shares_the_conversation_and_outlives_the_original(tiny_model):
    async def main():
        session = await Session.new(tiny_model)
        await session.set_options(GREEDY)
        clone = session.clone()
        await session.process_request(Request(["one"]))
        await session.close()
        await clone.process_request(Request(["two"]))
        users = [m["content"] for m in clone.messages if m["role"] == "user"]
        await clone.close()
        return users

    assert run(main()) == ["one", "two"]


def test_bad_requests_are_refused_by_name(tiny_model):
    with pytest.raises(ValueError, match="an image item needs its data"):
        Item("x", kind="image")
    with pytest.raises(ValueError, match="Session.new takes a loaded model"):
        run(Session.new("not a model"))

    async def main():
        session = await Session.new(tiny_model)
        with pytest.raises(ValueError, match="options must be RequestOptions"):
            await session.set_options({"temperature": 0})
        with pytest.raises(ValueError, match="a request must be a Request"):
            await session.process_request("hello")

    run(main())

"""Async sessions on a tiny random llama, exported and run through the real engine.

The tiny model's replies are noise, but greedy noise is reproducible: a turn's
reply must equal ``generate`` on the conversation the turn rendered, which
checks that a session sends its own whole history and nothing else.
"""

from __future__ import annotations

import asyncio
import threading
import time

import pytest

from clika_runtime.chat.reply.events import ReplyReader
from clika_runtime.chat.reply.parser import ReplyParser
from clika_runtime.chat.tools.definitions import ToolCall, normalize_tools
from clika_runtime.chat.tools.formats import get_format
from clika_runtime.engine.config import GenerationConfig
from clika_runtime.sessions import AsyncChat, Event, RunCancelled, SQLiteStore, TurnResult
from clika_runtime.sessions.turn import Prepared, TurnRun, TurnSpec, public_events

GREEDY = {"temperature": 0.0, "max_new_tokens": 8}


def run(coro):
    return asyncio.run(coro)


@pytest.fixture
def chat(tiny_model):
    opened = AsyncChat(tiny_model, system="You are terse.", max_active=2, default_budget=8)
    yield opened
    opened.close()


def reference(model, messages, **config):
    """The reply the model gives to ``messages`` alone (on the model's own engine)."""
    return model.generate(messages=messages, **{**GREEDY, **config})


def users(messages):
    return [m["content"] for m in messages if m["role"] == "user"]


def test_send_returns_a_result_message_and_keeps_the_history(tiny_model, chat):
    async def scenario():
        session = chat.create_session()
        first = await session.send("hello", **GREEDY)
        second = await session.send("and now?", **GREEDY)
        return session, first, second

    session, first, second = run(scenario())
    history = session.messages
    assert [m["role"] for m in history] == ["system", "user", "assistant", "user", "assistant"]
    assert first.result == reference(tiny_model, history[:2]) == history[2]["content"]
    assert second.result == reference(tiny_model, history[:4]) == history[4]["content"]
    message = second.to_message()
    assert set(message) == {
        "type", "subtype", "result", "session_id", "total_cost_usd", "duration_ms", "num_turns", "usage"
    }  # fmt: skip
    assert message["type"] == "result" and message["subtype"] == "success"
    assert message["session_id"] == session.session_id and message["total_cost_usd"] == 0.0
    assert (first.num_turns, second.num_turns) == (1, 2)
    assert isinstance(message["duration_ms"], int) and message["duration_ms"] >= 0
    assert second.prompt_text == tiny_model.render(history[:4])
    assert second.usage["input_tokens"] == len(tiny_model.tokenizer.encode(second.prompt_text))
    assert second.usage["output_tokens"] == 8 or second.finish_reason == "stop"
    assert second.usage["cache_read_input_tokens"] > 0  # turn 2 reuses turn 1's KV
    assert second.get("result") == second["result"] == second.text
    assert list(second.messages) == history and session.last_result is second


def test_a_stream_yields_text_events_then_the_result_and_joins_the_history_at_the_end(tiny_model, chat):
    async def scenario():
        session = chat.create_session()
        events = []
        during = None
        async for event in session.stream("count", **GREEDY):
            events.append(event)
            if during is None:
                during = session.messages
        return session, events, during

    session, events, during = run(scenario())
    assert [m["role"] for m in during] == ["system"]  # not yet: the reply joins once complete
    assert [e.type for e in events[:-1]] == ["text"] * (len(events) - 1)
    assert events[-1].type == "result" and events[-1]["type"] == "result"
    text = "".join(e.text for e in events[:-1])
    assert text == events[-1].result.result == reference(tiny_model, session.messages[:2])
    assert session.messages[-1] == {"role": "assistant", "content": text}
    assert events[0].to_message() == {"type": "text", "text": events[0].text}


def test_a_turn_leaves_the_event_loop_free_while_the_engine_decodes(tiny_model):
    def slow_steps(event):
        if event.stage == "step":
            time.sleep(0.005)  # on the engine thread: a turn takes >= 24 x 5 ms however fast the model

    engine = tiny_model.create_engine(max_active=1, observer=slow_steps)
    chat = AsyncChat(tiny_model, engine=engine, default_budget=8)

    async def scenario():
        ticks, sending = 0, True

        async def ticker():
            nonlocal ticks
            while sending:
                ticks += 1
                await asyncio.sleep(0)

        other = asyncio.create_task(ticker())
        await asyncio.sleep(0)
        await chat.create_session().send("hello", temperature=0.0, max_new_tokens=24, ignore_eos=True)
        sending = False
        await other
        return ticks

    try:
        ticks = run(scenario())
    finally:
        chat.close()
        engine.close()
    assert ticks >= 10  # a send that blocked the loop would leave the ticker at 1


def test_two_conversations_interleaved_on_one_engine_keep_their_histories_apart(tiny_model):
    rows_per_step: list[list[int]] = []  # one list per round
    both_submitted = threading.Event()

    def observe(event):
        if event.stage == "step":
            rows_per_step[-1].append(event.detail["rows"])
            # Hold the engine after a round's first step until the other conversation's turn is in,
            # so the two turns surely share steps however fast the tiny model decodes.
            both_submitted.wait(timeout=30)

    engine = tiny_model.create_engine(max_active=2, observer=observe)
    submit, submitted = engine.submit, []

    def counting_submit(*args, **kwargs):
        request = submit(*args, **kwargs)
        submitted.append(request)
        if len(submitted) % 2 == 0:
            both_submitted.set()
        return request

    engine.submit = counting_submit
    chat = AsyncChat(tiny_model, engine=engine, system="You are terse.")
    long = {"temperature": 0.0, "max_new_tokens": 24, "ignore_eos": True}

    async def scenario():
        ada, bob = chat.create_session(), chat.create_session()
        for a_turn, b_turn in (("I am Ada.", "I am Bob."), ("Who am I?", "Who am I, then?")):
            both_submitted.clear()
            rows_per_step.append([])
            await asyncio.gather(ada.send(a_turn, **long), bob.send(b_turn, **long))
        return ada.messages, bob.messages

    try:
        ada, bob = run(scenario())
    finally:
        both_submitted.set()
        engine.close()
    assert users(ada) == ["I am Ada.", "Who am I?"] and users(bob) == ["I am Bob.", "Who am I, then?"]
    for history in (ada, bob):
        assert history[2]["content"] == reference(tiny_model, history[:2], **long)
        assert history[4]["content"] == reference(tiny_model, history[:4], **long)
    assert len(submitted) == 4
    # In each round the two conversations decoded in the same steps.
    assert [max(rows) for rows in rows_per_step] == [2, 2]


def test_session_options_persist_and_a_turns_overrides_apply_to_it_only(chat):
    async def scenario():
        session = chat.create_session(options={"temperature": 0.0, "ignore_eos": True})
        session.set_options(max_new_tokens=3)
        lengths = [(await session.send("a")).usage["output_tokens"]]
        lengths.append((await session.send("b", max_new_tokens=5)).usage["output_tokens"])
        lengths.append((await session.send("c")).usage["output_tokens"])
        return session, lengths

    session, lengths = run(scenario())
    assert lengths == [3, 5, 3]
    assert session.options == {"temperature": 0.0, "ignore_eos": True, "max_new_tokens": 3}
    with pytest.raises(ValueError, match="unknown generation option"):
        session.set_options(temprature=0.5)
    with pytest.raises(ValueError, match="temperature"):
        session.set_options(temperature=-1)
    assert session.options["max_new_tokens"] == 3  # a refused change changes nothing
    session.clear_options("max_new_tokens")
    assert session.options == {"temperature": 0.0, "ignore_eos": True}
    session.clear_options()
    assert session.options == {}


def test_fork_and_undo_turns_give_the_expected_histories(tiny_model, chat):
    async def scenario():
        session = chat.create_session()
        await session.send("one", **GREEDY)
        await session.send("two", **GREEDY)
        before = session.messages
        fork = session.fork()
        await fork.send("three", **GREEDY)
        removed = session.undo_turns(1)
        after_undo = session.messages
        again = await session.send("two again", **GREEDY)
        return session, fork, before, removed, after_undo, again

    session, fork, before, removed, after_undo, again = run(scenario())
    assert fork.session_id != session.session_id
    assert fork.messages[:5] == before and users(fork.messages) == ["one", "two", "three"]
    assert removed == before[3:] and after_undo == before[:3]
    assert users(session.messages) == ["one", "two again"]
    assert again.result == reference(tiny_model, session.messages[:4])
    with pytest.raises(ValueError, match="has 2 user turn"):
        session.undo_turns(3)
    session.undo_turns(2)
    assert session.messages == before[:1]
    with pytest.raises(ValueError, match="n must be an integer >= 1"):
        session.undo_turns(0)


def test_reset_keeps_the_system_turn_unless_told(chat):
    async def scenario():
        session = chat.create_session()
        await session.send("first", **GREEDY)
        session.reset()
        await session.send("after reset", **GREEDY)
        kept = session.messages
        session.reset(keep_system=False)
        return kept, session.messages

    kept, cleared = run(scenario())
    assert users(kept) == ["after reset"] and kept[0]["role"] == "system"
    assert cleared == []


def test_ask_by_id_loads_continues_and_saves_a_conversation(tiny_model, tmp_path):
    path = tmp_path / "conversations.db"

    async def first_process():
        with SQLiteStore(path) as store:
            chat = AsyncChat(tiny_model, store=store, system="You are terse.")
            try:
                await chat.ask("My name is Ada.", id="ada", **GREEDY)
                await chat.ask("What is my name?", id="ada", **GREEDY)
                fork = await chat.fork("ada", "ada-2")
                with pytest.raises(ValueError, match="already holds"):
                    await chat.fork("ada", "ada-2")
                with pytest.raises(ValueError, match="no conversation 'nobody'"):
                    await chat.fork("nobody")
                return fork.session_id, await store.get("ada")
            finally:
                chat.close()

    async def later_chat():
        with SQLiteStore(path) as store:
            chat = AsyncChat(tiny_model, store=store)
            try:
                return await chat.open("ada"), await chat.open("ada-2"), await store.list()
            finally:
                chat.close()

    fork_id, saved = run(first_process())
    assert fork_id == "ada-2"
    assert users(saved) == ["My name is Ada.", "What is my name?"] and len(saved) == 5
    assert saved[4]["content"] == reference(tiny_model, saved[:4])
    reopened, forked, ids = run(later_chat())
    assert reopened.messages == saved and forked.messages == saved
    assert sorted(ids) == ["ada", "ada-2"]


def test_sessions_save_to_the_chats_store_after_each_turn(chat):
    async def scenario():
        session = chat.create_session()
        await session.send("hello", **GREEDY)
        stored = await chat.store.get(session.session_id)
        continued = await chat.ask("again", id=session.session_id, **GREEDY)
        one_shot = await chat.prompt("not kept", **GREEDY)
        return session, stored, continued, one_shot, await chat.store.list()

    session, stored, continued, one_shot, ids = run(scenario())
    assert stored == session.messages
    assert users(continued.messages) == ["hello", "again"] and continued.num_turns == 2
    assert one_shot.num_turns == 1 and ids == [session.session_id]


def test_a_cancel_event_already_set_raises_before_the_engine_sees_the_turn(chat):
    async def scenario():
        cancel = asyncio.Event()
        cancel.set()
        session = chat.conversation(cancel=cancel)
        steps = chat.engine.stats.steps
        with pytest.raises(RunCancelled):
            await session.send("should not run", **GREEDY)
        with pytest.raises(RunCancelled):
            async for _ in session.stream("nor this", **GREEDY):
                pass
        assert chat.engine.stats.steps == steps
        cancel.clear()
        await session.send("now it runs", **GREEDY)
        return session.messages

    assert users(run(scenario())) == ["now it runs"]


def test_a_new_turn_closes_an_open_stream_which_then_raises(chat):
    async def scenario():
        session = chat.create_session()
        stream = session.stream("one", temperature=0.0, max_new_tokens=40, ignore_eos=True)
        first = await stream.__anext__()
        second = await session.send("two", **GREEDY)
        with pytest.raises(RunCancelled, match="newer turn"):
            await stream.__anext__()
        return first, second, session.messages

    first, second, history = run(scenario())
    assert first.type == "text"
    assert users(history) == ["two"] and history[-1]["content"] == second.result


def test_sends_on_one_session_take_turns(tiny_model, chat):
    async def scenario():
        session = chat.create_session()
        await asyncio.gather(session.send("first", **GREEDY), session.send("second", **GREEDY))
        return session.messages

    history = run(scenario())
    assert [m["role"] for m in history] == ["system", "user", "assistant", "user", "assistant"]
    assert users(history) == ["first", "second"]
    assert history[4]["content"] == reference(tiny_model, history[:4])


def test_bad_input_is_refused_with_a_clear_error(chat):
    session = chat.create_session()
    with pytest.raises(ValueError, match="content must be a string"):
        session.stream(42)
    with pytest.raises(ValueError, match="unknown generation option"):
        session.stream("hi", temprature=0)
    with pytest.raises(ValueError, match="takes no tool definitions"):
        session.stream("hi", tools=[{"name": "lookup", "parameters": {"type": "object"}}])
    with pytest.raises(ValueError, match="asyncio.Event"):
        chat.create_session(cancel=True)
    with pytest.raises(ValueError, match="conversation id"):
        chat.create_session(session_id="")
    with pytest.raises(ValueError, match="default_budget"):
        AsyncChat(chat.model, engine=chat.engine, default_budget=0)
    run(session.close())
    with pytest.raises(ValueError, match="closed"):
        session.stream("hi")


def test_event_and_result_message_shapes():
    call = ToolCall("call_1", "lookup", {"q": "ada"})
    result = TurnResult("done", "s1", num_turns=3, usage={"input_tokens": 5, "output_tokens": 2})
    assert Event("tool_use", tool_call=call).to_message() == {
        "type": "tool_use", "id": "call_1", "name": "lookup", "input": {"q": "ada"}
    }  # fmt: skip
    assert Event("thinking", text="hmm").to_message() == {"type": "thinking", "thinking": "hmm"}
    assert Event("error", text="boom").get("error") == {"message": "boom"}
    assert Event("result", result=result).to_message() == result.to_message()
    assert result.to_message()["usage"] == {"input_tokens": 5, "output_tokens": 2}
    assert not result.is_error and TurnResult("boom", "s1", subtype="error").is_error
    with pytest.raises(ValueError, match="event type"):
        Event("message", text="x")


def test_a_replys_pieces_become_thinking_text_and_tool_use_events_in_order():
    tools = normalize_tools([{"name": "lookup", "parameters": {"type": "object"}}])
    parser = ReplyParser(reasoning=True, fmt=get_format("hermes"), tools=tools)
    pieces = [
        "<think>Ada asked",
        " for a lookup.</think>",
        "Let me check. ",
        '<tool_call>{"name": "lookup", ',
    ]
    pieces.append('"arguments": {"q": "Ada"}}</tool_call>')

    async def scenario():
        run_ = TurnRun(TurnSpec((), GenerationConfig(), tools), asyncio.get_running_loop())
        run_.prepared = Prepared("prompt", [1], parser, skip_special_tokens=False)
        reader, events = ReplyReader(parser), []
        for piece in pieces:
            events += public_events(reader.feed(piece))
        events += public_events(reader.finish(reasoning_first=True))
        return events, run_.reply_message()

    events, reply = run(scenario())
    kinds = [event.type for event in events]
    assert kinds[0] == "thinking" and kinds[-1] == "tool_use" and "text" in kinds
    assert "".join(e.text for e in events if e.type == "thinking") == "Ada asked for a lookup."
    assert "".join(e.text for e in events if e.type == "text").strip() == "Let me check."
    call = events[-1].to_message()
    assert (call["type"], call["name"], call["input"]) == ("tool_use", "lookup", {"q": "Ada"})
    assert reply["reasoning_content"] == "Ada asked for a lookup."
    assert reply["tool_calls"][0]["function"]["name"] == "lookup"

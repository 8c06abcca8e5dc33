"""Async sessions on the real SmolLM2-135M-Instruct (exported once, cached; one load per module).

Cancellation: a turn cancelled by its event, by cancelling its task, by
closing its stream or by dropping it stops decoding at the engine's next step
and frees the slot. Durability: a conversation saved to a SQLite file by this
process is continued by another process, whose turn-2 prompt holds turn 1.
What the 135M model answers is not asserted (its recall is not reliable);
what the runtime guarantees is.
"""

from __future__ import annotations

import asyncio
import json
import subprocess
import sys
import time

import pytest
from repo_paths import EXAMPLES

from clika_runtime import modelverse
from clika_runtime.sessions import AsyncChat, RunCancelled, SQLiteStore

pytestmark = pytest.mark.slow

SYSTEM = "You are a helpful assistant."
LONG = {"temperature": 0.0, "max_new_tokens": 200, "ignore_eos": True}
GREEDY = {"temperature": 0.0, "max_new_tokens": 24}


def run(coro):
    return asyncio.run(coro)


@pytest.fixture(scope="module")
def model(smollm2_fp32):
    loaded = modelverse.load(smollm2_fp32, threads=1)
    yield loaded
    loaded.close()


class EngineWatch:
    """Records each request the engine takes and the step count when each cancel was posted."""

    def __init__(self, engine):
        self.engine = engine
        self.requests = []
        self.cancel_posted_at = []
        submit, cancel = engine.submit, engine.cancel

        def recording_submit(*args, **kwargs):
            request = submit(*args, **kwargs)
            self.requests.append(request)
            return request

        def recording_cancel(request_id):
            self.cancel_posted_at.append(engine.stats.steps)
            cancel(request_id)

        engine.submit, engine.cancel = recording_submit, recording_cancel


async def first_text(stream):
    async for event in stream:
        if event.type == "text":
            return event
    raise AssertionError("the stream ended before any text")


async def wait_for_steps(engine, count, timeout=60.0):
    deadline = time.monotonic() + timeout
    while engine.stats.steps < count:
        assert time.monotonic() < deadline, "the engine made no progress"
        await asyncio.sleep(0.005)


async def cancel_by(mode, watch, session, cancel):
    """Start a long turn, let it decode, then stop it the way ``mode`` names."""
    if mode == "task":
        steps = watch.engine.stats.steps
        task = asyncio.create_task(session.send("Tell me a long story about the sea.", **LONG))
        await wait_for_steps(watch.engine, steps + 3)
        task.cancel()
        done = await asyncio.gather(task, return_exceptions=True)
        assert isinstance(done[0], asyncio.CancelledError)
        return
    stream = session.stream("Tell me a long story about the sea.", **LONG)
    await first_text(stream)
    if mode == "event":
        cancel.set()
        with pytest.raises(RunCancelled, match="cancel event"):
            async for _ in stream:
                pass
    elif mode == "aclose":
        await stream.aclose()
    else:  # drop: the last reference goes, nothing is awaited
        del stream
        assert watch.cancel_posted_at, "dropping the stream did not cancel its request at once"


@pytest.mark.parametrize("mode", ["event", "task", "aclose", "drop"])
def test_a_cancelled_turn_frees_its_engine_slot_within_one_step(model, mode):
    chat = AsyncChat(model, system=SYSTEM, max_active=2)
    watch = EngineWatch(chat.engine)

    async def scenario():
        cancel = asyncio.Event()
        session = chat.create_session(cancel=cancel)
        await cancel_by(mode, watch, session, cancel)
        # check_integrity runs on the engine thread after every command posted before it.
        await asyncio.to_thread(chat.engine.check_integrity)
        return session.messages

    try:
        history = run(scenario())
        engine = chat.engine
        (request,) = watch.requests
        assert request.report.finish_reason == "cancelled"
        assert request.report.completion_tokens < LONG["max_new_tokens"]
        assert watch.cancel_posted_at, "the turn never cancelled its request"
        assert engine.stats.steps - watch.cancel_posted_at[0] <= 1  # at most the step under way
        assert engine.scheduler.running == [] and engine.cache.num_free == engine.cache.num_rows
        assert history == [{"role": "system", "content": SYSTEM}]  # the cancelled turn never joined
    finally:
        chat.close()


CONTINUE_IN_ANOTHER_PROCESS = """
import asyncio, json, sys
from clika_runtime import modelverse
from clika_runtime.sessions import AsyncChat, SQLiteStore

async def main(folder, path):
    model = modelverse.load(folder, threads=1)
    with SQLiteStore(path) as store:
        chat = AsyncChat(model, store=store, system="This system turn is not used: the saved one is.")
        result = await chat.ask("What is my name?", id="visitor", temperature=0.0, max_new_tokens=24)
        chat.close()
    print(json.dumps({**result.to_message(), "messages": list(result.messages), "prompt": result.prompt_text}))

asyncio.run(main(sys.argv[1], sys.argv[2]))
"""


def test_a_sqlite_conversation_is_continued_by_another_process(model, smollm2_fp32, tmp_path):
    path = tmp_path / "conversations.db"

    async def first_turn():
        with SQLiteStore(path) as store:
            chat = AsyncChat(model, store=store, system=SYSTEM)
            try:
                return await chat.ask("My name is Zorblax. Please remember it.", id="visitor", **GREEDY)
            finally:
                chat.close()

    first = run(first_turn())
    done = subprocess.run(
        [sys.executable, "-c", CONTINUE_IN_ANOTHER_PROCESS, str(smollm2_fp32), str(path)],
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert done.returncode == 0, done.stderr
    second = json.loads(done.stdout.strip().splitlines()[-1])
    history = second["messages"]
    assert history[:3] == list(first.messages)  # turn 1, as this process saved it
    assert [m["role"] for m in history] == ["system", "user", "assistant", "user", "assistant"]
    assert "Zorblax" in history[1]["content"] and history[0]["content"] == SYSTEM
    # The other process's turn-2 prompt is the whole saved conversation, turn 1 included.
    assert second["prompt"] == model.render(history[:4]) and "Zorblax" in second["prompt"]
    assert second["usage"]["input_tokens"] == len(model.tokenizer.encode(second["prompt"]))
    assert second["num_turns"] == 2 and second["subtype"] == "success"
    assert second["total_cost_usd"] == 0.0 and second["session_id"] == "visitor"
    with SQLiteStore(path) as store:
        assert run(store.get("visitor")) == history


EXAMPLE = EXAMPLES / "async_conversation.py"


def test_the_in_process_example_holds_a_conversation_and_saves_it(smollm2_fp32, tmp_path):
    store = tmp_path / "example.db"
    done = subprocess.run(
        [sys.executable, str(EXAMPLE), str(smollm2_fp32), "--threads", "1", "--store", str(store)],
        capture_output=True,
        text=True,
        timeout=900,
    )
    assert done.returncode == 0, done.stderr
    for turn in (1, 2, 3):
        assert f"[turn {turn}: " in done.stdout
    assert "[fork " in done.stdout
    with SQLiteStore(store) as opened:
        saved = opened.get_now("example")
    assert [m["role"] for m in saved] == ["system"] + ["user", "assistant"] * 3
    assert "My name is Ada" in saved[1]["content"]

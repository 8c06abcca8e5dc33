"""Seed 004 (Foundry Local's ``Session``): a stream left at a ``break`` stops there, quietly;
image and audio items reach a model that reads them; Chat, Embeddings and Audio sessions are
Sessions; every failure is one ``FoundryLocalError`` (and its Python exception). Tiny models
(a llama, an Idefics3, a Qwen2-Audio) settle these: none depends on what a model says."""

from __future__ import annotations

import asyncio
import gc
import threading
import time

import pytest
from audio_signals import speech_like
from support.zoo import loaded
from vision_helpers import random_image

from clika_runtime.compat.foundry_errors import FoundryLocalError, InvalidRequestError, RequestCancelledError
from clika_runtime.compat.foundry_local import Item, Request, RequestOptions, Session
from clika_runtime.compat.foundry_sessions import AudioSession, ChatSession, EmbeddingsSession
from clika_runtime.engine.stages import StageEvent
from clika_runtime.sessions import RunCancelled

LONG = RequestOptions(temperature=0.0, max_output_tokens=200)
SHORT = RequestOptions(temperature=0.0, max_output_tokens=4)


class HeldSteps:
    """Parks the engine at each step after the first until released, so the break lands mid-reply.

    The first step runs freely: its tokens are the first item the test reads. Parking it
    too would hold that item back until the wait's timeout.
    """

    def __init__(self) -> None:
        self.stepped = threading.Event()
        self.go_on = threading.Event()

    def __call__(self, event: StageEvent) -> None:
        if event.stage == "step":
            if self.stepped.is_set():
                self.go_on.wait(timeout=60)
            self.stepped.set()


async def until_ended(stream, timeout: float = 60.0):
    deadline = time.monotonic() + timeout
    while stream.report is None:
        assert time.monotonic() < deadline, "the request never ended"
        await asyncio.sleep(0.01)
    return stream.report


def held(model):
    steps = HeldSteps()
    model.set_stage_observer(steps)
    return steps


def test_seed004_a_break_stops_the_stream_at_the_break_while_it_is_still_referenced(tiny_model):
    steps = held(tiny_model)

    async def main():
        session = await Session.new(tiny_model)
        stream = session.process_streaming_request(Request(["a long story"], LONG))
        async for item in stream:
            first = item
            break
        steps.go_on.set()  # the engine runs freely now: only the break can stop the reply
        report = await until_ended(stream)
        rest = [item async for item in stream]
        await session.close()
        return first, report, rest, session.messages

    try:
        first, report, rest, messages = asyncio.run(main())
    finally:
        steps.go_on.set()
        tiny_model.set_stage_observer(None)
    assert first.kind == "text" and first.text
    assert report.finish_reason == "cancelled" and report.completion_tokens < 200
    assert rest == [] and messages == []


def test_seed004_dropping_an_item_stream_mid_reply_is_quiet(tiny_model):
    steps = held(tiny_model)
    problems: list[dict] = []

    async def main():
        asyncio.get_running_loop().set_exception_handler(lambda loop, context: problems.append(context))
        session = await Session.new(tiny_model)
        stream = session.process_streaming_request(Request(["a long story"], LONG))
        await stream.__anext__()
        del stream  # dropped mid-reply
        steps.go_on.set()
        for _ in range(20):  # let the loop finalize what the drop left, then collect it
            gc.collect()
            await asyncio.sleep(0.01)
        after = await session.process_request(Request(["next"], SHORT))
        await session.close()
        gc.collect()
        return after

    try:
        after = asyncio.run(main())
        gc.collect()
    finally:
        steps.go_on.set()
        tiny_model.set_stage_observer(None)
    assert problems == []
    assert after.finish_reason in ("stop", "length")


@pytest.fixture(scope="module")
def vision_model(idefics3_chat_model):
    with loaded(idefics3_chat_model.folder) as model:
        yield model


@pytest.fixture(scope="module")
def audio_model(qwen2_audio_chat_model):
    with loaded(qwen2_audio_chat_model.folder) as model:
        yield model


def test_seed004_image_and_audio_items_where_the_model_reads_them(tiny_model, vision_model, audio_model):
    async def ask(model, *items):
        session = await Session.new(model)
        try:
            return await session.process_request(Request(list(items), SHORT)), session.messages
        finally:
            await session.close()

    async def main():
        text_only, _ = await ask(vision_model, Item("What is this?"))
        seen, seen_history = await ask(
            vision_model, Item("What is this?"), Item.image(random_image(64, 64, 5))
        )
        silent, _ = await ask(audio_model, Item("What is said?"))
        heard, heard_history = await ask(
            audio_model, Item("What is said?"), Item.audio(speech_like(0.5, seed=3))
        )
        with pytest.raises(FoundryLocalError, match="reads text only") as refused:
            await ask(tiny_model, Item("What is this?"), Item.image(random_image(64, 64, 5)))
        return text_only, seen, seen_history, silent, heard, heard_history, refused.value

    text_only, seen, seen_history, silent, heard, heard_history, refused = asyncio.run(main())
    assert seen.usage["input_tokens"] > text_only.usage["input_tokens"]  # the image's tokens were read
    assert heard.usage["input_tokens"] > silent.usage["input_tokens"]  # and the clip's
    assert any(part.get("type") == "image" for part in seen_history[0]["content"])
    assert any(part.get("type") in ("audio", "input_audio") for part in heard_history[0]["content"])
    assert isinstance(refused, ValueError)


def test_seed004_chat_embeddings_and_audio_sessions_over_session(tiny_model, audio_model):
    async def main():
        chat = await ChatSession.new(tiny_model)
        reply = await chat.send("hi", SHORT)
        pieces = [piece async for piece in chat.stream("and now?", SHORT)]
        history = chat.messages
        await chat.close()
        embeddings = await EmbeddingsSession.new(tiny_model)
        vectors = await embeddings.embed(["a cat", "a dog"])
        await embeddings.close()
        with pytest.raises(InvalidRequestError, match="takes audio"):
            await AudioSession.new(tiny_model)
        audio = await AudioSession.new(audio_model)
        heard = await audio.transcribe(speech_like(0.5, seed=4), options=SHORT)
        await audio.close()
        return chat, reply, pieces, history, embeddings, vectors, audio, heard

    chat, reply, pieces, history, embeddings, vectors, audio, heard = asyncio.run(main())
    assert all(isinstance(s, Session) for s in (chat, embeddings, audio))
    assert [m["content"] for m in history if m["role"] == "assistant"] == [reply, "".join(pieces)]
    assert vectors.shape[0] == 2 and abs(float((vectors[0] ** 2).sum()) - 1.0) < 1e-4
    assert isinstance(heard, str)


def test_seed004_one_foundry_local_error_whose_kinds_are_python_exceptions(tiny_model):
    async def main():
        with pytest.raises(FoundryLocalError, match="Session.new takes a loaded model") as not_a_model:
            await Session.new("not a model")
        session = await Session.new(tiny_model)
        with pytest.raises(FoundryLocalError, match="context") as too_long:
            await session.process_request(Request(["word " * 400], SHORT))
        queue = session.create_input_queue()
        reply = asyncio.ensure_future(session.process_request(Request().with_input_queue(queue)))
        queue.push("a start")
        queue.abort()
        with pytest.raises(FoundryLocalError, match="aborted") as aborted:
            await reply
        await session.close()
        return not_a_model.value, too_long.value, aborted.value

    not_a_model, too_long, aborted = asyncio.run(main())
    assert isinstance(not_a_model, ValueError) and isinstance(too_long, ValueError)
    assert isinstance(aborted, RequestCancelledError) and isinstance(aborted, RunCancelled)

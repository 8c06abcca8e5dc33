"""Conversations with images saved to a real SQLite file and resumed by a freshly loaded model (a
new engine, as in a new process): the next turn's greedy reply equals the unbroken session's, and
the image's KV comes from the saved KV, not from reading it again. A tiny random Idefics3 exported
in the test."""

from __future__ import annotations

import asyncio

import numpy as np
import pytest
from vision_helpers import build_idefics3_chat, random_image

from clika_export.api import export
from clika_runtime import modelverse
from clika_runtime.sessions import AsyncChat, SQLiteStore

QUESTION = "What is this?"
FOLLOW_UP = "And the colours?"
GREEDY = {"max_new_tokens": 6, "temperature": 0.0, "ignore_eos": True}


@pytest.fixture(scope="module")
def folder(tmp_path_factory):
    _, hf = build_idefics3_chat(tmp_path_factory.mktemp("idefics3-store-hf"))
    return export(hf, tmp_path_factory.mktemp("idefics3-store") / "model", context_window=512, progress=False)


def transcript(model, messages) -> list[int]:
    """The tokens a conversation's next turn starts with (319: an image's positions)."""
    return model.chat_session(messages=messages).transcript_tokens()


def image_tokens(model, messages) -> int:
    return transcript(model, messages).count(319)


def computed_during(model, work):
    """``work()``'s value and how many tokens the engine computed meanwhile (its stats)."""
    before = model.engine.stats.tokens
    value = work()
    return value, model.engine.stats.tokens - before


def test_an_async_session_with_an_image_resumes_from_the_store(folder, tmp_path):
    image = random_image(80, 120, 31)
    path = tmp_path / "conversations.db"

    async def first_process():
        model = modelverse.load(folder, threads=1)
        try:
            with SQLiteStore(path) as store:
                chat = AsyncChat(model, store=store)
                session = chat.create_session(session_id="pic")
                await session.send(QUESTION, images=[image], **GREEDY)
                await session.save(with_kv=True)
                unbroken = await session.fork().send(FOLLOW_UP, **GREEDY)  # saved under its own id
                return unbroken.result, store.image_count()
        finally:
            model.close()

    async def second_process():
        model = modelverse.load(folder, threads=1)
        try:
            with SQLiteStore(path) as store:
                chat = AsyncChat(model, store=store)
                session = await chat.open("pic", with_kv=True)
                history = session.messages
                result = await session.send(FOLLOW_UP, **GREEDY)
                again = await chat.ask("And the shapes?", id="pic", **GREEDY)  # reopened from the store
                return history, result, again, transcript(model, history)
        finally:
            model.close()

    unbroken, stored_images = asyncio.run(first_process())
    history, resumed, again, saved = asyncio.run(second_process())
    assert stored_images == 1  # the fork's copy of the image is the same row
    assert np.array_equal(history[0]["content"][0]["image"], image)
    assert resumed.result == unbroken
    # The restored KV covers the saved transcript, its image included: only the new turn is read.
    assert saved.count(319) >= 16
    assert resumed.usage["cache_read_input_tokens"] == len(saved)
    assert again.usage["cache_read_input_tokens"] > resumed.usage["input_tokens"] - 3


def test_a_chat_session_with_an_image_restores_its_history_and_kv(folder, tmp_path):
    image = random_image(64, 96, 32)
    store = SQLiteStore(tmp_path / "conversations.db")
    model = modelverse.load(folder, threads=1)
    try:
        chat = model.chat_session()
        chat.send(QUESTION, images=[image], **GREEDY)
        store.save_now("pic", chat.messages)
        saved = chat.save_kv(store.kv_path("pic"))
        transcript = len(chat.transcript_tokens())
        unbroken = chat.send(FOLLOW_UP, **GREEDY)
    finally:
        model.close()
    model = modelverse.load(folder, threads=1)
    try:
        chat = model.chat_session(messages=store.get_now("pic"))
        restored = chat.restore_kv(store.kv_path("pic"))
        reply, computed = computed_during(model, lambda: chat.send(FOLLOW_UP, **GREEDY))
        in_image = image_tokens(model, chat.messages[:2])
    finally:
        model.close()
        store.close()
    assert restored == saved == transcript > in_image >= 16
    assert reply == unbroken
    assert chat.report.cached_tokens >= restored
    # Engine stats: the prompt's computed tokens are the follow-up's few, not the image's.
    assert computed < chat.report.prompt_tokens - in_image


def test_an_image_conversation_without_saved_kv_reads_its_image_again(folder, tmp_path):
    image = random_image(64, 64, 33)
    store = SQLiteStore(tmp_path / "conversations.db")
    model = modelverse.load(folder, threads=1)
    try:
        chat = model.chat_session()
        chat.send(QUESTION, images=[image], **GREEDY)
        store.save_now("pic", chat.messages)
        unbroken = chat.send(FOLLOW_UP, **GREEDY)
    finally:
        model.close()
    model = modelverse.load(folder, threads=1)
    try:
        chat = model.chat_session(messages=store.get_now("pic"))
        assert chat.restore_kv(store.kv_path("pic")) == 0  # no file: logged, read again
        assert chat.send(FOLLOW_UP, **GREEDY) == unbroken
        assert chat.report.cached_tokens == 0
    finally:
        model.close()
        store.close()

"""Conversations with images saved to a real SQLite file and resumed by a freshly loaded model (a
new engine, as in a new process): the next turn's greedy reply equals the unbroken session's, and
the image's KV comes from the saved KV, not from reading it again. A tiny random Idefics3 exported
in the test."""

from __future__ import annotations

import numpy as np
import pytest
import resumed_sessions
from resumed_sessions import GREEDY, loaded, second_process
from vision_helpers import random_image

from clika_runtime.sessions import SQLiteStore

QUESTION = "What is this?"
FOLLOW_UP = "And the colours?"


@pytest.fixture(scope="module")
def folder(idefics3_chat_model):
    return idefics3_chat_model.folder


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


def chat_and_save(folder, store, image, *, with_kv: bool) -> tuple[str, int, int]:
    """A ChatSession's first turn on ``image`` saved as "pic" (with its KV file, or without), and the
    unbroken session's reply to the follow-up, the saved KV's tokens (0 without) and the transcript's."""
    with loaded(folder) as model:
        chat = model.chat_session()
        chat.send(QUESTION, images=[image], **GREEDY)
        store.save_now("pic", chat.messages)
        saved = chat.save_kv(store.kv_path("pic")) if with_kv else 0
        transcript = len(chat.transcript_tokens())
        return chat.send(FOLLOW_UP, **GREEDY), saved, transcript


def test_an_async_session_with_an_image_resumes_from_the_store(folder, tmp_path):
    image = random_image(80, 120, 31)
    path = tmp_path / "conversations.db"
    turns, media = (QUESTION, FOLLOW_UP), {"images": [image]}
    unbroken, stored_images = resumed_sessions.first_process(
        folder, path, "pic", turns, media, GREEDY, with_kv=True, count=SQLiteStore.image_count
    )
    history, resumed, again, saved = second_process(
        folder, path, "pic", FOLLOW_UP, GREEDY, with_kv=True, then="And the shapes?"
    )
    assert stored_images == 1  # the fork's copy of the image is the same row
    assert np.array_equal(history[0]["content"][0]["image"], image)
    assert resumed.result == unbroken
    # The restored KV covers the saved transcript, its image included: only the new turn is read.
    assert saved.count(319) >= 16
    assert resumed.usage["cache_read_input_tokens"] == len(saved)
    assert again.usage["cache_read_input_tokens"] > resumed.usage["input_tokens"] - 3


def test_a_chat_session_with_an_image_restores_its_history_and_kv(folder, tmp_path):
    image = random_image(64, 96, 32)
    with SQLiteStore(tmp_path / "conversations.db") as store:
        unbroken, saved, transcript = chat_and_save(folder, store, image, with_kv=True)
        with loaded(folder) as model:
            chat = model.chat_session(messages=store.get_now("pic"))
            restored = chat.restore_kv(store.kv_path("pic"))
            reply, computed = computed_during(model, lambda: chat.send(FOLLOW_UP, **GREEDY))
            in_image = image_tokens(model, chat.messages[:2])
    assert restored == saved == transcript > in_image >= 16
    assert reply == unbroken
    assert chat.report.cached_tokens >= restored
    # Engine stats: the prompt's computed tokens are the follow-up's few, not the image's.
    assert computed < chat.report.prompt_tokens - in_image


def test_an_image_conversation_without_saved_kv_reads_its_image_again(folder, tmp_path):
    image = random_image(64, 64, 33)
    with SQLiteStore(tmp_path / "conversations.db") as store:
        unbroken, _, _ = chat_and_save(folder, store, image, with_kv=False)
        with loaded(folder) as model:
            chat = model.chat_session(messages=store.get_now("pic"))
            assert chat.restore_kv(store.kv_path("pic")) == 0  # no file: logged, read again
            assert chat.send(FOLLOW_UP, **GREEDY) == unbroken
            assert chat.report.cached_tokens == 0

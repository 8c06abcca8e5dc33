"""Conversations with audio saved to a real SQLite file and resumed by a freshly loaded model (a new
engine, as in a new process): the next turn's greedy reply equals the unbroken session's, and the
clip's KV comes from the saved KV file, not from reading the clip again. A tiny random Qwen2-Audio
exported in the test."""

from __future__ import annotations

import asyncio

import numpy as np
import pytest
import resumed_sessions
from audio_helpers import AUDIO_TOKEN
from audio_signals import speech_like
from resumed_sessions import GREEDY, loaded, second_process

from clika_runtime.media.vision_tower import media_support
from clika_runtime.sessions import AsyncChat, SQLiteStore

QUESTION = "What is said?"
FOLLOW_UP = "And then?"


@pytest.fixture(scope="module")
def folder(qwen2_audio_chat_model):
    return qwen2_audio_chat_model.folder


def first_process(folder, path, wave, *, with_kv: bool):
    """Send a clip, save (with or without KV), and the unbroken session's next reply."""
    turns, media = (QUESTION, FOLLOW_UP), {"audio": [wave]}
    return resumed_sessions.first_process(
        folder, path, "talk", turns, media, GREEDY, with_kv=with_kv, count=SQLiteStore.audio_count
    )


def test_an_async_session_with_audio_resumes_from_the_store_and_its_kv(folder, tmp_path):
    wave = speech_like(2.0, seed=21)
    path = tmp_path / "conversations.db"
    unbroken, stored_clips = first_process(folder, path, wave, with_kv=True)
    history, resumed, _, saved = second_process(folder, path, "talk", FOLLOW_UP, GREEDY, with_kv=True)
    assert stored_clips == 1  # the fork's copy of the clip is the same row
    assert history[0]["content"][0]["type"] == "audio"
    assert np.array_equal(history[0]["content"][0]["audio"], wave)
    assert resumed.result == unbroken
    # The restored KV covers the saved transcript, the clip's positions included: only the new turn is read.
    assert saved.count(AUDIO_TOKEN) == 50  # 2 s: 200 frames, conv stride 2, pooled by 2
    assert resumed.usage["cache_read_input_tokens"] == len(saved)


def test_an_audio_conversation_without_saved_kv_reads_its_clip_again(folder, tmp_path):
    wave = speech_like(1.5, seed=22)
    path = tmp_path / "conversations.db"
    unbroken, _ = first_process(folder, path, wave, with_kv=False)
    # No KV file: logged, and the clip read again.
    _, resumed, _, _ = second_process(folder, path, "talk", FOLLOW_UP, GREEDY, with_kv=True)
    assert resumed.result == unbroken
    assert resumed.usage["cache_read_input_tokens"] == 0


def test_the_folder_reads_audio_as_its_model_says(folder):
    with loaded(folder) as model:
        assert model.supports_audio and not model.supports_vision and not model.supports_video
    assert media_support(folder) == {"vision": False, "video": False, "audio": True}


def test_audio_on_a_session_of_a_model_without_an_audio_graph_is_refused(tiny_model):
    async def run():
        async with AsyncChat(tiny_model) as chat:
            session = chat.create_session(persist=False)
            with pytest.raises(ValueError, match="reads text only; it takes no audio"):
                await session.send(QUESTION, audio=[speech_like(0.5, seed=1)])
            with pytest.raises(ValueError, match="reads text only; it takes no audio"):
                session.stream(QUESTION, audio=[speech_like(0.5, seed=1)])
            assert session.messages == []

    asyncio.run(run())


def test_a_streamed_turn_with_audio_equals_a_chat_session_and_is_kept_in_memory(folder):
    wave = speech_like(1.0, seed=23)
    with loaded(folder) as model:
        expected = model.chat_session().send(QUESTION, audio=[wave], **GREEDY)

        async def run():
            async with AsyncChat(model) as chat:  # the default store: in memory, through its JSON form
                session = chat.create_session(session_id="mem")
                stream = session.stream(QUESTION, audio=[wave], **GREEDY)
                async with stream:
                    text = "".join([e.text async for e in stream if e.type == "text"])
                return text, await chat.store.get("mem")

        text, stored = asyncio.run(run())
    assert text == expected
    assert np.array_equal(stored[0]["content"][0]["audio"], wave)

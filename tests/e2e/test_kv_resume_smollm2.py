"""A saved conversation's KV, resumed in a new process on the real SmolLM2-135M-Instruct (fp32 export).

A conversation kept in a real SQLite store with its KV beside it
(``SQLiteStore.kv_path``) is continued by a fresh Python process: its first
turn finds the whole transcript as its cached prefix and replies, greedy,
exactly as a process that reads the transcript from scratch (cold) and as the
process that saved it. A KV file of another model, a truncated one, one whose
payload or token ids no longer match their sha256, or one that is not a KV file
at all is logged and left out: the turn reads the conversation again and
replies the same.
"""

from __future__ import annotations

import asyncio
import dataclasses
import json
import logging
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from clika_runtime import modelverse
from clika_runtime.chat.kv_resume import kv_layout
from clika_runtime.engine.kv.kv_file import MAGIC, read_kv_file, write_kv_file
from clika_runtime.sessions import SQLiteStore

pytestmark = pytest.mark.slow

GREEDY = {"max_new_tokens": 24, "temperature": 0.0}
TURNS = ["Tell me about the moon in two sentences.", "And what about the sun?"]
NEXT = "Which of the two is bigger?"

# Runs in a fresh process: open the store, continue the conversation (restoring its KV when
# told), print what the turn reports.
RESUME = """
import json, sys
from clika_runtime import modelverse
from clika_runtime.sessions import SQLiteStore
folder, db, cid, mode, dtype, restore, text = sys.argv[1:]
model = modelverse.load(folder, threads=1, kv_cache_mode=mode, kv_cache_dtype=dtype)
store = SQLiteStore(db)
chat = model.chat_session(messages=store.get_now(cid))
restored = chat.restore_kv(store.kv_path(cid)) if restore == "yes" else 0
transcript = len(chat.transcript_tokens())
reply = chat.send(text, max_new_tokens=24, temperature=0.0)
print(json.dumps({"restored": restored, "transcript_tokens": transcript,
                  "cached_tokens": chat.report.report.cached_tokens, "reply": reply}))
model.close()
"""


def resume_in_new_process(folder, db, cid, mode="paged", dtype="float32", *, restore=True) -> dict:
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(sys.path)}
    done = subprocess.run(
        [
            sys.executable,
            "-c",
            RESUME,
            str(folder),
            str(db),
            cid,
            mode,
            dtype,
            "yes" if restore else "no",
            NEXT,
        ],
        capture_output=True,
        text=True,
        env=env,
        timeout=600,
    )
    assert done.returncode == 0, done.stderr
    return json.loads(done.stdout.strip().splitlines()[-1])


def saved_conversation(model, store: SQLiteStore, cid: str) -> tuple[int, str]:
    """Two turns, saved with their KV; returns the KV's tokens and the reply this process gives next."""
    chat = model.chat_session(system="You are a helpful assistant.")
    for text in TURNS:
        chat.send(text, **GREEDY)
    store.save_now(cid, chat.messages)
    saved = chat.save_kv(store.kv_path(cid))
    reply = chat.send(NEXT, **GREEDY)
    assert chat.report.report.cached_tokens == saved  # the saved KV is what this process holds too
    chat.close()
    return saved, reply


@pytest.mark.parametrize(
    ("mode", "dtype"), [("paged", "float32"), ("paged", "int8"), ("continuous", "float32")]
)
def test_a_resumed_conversation_skips_its_prefill_in_a_new_process(smollm2_fp32, tmp_path, mode, dtype):
    db = tmp_path / "conversations.db"
    model = modelverse.load(smollm2_fp32, threads=1, kv_cache_mode=mode, kv_cache_dtype=dtype)
    try:
        with SQLiteStore(db) as store:
            saved, here = saved_conversation(model, store, "moon")
            assert store.kv_path("moon").parent == tmp_path / "conversations.db.kv"
    finally:
        model.close()
    warm = resume_in_new_process(smollm2_fp32, db, "moon", mode, dtype)
    assert warm["restored"] == saved == warm["transcript_tokens"] > 64
    assert warm["cached_tokens"] == warm["transcript_tokens"]
    assert warm["reply"] == here  # the same KV bytes as the process that saved it
    if dtype == "float32":
        cold = resume_in_new_process(smollm2_fp32, db, "moon", mode, dtype, restore=False)
        assert cold["cached_tokens"] == 0
        assert warm["reply"] == cold["reply"]


@pytest.fixture(scope="module")
def saved(smollm2_fp32, tmp_path_factory):
    """A conversation saved with its KV (paged, fp32) and the reply a cold process gives next."""
    db = tmp_path_factory.mktemp("kv") / "conversations.db"
    model = modelverse.load(smollm2_fp32, threads=1, kv_cache_mode="paged")
    try:
        with SQLiteStore(db) as store:
            saved_conversation(model, store, "moon")
            messages = store.get_now("moon")
            kv = store.kv_path("moon")
    finally:
        model.close()
    return messages, kv


@pytest.fixture(scope="module")
def resumer(smollm2_fp32):
    model = modelverse.load(smollm2_fp32, threads=1, kv_cache_mode="paged")
    yield model
    model.close()


def other_model_key(path: Path, model) -> None:
    layout = kv_layout(model, model.engine)
    snapshot = read_kv_file(path, layout)
    write_kv_file(path, snapshot, dataclasses.replace(layout, model_key="f" * 64))


def truncated(path: Path, model) -> None:
    data = path.read_bytes()
    path.write_bytes(data[: len(data) - 4096])


def payload_flipped(path: Path, model) -> None:
    data = bytearray(path.read_bytes())
    data[-100] ^= 0x40
    path.write_bytes(bytes(data))


def tokens_edited(path: Path, model) -> None:
    data = path.read_bytes()
    head = len(MAGIC) + 4
    length = int.from_bytes(data[len(MAGIC) : head], "little")
    header = json.loads(data[head : head + length])
    header["token_ids"][5] += 1  # the sha256 still names the old ids
    encoded = json.dumps(header).encode()
    path.write_bytes(MAGIC + len(encoded).to_bytes(4, "little") + encoded + data[head + length :])


def not_a_kv_file(path: Path, model) -> None:
    path.write_bytes(b"SQLite format 3\x00" + bytes(range(256)) * 8)


@pytest.mark.parametrize(
    "tamper",
    [other_model_key, truncated, payload_flipped, tokens_edited, not_a_kv_file],
    ids=lambda f: f.__name__,
)
def test_a_tampered_kv_file_falls_back_to_reading_the_conversation(saved, resumer, tmp_path, caplog, tamper):
    messages, kv = saved
    cold_chat = resumer.chat_session(messages=messages)
    cold = cold_chat.send(NEXT, **GREEDY)
    assert cold_chat.report.report.cached_tokens == 0
    resumer.close()  # a new engine: nothing of this conversation is cached any more

    copy = tmp_path / "moon.kv"
    copy.write_bytes(kv.read_bytes())
    tamper(copy, resumer)
    chat = resumer.chat_session(messages=messages)
    with caplog.at_level(logging.WARNING, logger="clika_runtime.kv_resume"):
        assert chat.restore_kv(copy) == 0
    assert "saved KV not used" in caplog.text
    assert chat.send(NEXT, **GREEDY) == cold
    assert chat.report.report.cached_tokens == 0
    resumer.close()


def test_kv_of_an_edited_conversation_restores_the_part_it_still_shares(saved, resumer, caplog):
    messages, kv = saved
    edited = [*messages[:-1], {"role": "assistant", "content": "Something else entirely."}]
    chat = resumer.chat_session(messages=edited)
    shared = len(chat.transcript_tokens())
    with caplog.at_level(logging.WARNING, logger="clika_runtime.kv_resume"):
        restored = chat.restore_kv(kv)
    assert 0 < restored < shared
    assert "still starts with" in caplog.text
    chat.send(NEXT, **GREEDY)
    assert chat.report.report.cached_tokens == restored
    resumer.close()


def test_a_kv_file_bigger_than_the_model_can_hold_is_refused_before_reading(saved, resumer, tmp_path):
    _, kv = saved
    layout = kv_layout(resumer, resumer.engine)
    snapshot = read_kv_file(kv, layout)
    small = dataclasses.replace(layout, max_tokens=snapshot.num_tokens - 1)
    with pytest.raises(ValueError, match="this model holds 1 to"):
        read_kv_file(kv, small)
    assert isinstance(snapshot.keys[0], np.ndarray)
    resumer.close()


def test_an_async_session_saves_and_opens_with_its_kv(smollm2_fp32, tmp_path):
    from clika_runtime.sessions import AsyncChat

    db = tmp_path / "conversations.db"

    async def first(model) -> None:
        with SQLiteStore(db) as store:
            chat = AsyncChat(model, store=store, system="You are a helpful assistant.")
            session = chat.create_session(session_id="moon")
            for text in TURNS:
                await session.send(text, **GREEDY)
            await session.save(with_kv=True)
            assert store.kv_path("moon").is_file()

    async def resumed(model) -> tuple[int, str]:
        with SQLiteStore(db) as store:
            session = await AsyncChat(model, store=store).open("moon", with_kv=True)
            result = await session.send(NEXT, **GREEDY)
            return result.usage["cache_read_input_tokens"], result.result

    async def cold(model) -> tuple[int, str]:
        with SQLiteStore(db) as store:
            session = await AsyncChat(model, store=store).open("moon")
            result = await session.send(NEXT, **GREEDY)
            return result.usage["cache_read_input_tokens"], result.result

    saver = modelverse.load(smollm2_fp32, threads=1, kv_cache_mode="paged")
    try:
        asyncio.run(first(saver))
    finally:
        saver.close()
    model = modelverse.load(smollm2_fp32, threads=1, kv_cache_mode="paged")
    try:
        cached, reply = asyncio.run(resumed(model))
        model.close()  # a new engine: nothing cached
        none_cached, cold_reply = asyncio.run(cold(model))
    finally:
        model.close()
    assert cached > 64 and none_cached == 0
    assert reply == cold_reply

"""Conversation stores: the protocol, the in-memory store and the SQLite store.

The SQLite store is checked as a real file: reopened by a new store object,
shared with another process, refused when it is not ours or is newer, and
killed with SIGKILL in the middle of a save loop (the file opens and holds the
last committed transcript, whole).
"""

from __future__ import annotations

import asyncio
import random
import signal
import sqlite3
import subprocess
import sys
import time
from pathlib import Path

import pytest
from stored_media_helpers import STORE_KINDS, opened_store

from clika_runtime.sessions import SCHEMA_VERSION, ConversationStore, SQLiteStore, StoreError

TRANSCRIPT = [
    {"role": "system", "content": "You are terse."},
    {"role": "user", "content": "My name is Ada. ✓"},
    {"role": "assistant", "content": "Noted.", "tool_calls": [{"id": "c1", "type": "function"}]},
]


def run(coro):
    return asyncio.run(coro)


@pytest.fixture(params=STORE_KINDS)
def store(request, tmp_path):
    with opened_store(request.param, tmp_path) as opened:
        yield opened


def test_both_stores_follow_the_protocol(store):
    assert isinstance(store, ConversationStore)


def test_save_get_list_delete(store):
    async def scenario():
        assert await store.get("ada") is None
        await store.save("ada", TRANSCRIPT)
        await store.save("bob", TRANSCRIPT[:2])
        assert await store.get("ada") == TRANSCRIPT
        assert await store.get("bob") == TRANSCRIPT[:2]
        assert await store.list() == ["bob", "ada"]  # the most recently saved first
        await store.save("ada", TRANSCRIPT[:1])  # a save replaces the whole transcript
        assert await store.get("ada") == TRANSCRIPT[:1]
        assert await store.list() == ["ada", "bob"]
        assert await store.delete("ada") is True
        assert await store.delete("ada") is False
        assert await store.get("ada") is None and await store.list() == ["bob"]

    run(scenario())


def test_transcripts_go_in_and_out_as_copies(store):
    async def scenario():
        mine = [dict(m) for m in TRANSCRIPT]
        await store.save("ada", mine)
        mine[1]["content"] = "edited after the save"
        loaded = await store.get("ada")
        loaded.append({"role": "user", "content": "edited after the load"})
        assert await store.get("ada") == TRANSCRIPT

    run(scenario())


@pytest.mark.parametrize(
    ("conversation_id", "messages", "problem"),
    [
        ("", TRANSCRIPT, "non-empty string"),
        (7, TRANSCRIPT, "non-empty string"),
        ("x" * 300, TRANSCRIPT, "at most 256"),
        ("ada", "hello", "list of message dicts"),
        ("ada", [{"content": "no role"}], "string 'role'"),
        ("ada", [{"role": "user", "content": object()}], "JSON values"),
    ],
)
def test_bad_input_is_refused_and_leaves_the_saved_transcript(store, conversation_id, messages, problem):
    async def scenario():
        await store.save("ada", TRANSCRIPT)
        with pytest.raises(ValueError, match=problem):
            await store.save(conversation_id, messages)
        assert await store.get("ada") == TRANSCRIPT

    run(scenario())


def test_sqlite_store_is_a_versioned_wal_file_that_a_new_store_reopens(tmp_path):
    path = tmp_path / "conversations.db"
    with SQLiteStore(path) as first:
        run(first.save("ada", TRANSCRIPT))
    with SQLiteStore(path) as second:
        assert run(second.get("ada")) == TRANSCRIPT
    raw = sqlite3.connect(path)
    assert raw.execute("PRAGMA journal_mode").fetchone()[0] == "wal"
    assert raw.execute("PRAGMA user_version").fetchone()[0] == SCHEMA_VERSION
    raw.close()


def test_sqlite_store_refuses_a_newer_schema_and_other_databases(tmp_path):
    newer = tmp_path / "newer.db"
    SQLiteStore(newer).close()
    raw = sqlite3.connect(newer)
    raw.execute(f"PRAGMA user_version = {SCHEMA_VERSION + 1}")
    raw.commit()
    raw.close()
    with pytest.raises(StoreError, match="a newer runtime wrote it"):
        SQLiteStore(newer)

    foreign = tmp_path / "foreign.db"
    raw = sqlite3.connect(foreign)
    raw.execute("CREATE TABLE conversations (x)")
    raw.commit()
    raw.close()
    with pytest.raises(StoreError, match="another application"):
        SQLiteStore(foreign)

    garbage = tmp_path / "garbage.db"
    garbage.write_bytes(b"this is not a database file, not at all" * 100)
    with pytest.raises(StoreError, match="not a SQLite database"):
        SQLiteStore(garbage)

    with pytest.raises(ValueError, match="InMemoryStore"):
        SQLiteStore(":memory:")


def _foreign_database(path: Path, *, application_id: int = 0) -> None:
    raw = sqlite3.connect(path)
    raw.execute("CREATE TABLE notes (body TEXT)")
    raw.execute("INSERT INTO notes VALUES ('keep me')")
    raw.execute(f"PRAGMA application_id = {application_id}")
    raw.commit()
    raw.close()


@pytest.mark.parametrize("application_id", [0, 0x12345678])
def test_a_foreign_database_is_refused_before_anything_is_written(tmp_path, application_id):
    foreign = tmp_path / "foreign.db"
    _foreign_database(foreign, application_id=application_id)
    before = foreign.read_bytes()
    with pytest.raises(StoreError, match="another application"):
        SQLiteStore(foreign)
    # Not switched to WAL, no journal left behind, not a byte changed.
    assert foreign.read_bytes() == before
    assert sorted(p.name for p in tmp_path.iterdir()) == ["foreign.db"]
    raw = sqlite3.connect(foreign)
    assert raw.execute("PRAGMA journal_mode").fetchone()[0] == "delete"
    raw.close()


# "[" * 5000: found by the fuzz tier, a row nested past the JSON parser's depth (a RecursionError).
@pytest.mark.parametrize("stored", ["{not json", '{"role": "user"}', "[1, 2]", "[" * 5000])
def test_a_row_that_is_not_a_transcript_is_a_store_error(tmp_path, stored):
    path = tmp_path / "conversations.db"
    with SQLiteStore(path) as store:
        store.save_now("ada", TRANSCRIPT)
        store.save_now("bob", TRANSCRIPT)
    raw = sqlite3.connect(path)
    raw.execute("UPDATE conversations SET messages = ? WHERE id = 'ada'", (stored,))
    raw.commit()
    raw.close()
    with SQLiteStore(path) as store:
        with pytest.raises(StoreError, match="'ada' is not a readable transcript"):
            store.get_now("ada")
        assert store.get_now("bob") == TRANSCRIPT


def test_a_corrupt_page_is_a_store_error(tmp_path):
    path = tmp_path / "conversations.db"
    with SQLiteStore(path) as store:
        for index in range(60):
            store.save_now(f"c{index}", [{"role": "user", "content": "x" * 3000}])
    pristine = path.read_bytes()
    page_size = 4096
    noise = random.Random(0)
    failures = 0
    for page in range(1, len(pristine) // page_size):  # each page but the header's, one at a time
        data = bytearray(pristine)
        for offset in range(page * page_size, (page + 1) * page_size, 7):
            data[offset] = noise.randrange(256)
        path.write_bytes(bytes(data))
        try:
            with SQLiteStore(path) as store:
                store.list_now()
                for index in range(60):
                    store.get_now(f"c{index}")
        except StoreError:
            failures += 1
    assert failures > 0  # the corruption was seen, and always as a StoreError


def test_a_closed_sqlite_store_says_so(tmp_path):
    store = SQLiteStore(tmp_path / "conversations.db")
    store.close()
    with pytest.raises(StoreError, match="is closed"):
        run(store.get("ada"))


SAVE_LOOP = """
import asyncio, sys
from clika_runtime.sessions import SQLiteStore

async def main(path, start):
    store = SQLiteStore(path)
    filler = "x" * 4000
    index = start
    while True:
        # A large transcript whose every message names the save it belongs to.
        messages = [{"role": "user", "content": f"{index}:{k}:" + filler} for k in range(200)]
        messages.append({"role": "assistant", "content": str(index)})
        await store.save("loop", messages)
        print(index, flush=True)  # printed only once the save committed
        index += 1

asyncio.run(main(sys.argv[1], int(sys.argv[2])))
"""


def _kill_during_saves(path: Path, start: int, delay: float) -> int:
    """Run the save loop in a child, SIGKILL it mid-loop; return the last save it reported."""
    child = subprocess.Popen(
        [sys.executable, "-c", SAVE_LOOP, str(path), str(start)], stdout=subprocess.PIPE, text=True
    )
    try:
        for line in child.stdout:
            if int(line) >= start + 5:
                break
        time.sleep(delay)  # land the kill at different points of a save
        child.send_signal(signal.SIGKILL)
        rest = child.stdout.read().split()
    finally:
        child.kill()
        child.wait()
    assert child.returncode == -signal.SIGKILL
    return int(rest[-1]) if rest else int(line)


def test_a_process_killed_mid_save_leaves_the_last_committed_transcript(tmp_path):
    path = tmp_path / "conversations.db"
    start = 0
    for delay in (0.0, 0.013, 0.031):
        last_reported = _kill_during_saves(path, start, delay)
        with SQLiteStore(path) as store:
            messages = run(store.get("loop"))
        saved = int(messages[-1]["content"])
        # The child prints after each commit: what is on disk is that save, or the one after it
        # when the kill fell between its commit and its print. Never a mix of two saves.
        assert saved in (last_reported, last_reported + 1)
        assert len(messages) == 201
        assert all(m["content"].startswith(f"{saved}:{k}:") for k, m in enumerate(messages[:-1]))
        raw = sqlite3.connect(path)
        assert raw.execute("PRAGMA integrity_check").fetchone()[0] == "ok"
        raw.close()
        start = saved + 1

"""The checks every kind of stored media passes (images, audio clips): a round trip, what a store
keeps once, drops with its last use, refuses by name and copies, and an older file migrated.
IMAGES and AUDIO say how each kind looks; each test file brings its own transcript and items, and
the checks run against the real stores."""

from __future__ import annotations

import asyncio
import sqlite3
from collections.abc import Callable
from contextlib import closing
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from stored_media_helpers import media_of, old_schema_file, query_one

from clika_runtime.media.audio_tower import audio_digest
from clika_runtime.media.embedding import image_digest
from clika_runtime.sessions import SCHEMA_VERSION, SQLiteStore


@dataclass(frozen=True)
class StoredKind:
    """A kind of media as a transcript and a SQLite store show it."""

    part: str  # the content part's type and key: "image", "audio"
    digest_key: str  # what a stored part names it by: "image_sha256", "audio_sha256"
    digest: Callable[[np.ndarray], str]  # the prefix cache's key for it
    table: str  # the store's table of items
    limit: str  # the SQLiteStore setting that bounds an item
    count: Callable[[SQLiteStore], int]  # how many items a SQLite store holds

    def turn(self, text: str, *items: Any) -> dict[str, Any]:
        """A user message carrying ``items`` before its text."""
        parts = [{"type": self.part, self.part: item} for item in items]
        return {"role": "user", "content": [*parts, {"type": "text", "text": text}]}


# (part, digest_key, digest, table, limit, count)
IMAGES = StoredKind(
    "image", "image_sha256", image_digest, "media", "max_image_bytes", SQLiteStore.image_count
)
AUDIO = StoredKind("audio", "audio_sha256", audio_digest, "audio", "max_audio_bytes", SQLiteStore.audio_count)


def check_round_trip(store, kind: StoredKind, transcript: list, expected: list, dtype: type) -> list:
    """``transcript`` saved and read back holds ``expected`` (its items of ``kind``, in order) whole,
    as ``dtype`` arrays with the prefix cache's digests; saved again as read back (as a session does
    after its next turn), the same. The transcript read back."""

    async def scenario():
        await store.save("t", transcript)
        back = await store.get("t")
        got = media_of(back, kind.part)
        assert [g.dtype for g in got] == [dtype] * len(expected)
        for ours, theirs in zip(got, expected, strict=True):
            assert np.array_equal(ours, theirs)
        assert [kind.digest(g) for g in got] == [kind.digest(e) for e in expected]
        await store.save("t", back)
        again = media_of(await store.get("t"), kind.part)
        assert all(np.array_equal(a, b) for a, b in zip(again, got, strict=True))
        return back

    return asyncio.run(scenario())


def check_kept_once_and_dropped(path: Path, kind: StoredKind, transcript: list, shared: np.ndarray) -> None:
    """``transcript`` carries ``shared`` in turns 1 and 3 and one more item in turn 3 only: each is
    stored once, named (not inlined) in the transcript, and dropped with its last use."""
    with SQLiteStore(path) as store:
        store.save_now("a", transcript)
        assert kind.count(store) == 2  # ``shared`` twice in "a", once counted
        store.save_now("b", [kind.turn("again", shared)])
        assert kind.count(store) == 2
        assert query_one(path, f"SELECT COUNT(*) FROM {kind.table}") == 2
        stored_text = query_one(path, "SELECT messages FROM conversations WHERE id = 'a'")
        assert kind.digest(shared) in stored_text and f'"{kind.part}":' not in stored_text
        store.save_now("a", transcript[:2])  # the other item is used no more
        assert kind.count(store) == 1
        assert store.delete_now("a") and kind.count(store) == 1  # "b" still uses ``shared``
        assert store.delete_now("b") and kind.count(store) == 0


def check_changed_after_the_save_is_not_changed_in_the_store(
    store, kind: StoredKind, mine: np.ndarray
) -> None:
    asyncio.run(store.save("a", [kind.turn("hi", mine)]))
    kept = mine.copy()
    mine[:] = 0
    assert np.array_equal(media_of(asyncio.run(store.get("a")), kind.part)[0], kept)


def check_over_the_limit_is_refused(
    path: Path, kind: StoredKind, transcript: list, limit: int, big: np.ndarray, problem: str
) -> None:
    """An item over ``limit`` bytes is refused naming its part (``problem``), the saved transcript
    kept; a limit that is no positive integer is refused by name."""
    with SQLiteStore(path, **{kind.limit: limit}) as store:
        store.save_now("a", transcript)
        with pytest.raises(ValueError, match=problem):
            store.save_now("a", [transcript[0], kind.turn("big", big)])
        assert len(media_of(store.get_now("a"), kind.part)) == 3
    with pytest.raises(ValueError, match=f"{kind.limit} must be a positive integer"):
        SQLiteStore(path.with_name("other.db"), **{kind.limit: 0})


def check_a_part_without_its_data_is_refused(store, kind: StoredKind, data: Any, problem: str) -> None:
    with pytest.raises(ValueError, match=problem):
        asyncio.run(store.save("a", [kind.turn("x", data)]))
    assert asyncio.run(store.get("a")) is None


def check_a_digest_alone_needs_it_stored(store, kind: StoredKind, item: np.ndarray, problem: str) -> None:
    """A part may name a stored item by digest alone; one the store lacks is refused (``problem``)."""
    asyncio.run(store.save("a", [kind.turn("x", item)]))
    named = [{"role": "user", "content": [{"type": kind.part, kind.digest_key: kind.digest(item)}]}]
    asyncio.run(store.save("b", named))
    assert np.array_equal(media_of(asyncio.run(store.get("b")), kind.part)[0], item)
    unknown = [{"role": "user", "content": [{"type": kind.part, kind.digest_key: "0" * 64}]}]
    with pytest.raises(ValueError, match=problem):
        asyncio.run(store.save("c", unknown))


def check_an_old_file_migrates(
    path: Path, version: int, kind: StoredKind, turn: dict, item: np.ndarray
) -> None:
    """A file of schema ``version`` opens with its transcript as it was, takes ``turn`` (carrying
    ``item`` as its first part of ``kind``) and has every table of the newest schema from then on."""
    old_schema_file(path, version)
    with SQLiteStore(path) as store:
        assert store.get_now("old") == [{"role": "user", "content": "hi"}]
        store.save_now("new", [turn])
    assert query_one(path, "PRAGMA user_version") == SCHEMA_VERSION == 3
    with closing(sqlite3.connect(path)) as raw:
        tables = {row[0] for row in raw.execute("SELECT name FROM sqlite_master WHERE type = 'table'")}
    assert tables == {"conversations", "media", "conversation_media", "audio", "conversation_audio"}
    with SQLiteStore(path) as store:
        assert store.list_now() == ["new", "old"]
        assert np.array_equal(media_of(store.get_now("new"), kind.part)[0], item)

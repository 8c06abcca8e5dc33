"""Audio clips in stored conversations: kept once by the prefix cache's sha256, bounded, checked when
read back, and files of schema 2 (no audio tables) migrated when opened. The stores are real (a
SQLite file)."""

from __future__ import annotations

import asyncio
import sqlite3

import numpy as np
import pytest

from clika_runtime import Tensor
from clika_runtime.media.audio_tower import audio_digest
from clika_runtime.sessions import SCHEMA_VERSION, InMemoryStore, SQLiteStore, StoreError


def clip(seed: int, samples: int = 1600) -> np.ndarray:
    return np.random.default_rng(seed).uniform(-0.5, 0.5, samples).astype(np.float32)


def user(text: str, *clips, image=None) -> dict:
    media = [{"type": "image", "image": image}] if image is not None else []
    return {
        "role": "user",
        "content": [*media, *({"type": "audio", "audio": c} for c in clips), {"type": "text", "text": text}],
    }


HELLO, BYE = clip(1), clip(2)
PIXELS = np.random.default_rng(3).integers(0, 256, (8, 8, 3), dtype=np.uint8)
# HELLO rides two turns: it is stored once.
TRANSCRIPT = [
    {"role": "system", "content": "You are terse."},
    user("What is said?", HELLO),
    {"role": "assistant", "content": "Hello."},
    user("And these?", Tensor(HELLO), BYE.astype(np.float64), image=PIXELS),
]


def clips_of(messages) -> list[np.ndarray]:
    return [
        part["audio"]
        for m in messages
        if isinstance(m["content"], list)
        for part in m["content"]
        if part["type"] == "audio"
    ]


@pytest.fixture(params=["memory", "sqlite"])
def store(request, tmp_path):
    if request.param == "memory":
        yield InMemoryStore()
    else:
        with SQLiteStore(tmp_path / "conversations.db") as opened:
            yield opened


def test_clips_go_in_and_come_back_whole_with_the_cache_digest(store):
    async def scenario():
        await store.save("talk", TRANSCRIPT)
        back = await store.get("talk")
        assert back[3]["content"][0]["type"] == "image" and np.array_equal(
            back[3]["content"][0]["image"], PIXELS
        )
        assert back[3]["content"][3] == {"type": "text", "text": "And these?"}
        got = clips_of(back)
        assert [g.dtype for g in got] == [np.float32] * 3
        for ours, theirs in zip(got, [HELLO, HELLO, BYE], strict=True):
            assert np.array_equal(ours, theirs)
        assert [audio_digest(g) for g in got] == [audio_digest(c) for c in (HELLO, HELLO, BYE)]
        await store.save("talk", back)  # read back and saved again, as a session does
        assert all(np.array_equal(a, b) for a, b in zip(clips_of(await store.get("talk")), got, strict=True))

    asyncio.run(scenario())


def test_a_clip_changed_after_the_save_is_not_changed_in_the_store(store):
    mine = clip(4)
    asyncio.run(store.save("a", [user("hi", mine)]))
    kept = mine.copy()
    mine[:] = 0
    assert np.array_equal(clips_of(asyncio.run(store.get("a")))[0], kept)


def test_the_sqlite_store_keeps_each_clip_once_and_drops_unused_ones(tmp_path):
    with SQLiteStore(tmp_path / "c.db") as store:
        store.save_now("a", TRANSCRIPT)
        assert store.audio_count() == 2 and store.image_count() == 1
        store.save_now("b", [user("again", HELLO)])
        assert store.audio_count() == 2
        raw = sqlite3.connect(tmp_path / "c.db")
        stored_text = raw.execute("SELECT messages FROM conversations WHERE id = 'a'").fetchone()[0]
        raw.close()
        assert audio_digest(HELLO) in stored_text and '"audio":' not in stored_text  # named, not inlined
        store.save_now("a", TRANSCRIPT[:2])  # BYE is used no more
        assert store.audio_count() == 1
        assert store.delete_now("a") and store.audio_count() == 1  # "b" still uses HELLO
        assert store.delete_now("b") and store.audio_count() == 0


def test_a_clip_over_the_limit_is_refused_by_name_and_the_transcript_stays(tmp_path):
    with SQLiteStore(tmp_path / "c.db", max_audio_bytes=1600 * 4) as store:
        store.save_now("a", TRANSCRIPT)
        with pytest.raises(
            ValueError, match=r"messages\[1\]\.content\[0\]: the clip is 1601 samples .*max_audio_bytes"
        ):
            store.save_now("a", [TRANSCRIPT[0], user("long", clip(5, 1601))])
        assert len(clips_of(store.get_now("a"))) == 3
    with pytest.raises(ValueError, match="max_audio_bytes must be a positive integer"):
        SQLiteStore(tmp_path / "d.db", max_audio_bytes=0)


@pytest.mark.parametrize(
    ("samples", "problem"),
    [
        (np.zeros((2, 100), np.float32), r"messages\[0\]\.content\[0\]: expected \[S\] float mono"),
        (np.zeros(100, np.int16), r"messages\[0\]\.content\[0\]: dtype int16"),
        (np.full(100, np.inf, np.float32), r"messages\[0\]\.content\[0\]: samples must be finite"),
        ("not samples", r"messages\[0\]\.content\[0\]"),
    ],
)
def test_a_part_that_holds_no_clip_is_refused_by_name(store, samples, problem):
    with pytest.raises(ValueError, match=problem):
        asyncio.run(store.save("a", [user("x", samples)]))
    assert asyncio.run(store.get("a")) is None


def test_a_digest_without_samples_is_refused_unless_stored(store):
    asyncio.run(store.save("a", [user("x", HELLO)]))
    named = [{"role": "user", "content": [{"type": "audio", "audio_sha256": audio_digest(HELLO)}]}]
    asyncio.run(store.save("b", named))  # the store holds HELLO: the part may name it alone
    assert np.array_equal(clips_of(asyncio.run(store.get("b")))[0], HELLO)
    unknown = [{"role": "user", "content": [{"type": "audio", "audio_sha256": "0" * 64}]}]
    with pytest.raises(ValueError, match="audio clip 0000000000000000... without its samples"):
        asyncio.run(store.save("c", unknown))


def test_damaged_audio_rows_are_store_errors_naming_the_conversation(tmp_path):
    path = tmp_path / "c.db"
    with SQLiteStore(path) as store:
        store.save_now("a", [user("x", HELLO)])
        store.save_now("b", [user("y", BYE)])
        store.save_now("c", [user("z", clip(6))])
    raw = sqlite3.connect(path)
    raw.execute("UPDATE audio SET data = ? WHERE sha256 = ?", (b"garbage", audio_digest(HELLO)))
    raw.execute("UPDATE audio SET data = ? WHERE sha256 = ?", (BYE[::-1].tobytes(), audio_digest(BYE)))
    raw.execute("UPDATE audio SET samples = 'many' WHERE sha256 = ?", (audio_digest(clip(6)),))
    raw.commit()
    raw.close()
    with SQLiteStore(path) as store:
        with pytest.raises(StoreError, match="'a': stored audio clip .* do not fill 1600 float32"):
            store.get_now("a")
        with pytest.raises(StoreError, match="'b': stored audio clip .* do not match their sha256"):
            store.get_now("b")
        with pytest.raises(StoreError, match="'c': stored audio clip .* its length 'many'"):
            store.get_now("c")
    with (
        SQLiteStore(path, max_audio_bytes=100) as store,
        pytest.raises(
            StoreError, match="'b': stored audio clip .* 1600 samples, more than the store's 100 bytes"
        ),
    ):
        store.get_now("b")
    raw = sqlite3.connect(path)
    raw.execute("DELETE FROM audio")
    raw.commit()
    raw.close()
    with SQLiteStore(path) as store, pytest.raises(StoreError, match="'a'.*does not hold"):
        store.get_now("a")


def test_a_schema_2_file_opens_and_takes_audio(tmp_path):
    path = tmp_path / "old.db"
    raw = sqlite3.connect(path)
    raw.execute("PRAGMA journal_mode=WAL")
    raw.execute(
        "CREATE TABLE conversations (id TEXT PRIMARY KEY, messages TEXT NOT NULL,"
        " created_at REAL NOT NULL, updated_at REAL NOT NULL)"
    )
    raw.execute("CREATE INDEX conversations_by_update ON conversations (updated_at)")
    raw.execute(
        "CREATE TABLE media (sha256 TEXT PRIMARY KEY, height INTEGER NOT NULL, width INTEGER NOT NULL,"
        " pixels BLOB NOT NULL, created_at REAL NOT NULL)"
    )
    raw.execute(
        "CREATE TABLE conversation_media (conversation_id TEXT NOT NULL, sha256 TEXT NOT NULL,"
        " PRIMARY KEY (conversation_id, sha256)) WITHOUT ROWID"
    )
    raw.execute("CREATE INDEX conversation_media_by_image ON conversation_media (sha256)")
    raw.execute(
        "INSERT INTO conversations VALUES ('old', ?, 1.0, 1.0)", ('[{"role":"user","content":"hi"}]',)
    )
    raw.execute("PRAGMA application_id = 1131178819")  # 0x436C6B43
    raw.execute("PRAGMA user_version = 2")
    raw.commit()
    raw.close()
    with SQLiteStore(path) as store:
        assert store.get_now("old") == [{"role": "user", "content": "hi"}]
        store.save_now("new", [user("x", HELLO, image=PIXELS)])
    raw = sqlite3.connect(path)
    assert raw.execute("PRAGMA user_version").fetchone()[0] == SCHEMA_VERSION == 3
    raw.close()
    with SQLiteStore(path) as store:
        assert store.list_now() == ["new", "old"]
        assert np.array_equal(clips_of(store.get_now("new"))[0], HELLO)

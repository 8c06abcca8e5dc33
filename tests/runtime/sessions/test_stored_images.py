"""Images in stored conversations: kept once by sha256, bounded, checked when read back, and a
schema-1 file (no media tables) migrated when opened. The stores are real (a SQLite file)."""

from __future__ import annotations

import asyncio
import sqlite3

import numpy as np
import pytest

from clika_runtime import Tensor
from clika_runtime.media.vision_tower import image_digest
from clika_runtime.sessions import SCHEMA_VERSION, InMemoryStore, SQLiteStore, StoreError


def pixels(seed: int, height: int = 24, width: int = 40) -> np.ndarray:
    return np.random.default_rng(seed).integers(0, 256, (height, width, 3), dtype=np.uint8)


def user(text: str, *images) -> dict:
    return {
        "role": "user",
        "content": [*({"type": "image", "image": i} for i in images), {"type": "text", "text": text}],
    }


RED, BLUE = pixels(1), pixels(2)
# RED rides two turns: it is stored once.
TRANSCRIPT = [
    {"role": "system", "content": "You are terse."},
    user("What is this?", RED),
    {"role": "assistant", "content": "A picture."},
    user("And these?", Tensor(RED), BLUE),
]


def images_of(messages) -> list[np.ndarray]:
    return [
        part["image"]
        for m in messages
        if isinstance(m["content"], list)
        for part in m["content"]
        if part["type"] == "image"
    ]


@pytest.fixture(params=["memory", "sqlite"])
def store(request, tmp_path):
    if request.param == "memory":
        yield InMemoryStore()
    else:
        with SQLiteStore(tmp_path / "conversations.db") as opened:
            yield opened


def test_images_go_in_and_come_back_whole(store):
    async def scenario():
        await store.save("pics", TRANSCRIPT)
        back = await store.get("pics")
        assert [m["role"] for m in back] == [m["role"] for m in TRANSCRIPT]
        assert back[3]["content"][2] == {"type": "text", "text": "And these?"}
        got = images_of(back)
        assert [g.dtype for g in got] == [np.uint8] * 3
        for ours, theirs in zip(got, [RED, RED, BLUE], strict=True):
            assert np.array_equal(ours, theirs)
        assert image_digest(got[0]) == image_digest(RED)  # the prefix cache's key, unchanged
        # Read back, saved again (as a session does after its next turn): the same transcript.
        await store.save("pics", back)
        assert all(np.array_equal(a, b) for a, b in zip(images_of(await store.get("pics")), got, strict=True))

    asyncio.run(scenario())


def test_an_image_changed_after_the_save_is_not_changed_in_the_store(store):
    mine = pixels(3)
    asyncio.run(store.save("pic", [user("hi", mine)]))
    kept = mine.copy()
    mine[:] = 0
    assert np.array_equal(images_of(asyncio.run(store.get("pic")))[0], kept)


def test_float_pixels_are_stored_as_the_model_reads_them(store):
    floats = RED.astype(np.float32) / 255.0
    asyncio.run(store.save("pic", [user("hi", floats)]))
    assert np.array_equal(images_of(asyncio.run(store.get("pic")))[0], RED)


def test_the_sqlite_store_keeps_each_image_once_and_drops_unused_ones(tmp_path):
    with SQLiteStore(tmp_path / "c.db") as store:
        store.save_now("a", TRANSCRIPT)
        assert store.image_count() == 2  # RED twice in "a", once counted
        store.save_now("b", [user("again", RED)])
        assert store.image_count() == 2
        raw = sqlite3.connect(tmp_path / "c.db")
        assert raw.execute("SELECT COUNT(*) FROM media").fetchone()[0] == 2
        stored_text = raw.execute("SELECT messages FROM conversations WHERE id = 'a'").fetchone()[0]
        raw.close()
        assert image_digest(RED) in stored_text and '"image":' not in stored_text  # named, not inlined
        store.save_now("a", TRANSCRIPT[:2])  # BLUE is used no more
        assert store.image_count() == 1
        assert store.delete_now("a") and store.image_count() == 1  # "b" still uses RED
        assert store.delete_now("b") and store.image_count() == 0


def test_an_image_over_the_limit_is_refused_by_name_and_the_transcript_stays(tmp_path):
    with SQLiteStore(tmp_path / "c.db", max_image_bytes=24 * 40 * 3) as store:
        store.save_now("a", TRANSCRIPT)
        with pytest.raises(
            ValueError, match=r"messages\[1\]\.content\[0\]: the image is 41 x 24 .*max_image_bytes"
        ):
            store.save_now("a", [TRANSCRIPT[0], user("big", pixels(4, 24, 41))])
        assert len(images_of(store.get_now("a"))) == 3
    with pytest.raises(ValueError, match="max_image_bytes must be a positive integer"):
        SQLiteStore(tmp_path / "d.db", max_image_bytes=0)


@pytest.mark.parametrize(
    ("image", "problem"),
    [
        (np.zeros((4, 4), np.uint8), r"messages\[0\]\.content\[0\]: expected an \[H, W, 3\]"),
        (np.zeros((4, 4, 3), np.int32), r"messages\[0\]\.content\[0\]: dtype int32"),
        ("not pixels", r"messages\[0\]\.content\[0\]"),
    ],
)
def test_a_part_that_holds_no_pixels_is_refused_by_name(store, image, problem):
    with pytest.raises(ValueError, match=problem):
        asyncio.run(store.save("a", [user("x", image)]))
    assert asyncio.run(store.get("a")) is None


def test_a_digest_without_pixels_is_refused_unless_stored(store):
    saved = [user("x", RED)]
    asyncio.run(store.save("a", saved))
    named = [{"role": "user", "content": [{"type": "image", "image_sha256": image_digest(RED)}]}]
    asyncio.run(store.save("b", named))  # the store holds RED: the part may name it alone
    assert np.array_equal(images_of(asyncio.run(store.get("b")))[0], RED)
    unknown = [{"role": "user", "content": [{"type": "image", "image_sha256": "0" * 64}]}]
    with pytest.raises(ValueError, match="without its pixels"):
        asyncio.run(store.save("c", unknown))


def test_damaged_image_rows_are_store_errors_naming_the_conversation(tmp_path):
    path = tmp_path / "c.db"
    with SQLiteStore(path) as store:
        store.save_now("a", [user("x", RED)])
        store.save_now("b", [user("y", BLUE)])
    raw = sqlite3.connect(path)
    raw.execute("UPDATE media SET pixels = ? WHERE sha256 = ?", (b"garbage", image_digest(RED)))
    raw.execute("UPDATE media SET width = width + 1 WHERE sha256 = ?", (image_digest(BLUE),))
    raw.commit()
    raw.close()
    with SQLiteStore(path) as store:
        with pytest.raises(StoreError, match="'a': stored image .* cannot be read"):
            store.get_now("a")
        with pytest.raises(StoreError, match="'b': stored image .* do not fill"):
            store.get_now("b")
    raw = sqlite3.connect(path)
    raw.execute("DELETE FROM media")
    raw.commit()
    raw.close()
    with SQLiteStore(path) as store:
        with pytest.raises(StoreError, match="'a'.*does not hold"):
            store.get_now("a")


def test_pixels_that_do_not_match_their_digest_are_a_store_error(tmp_path):
    import zlib

    path = tmp_path / "c.db"
    with SQLiteStore(path) as store:
        store.save_now("a", [user("x", RED)])
    raw = sqlite3.connect(path)
    raw.execute("UPDATE media SET pixels = ?", (zlib.compress(BLUE.tobytes()),))
    raw.commit()
    raw.close()
    with SQLiteStore(path) as store, pytest.raises(StoreError, match="do not match their sha256"):
        store.get_now("a")


def _schema_1_file(path) -> None:
    """A store as the first schema wrote it: one conversations table, no media tables."""
    raw = sqlite3.connect(path)
    raw.execute("PRAGMA journal_mode=WAL")
    raw.execute(
        "CREATE TABLE conversations (id TEXT PRIMARY KEY, messages TEXT NOT NULL,"
        " created_at REAL NOT NULL, updated_at REAL NOT NULL)"
    )
    raw.execute("CREATE INDEX conversations_by_update ON conversations (updated_at)")
    raw.execute(
        "INSERT INTO conversations VALUES ('old', ?, 1.0, 1.0)", ('[{"role":"user","content":"hi"}]',)
    )
    raw.execute("PRAGMA application_id = 1131178819")  # 0x436C6B43
    raw.execute("PRAGMA user_version = 1")
    raw.commit()
    raw.close()


def test_a_schema_1_file_opens_and_takes_images(tmp_path):
    path = tmp_path / "old.db"
    _schema_1_file(path)
    with SQLiteStore(path) as store:
        assert store.get_now("old") == [{"role": "user", "content": "hi"}]
        store.save_now("new", [user("x", RED)])
    raw = sqlite3.connect(path)
    assert raw.execute("PRAGMA user_version").fetchone()[0] == SCHEMA_VERSION == 3
    tables = {row[0] for row in raw.execute("SELECT name FROM sqlite_master WHERE type = 'table'")}
    raw.close()
    assert tables == {"conversations", "media", "conversation_media", "audio", "conversation_audio"}
    with SQLiteStore(path) as store:
        assert store.list_now() == ["new", "old"]
        assert np.array_equal(images_of(store.get_now("new"))[0], RED)


def test_a_video_part_is_stored_as_its_frames(store):
    frames = np.stack([RED, BLUE, RED])  # RED twice: one row
    times = np.array([0.0, 0.5, 1.25])
    video = {
        "role": "user",
        "content": [{"type": "video", "video": (frames, times)}, {"type": "text", "text": "?"}],
    }
    asyncio.run(store.save("clip", [video]))
    [part, text] = asyncio.run(store.get("clip"))[0]["content"]
    got_frames, got_times = part["video"]
    assert part["type"] == "video" and text == {"type": "text", "text": "?"}
    assert np.array_equal(got_frames, frames) and got_times.dtype == np.float64
    assert np.array_equal(got_times, times)
    if isinstance(store, SQLiteStore):
        assert store.image_count() == 2
    with pytest.raises(ValueError, match=r"messages\[0\]\.content\[0\]: timestamps must be"):
        asyncio.run(
            store.save(
                "bad", [{"role": "user", "content": [{"type": "video", "video": (frames, times[::-1])}]}]
            )
        )

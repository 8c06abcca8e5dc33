"""Images in stored conversations: kept once by sha256, bounded, checked when read back, and a
schema-1 file (no media tables) migrated when opened. The stores are real (a SQLite file)."""

from __future__ import annotations

import asyncio
import zlib

import numpy as np
import pytest
import stored_media_checks as checks
from stored_media_checks import IMAGES
from stored_media_helpers import STORE_KINDS, media_of, opened_store, run_sql

from clika_runtime import Tensor
from clika_runtime.media.embedding import image_digest
from clika_runtime.sessions import SQLiteStore, StoreError


def pixels(seed: int, height: int = 24, width: int = 40) -> np.ndarray:
    return np.random.default_rng(seed).integers(0, 256, (height, width, 3), dtype=np.uint8)


user = IMAGES.turn  # a user message carrying images before its text


RED, BLUE = pixels(1), pixels(2)
# RED rides two turns: it is stored once.
TRANSCRIPT = [
    {"role": "system", "content": "You are terse."},
    user("What is this?", RED),
    {"role": "assistant", "content": "A picture."},
    user("And these?", Tensor(RED), BLUE),
]


@pytest.fixture(params=STORE_KINDS)
def store(request, tmp_path):
    with opened_store(request.param, tmp_path) as opened:
        yield opened


def test_images_go_in_and_come_back_whole(store):
    back = checks.check_round_trip(store, IMAGES, TRANSCRIPT, [RED, RED, BLUE], np.uint8)
    assert [m["role"] for m in back] == [m["role"] for m in TRANSCRIPT]
    assert back[3]["content"][2] == {"type": "text", "text": "And these?"}


def test_an_image_changed_after_the_save_is_not_changed_in_the_store(store):
    checks.check_changed_after_the_save_is_not_changed_in_the_store(store, IMAGES, pixels(3))


def test_float_pixels_are_stored_as_the_model_reads_them(store):
    floats = RED.astype(np.float32) / 255.0
    asyncio.run(store.save("pic", [user("hi", floats)]))
    assert np.array_equal(media_of(asyncio.run(store.get("pic")), "image")[0], RED)


def test_the_sqlite_store_keeps_each_image_once_and_drops_unused_ones(tmp_path):
    checks.check_kept_once_and_dropped(tmp_path / "c.db", IMAGES, TRANSCRIPT, RED)


def test_an_image_over_the_limit_is_refused_by_name_and_the_transcript_stays(tmp_path):
    problem = r"messages\[1\]\.content\[0\]: the image is 41 x 24 .*max_image_bytes"
    checks.check_over_the_limit_is_refused(
        tmp_path / "c.db", IMAGES, TRANSCRIPT, 24 * 40 * 3, pixels(4, 24, 41), problem
    )


@pytest.mark.parametrize(
    ("image", "problem"),
    [
        (np.zeros((4, 4), np.uint8), r"messages\[0\]\.content\[0\]: expected an \[H, W, 3\]"),
        (np.zeros((4, 4, 3), np.int32), r"messages\[0\]\.content\[0\]: dtype int32"),
        ("not pixels", r"messages\[0\]\.content\[0\]"),
    ],
)
def test_a_part_that_holds_no_pixels_is_refused_by_name(store, image, problem):
    checks.check_a_part_without_its_data_is_refused(store, IMAGES, image, problem)


def test_a_digest_without_pixels_is_refused_unless_stored(store):
    checks.check_a_digest_alone_needs_it_stored(store, IMAGES, RED, "without its pixels")


def test_damaged_image_rows_are_store_errors_naming_the_conversation(tmp_path):
    path = tmp_path / "c.db"
    with SQLiteStore(path) as store:
        store.save_now("a", [user("x", RED)])
        store.save_now("b", [user("y", BLUE)])
    run_sql(
        path,
        ("UPDATE media SET pixels = ? WHERE sha256 = ?", (b"garbage", image_digest(RED))),
        ("UPDATE media SET width = width + 1 WHERE sha256 = ?", (image_digest(BLUE),)),
    )
    with SQLiteStore(path) as store:
        with pytest.raises(StoreError, match="'a': stored image .* cannot be read"):
            store.get_now("a")
        with pytest.raises(StoreError, match="'b': stored image .* do not fill"):
            store.get_now("b")
    run_sql(path, "DELETE FROM media")
    with SQLiteStore(path) as store:
        with pytest.raises(StoreError, match="'a'.*does not hold"):
            store.get_now("a")


def test_pixels_that_do_not_match_their_digest_are_a_store_error(tmp_path):
    path = tmp_path / "c.db"
    with SQLiteStore(path) as store:
        store.save_now("a", [user("x", RED)])
    run_sql(path, ("UPDATE media SET pixels = ?", (zlib.compress(BLUE.tobytes()),)))
    with SQLiteStore(path) as store, pytest.raises(StoreError, match="do not match their sha256"):
        store.get_now("a")


def test_a_schema_1_file_opens_and_takes_images(tmp_path):
    checks.check_an_old_file_migrates(tmp_path / "old.db", 1, IMAGES, user("x", RED), RED)


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

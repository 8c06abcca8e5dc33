"""Audio clips in stored conversations: kept once by the prefix cache's sha256, bounded, checked when
read back, and files of schema 2 (no audio tables) migrated when opened. The stores are real (a
SQLite file)."""

from __future__ import annotations

import numpy as np
import pytest
import stored_media_checks as checks
from stored_media_checks import AUDIO
from stored_media_helpers import STORE_KINDS, opened_store, run_sql

from clika_runtime import Tensor
from clika_runtime.media.audio_tower import audio_digest
from clika_runtime.sessions import SQLiteStore, StoreError


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


@pytest.fixture(params=STORE_KINDS)
def store(request, tmp_path):
    with opened_store(request.param, tmp_path) as opened:
        yield opened


def test_clips_go_in_and_come_back_whole_with_the_cache_digest(store):
    back = checks.check_round_trip(store, AUDIO, TRANSCRIPT, [HELLO, HELLO, BYE], np.float32)
    assert back[3]["content"][0]["type"] == "image" and np.array_equal(back[3]["content"][0]["image"], PIXELS)
    assert back[3]["content"][3] == {"type": "text", "text": "And these?"}


def test_a_clip_changed_after_the_save_is_not_changed_in_the_store(store):
    checks.check_changed_after_the_save_is_not_changed_in_the_store(store, AUDIO, clip(4))


def test_the_sqlite_store_keeps_each_clip_once_and_drops_unused_ones(tmp_path):
    checks.check_kept_once_and_dropped(tmp_path / "c.db", AUDIO, TRANSCRIPT, HELLO)
    with SQLiteStore(tmp_path / "c.db") as store:
        store.save_now("a", TRANSCRIPT)
        assert store.audio_count() == 2 and store.image_count() == 1  # each kind in its own table


def test_a_clip_over_the_limit_is_refused_by_name_and_the_transcript_stays(tmp_path):
    problem = r"messages\[1\]\.content\[0\]: the clip is 1601 samples .*max_audio_bytes"
    checks.check_over_the_limit_is_refused(
        tmp_path / "c.db", AUDIO, TRANSCRIPT, 1600 * 4, clip(5, 1601), problem
    )


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
    checks.check_a_part_without_its_data_is_refused(store, AUDIO, samples, problem)


def test_a_digest_without_samples_is_refused_unless_stored(store):
    checks.check_a_digest_alone_needs_it_stored(
        store, AUDIO, HELLO, "audio clip 0000000000000000... without its samples"
    )


def test_damaged_audio_rows_are_store_errors_naming_the_conversation(tmp_path):
    path = tmp_path / "c.db"
    with SQLiteStore(path) as store:
        store.save_now("a", [user("x", HELLO)])
        store.save_now("b", [user("y", BYE)])
        store.save_now("c", [user("z", clip(6))])
    run_sql(
        path,
        ("UPDATE audio SET data = ? WHERE sha256 = ?", (b"garbage", audio_digest(HELLO))),
        ("UPDATE audio SET data = ? WHERE sha256 = ?", (BYE[::-1].tobytes(), audio_digest(BYE))),
        ("UPDATE audio SET samples = 'many' WHERE sha256 = ?", (audio_digest(clip(6)),)),
    )
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
    run_sql(path, "DELETE FROM audio")
    with SQLiteStore(path) as store, pytest.raises(StoreError, match="'a'.*does not hold"):
        store.get_now("a")


def test_a_schema_2_file_opens_and_takes_audio(tmp_path):
    checks.check_an_old_file_migrates(tmp_path / "old.db", 2, AUDIO, user("x", HELLO, image=PIXELS), HELLO)

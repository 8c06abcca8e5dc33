"""The SQLite conversation store's rows, fuzzed: transcripts and media rows another process (or a
damaged disk) left behind, and transcripts handed to ``save``.

Property: a read gives the transcript or a StoreError naming the conversation;
a save is refused with a ValueError or reads back exactly as saved (no state
lost); the store stays usable after every case.
"""

from __future__ import annotations

import sqlite3
import tempfile
from pathlib import Path

import numpy as np
from fuzz_budget import budget, count
from hypothesis import given
from hypothesis import strategies as st

from clika_runtime.sessions.stores.conversation_store import StoreError
from clika_runtime.sessions.stores.sqlite import SQLiteStore

IMAGE = np.arange(2 * 3 * 3, dtype=np.uint8).reshape(2, 3, 3)
SAVED = [
    {"role": "user", "content": [{"type": "text", "text": "look"}, {"type": "image", "image": IMAGE}]},
    {"role": "assistant", "content": "a picture"},
]


ROOT = Path(tempfile.mkdtemp(prefix="clika-fuzz-store-"))
_STORES = iter(range(10**9))


def fresh_store() -> SQLiteStore:
    """A new store file per case, so no case reads what an earlier one damaged."""
    return SQLiteStore(ROOT / f"c{next(_STORES)}.db")


cells = st.one_of(
    st.none(), st.integers(-(2**63), 2**63 - 1), st.floats(), st.text(max_size=40), st.binary(max_size=40),
    st.sampled_from(['[{"role": "user", "content": "hi"}]', "[]", "{}", '[{"role": 1}]', "[" * 5000,
                     '[{"role": "user", "content": [{"type": "image", "sha256": "00"}]}]', "null"]),
)  # fmt: skip
COLUMNS = [("conversations", "messages"), ("media", "height"), ("media", "width"), ("media", "pixels"),
           ("media", "sha256"), ("conversation_media", "sha256")]  # fmt: skip


@given(changes=st.lists(st.tuples(st.sampled_from(COLUMNS), cells), min_size=1, max_size=3))
@budget(500)
def test_damaged_rows_read_back_or_are_a_store_error(changes):
    count("SQLite store rows (damaged)")
    with fresh_store() as store:
        _damage_and_read(store, changes)


def _damage_and_read(store: SQLiteStore, changes) -> None:
    store.save_now("c", SAVED)
    with sqlite3.connect(store.path) as conn:
        for (table, column), value in changes:
            try:
                conn.execute(f"UPDATE {table} SET {column} = ?", (value,))
            except sqlite3.IntegrityError:  # a NOT NULL or key column refusing the value: not a row
                pass
    try:
        messages = store.get_now("c")
    except StoreError as error:
        assert "'c'" in str(error) or str(store.path) in str(error)
    else:
        assert messages is None or isinstance(messages, list)
    assert "c" in store.list_now()
    store.save_now("d", [{"role": "user", "content": "after"}])  # the store goes on
    assert store.get_now("d") == [{"role": "user", "content": "after"}]


texts = st.text(max_size=20)
parts = st.one_of(
    st.fixed_dictionaries({"type": st.just("text"), "text": texts}),
    st.fixed_dictionaries({"type": st.sampled_from(["text", "image", "audio", "x"])}),
    st.dictionaries(st.text(max_size=4), texts, max_size=2),
    st.just({"type": "image", "image": IMAGE}),
)
messages = st.lists(
    st.fixed_dictionaries(
        {"role": st.sampled_from(["system", "user", "assistant", "tool"]) | texts,
         "content": texts | st.lists(parts, max_size=3) | st.none() | st.integers()},
        optional={"tool_calls": st.lists(st.dictionaries(texts, texts, max_size=2), max_size=2),
                  "name": texts},
    ),
    max_size=4,
)  # fmt: skip


@given(transcript=messages, conversation_id=st.sampled_from(["a", "b-1"]) | st.text(max_size=8))
@budget(500)
def test_saved_transcripts_read_back_as_saved_or_are_refused(transcript, conversation_id):
    count("SQLite store rows (saved transcripts)")
    with fresh_store() as store:
        try:
            store.save_now(conversation_id, transcript)
        except ValueError as error:
            assert str(error)
            return
        back = store.get_now(conversation_id)
    assert _comparable(back) == _comparable(transcript)


def _comparable(value):
    if isinstance(value, np.ndarray):
        return ("array", value.shape, value.tobytes())
    if isinstance(value, dict):
        return {key: _comparable(item) for key, item in value.items()}
    if isinstance(value, list | tuple):
        return [_comparable(item) for item in value]
    return value

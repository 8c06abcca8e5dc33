"""A SQLite conversation store's audio clips: one row per clip (by sha256), linked to the conversations
that use it, dropped with its last use.

The sibling of ``sqlite_media`` (images) for clips, in tables of their own
(schema 3), run inside the store's transactions: a save links a conversation
to exactly the clips its transcript names, writing the samples of those the
file lacks, and deletes the clips it stopped using that no other conversation
uses. Reading checks every row (``stored_audio.samples_from_record``).
"""

from __future__ import annotations

import sqlite3
from collections.abc import Mapping

import numpy as np

from clika_runtime.sessions.stored_audio import samples_from_record, samples_record

# The tables of schema 3: the samples, and which conversation uses which clip.
AUDIO_TABLES = (
    "CREATE TABLE audio ("
    " sha256 TEXT PRIMARY KEY,"
    " samples INTEGER NOT NULL,"
    " data BLOB NOT NULL,"
    " created_at REAL NOT NULL)",
    "CREATE TABLE conversation_audio ("
    " conversation_id TEXT NOT NULL,"
    " sha256 TEXT NOT NULL,"
    " PRIMARY KEY (conversation_id, sha256)) WITHOUT ROWID",
    "CREATE INDEX conversation_audio_by_clip ON conversation_audio (sha256)",
)


def linked_audio(conn: sqlite3.Connection, key: str) -> set[str]:
    """The clip digests conversation ``key`` is linked to."""
    rows = conn.execute("SELECT sha256 FROM conversation_audio WHERE conversation_id = ?", (key,))
    return {row[0] for row in rows.fetchall()}


def link_audio(
    conn: sqlite3.Connection, key: str, named: list[str], clips: Mapping[str, np.ndarray], now: float
) -> None:
    """Store the clips the file lacks (each once) and link ``key`` to exactly the ``named`` ones;
    a digest named without its samples must already be stored (else ValueError)."""
    before = linked_audio(conn, key)
    conn.execute("DELETE FROM conversation_audio WHERE conversation_id = ?", (key,))
    for digest in named:
        held = conn.execute("SELECT 1 FROM audio WHERE sha256 = ?", (digest,)).fetchone()
        if held is None and digest not in clips:
            raise ValueError(
                f"messages name audio clip {digest[:16]}... without its samples, and the store holds none"
            )
        if held is None:
            count, data = samples_record(clips[digest])
            conn.execute(
                "INSERT INTO audio (sha256, samples, data, created_at) VALUES (?, ?, ?, ?)",
                (digest, count, data, now),
            )
        conn.execute("INSERT INTO conversation_audio (conversation_id, sha256) VALUES (?, ?)", (key, digest))
    _drop_unused(conn, before - set(named))


def unlink_audio(conn: sqlite3.Connection, key: str) -> None:
    """Forget ``key``'s links, and the clips no other conversation uses."""
    before = linked_audio(conn, key)
    conn.execute("DELETE FROM conversation_audio WHERE conversation_id = ?", (key,))
    _drop_unused(conn, before)


def _drop_unused(conn: sqlite3.Connection, digests: set[str]) -> None:
    for digest in digests:
        conn.execute(
            "DELETE FROM audio WHERE sha256 = ? AND NOT EXISTS (SELECT 1 FROM conversation_audio WHERE sha256 = ?)",
            (digest, digest),
        )


def read_audio(conn: sqlite3.Connection, digests: list[str], max_bytes: int) -> dict[str, np.ndarray]:
    """The stored samples of ``digests`` (those the file holds), each checked; a damaged row raises
    StoredAudioError naming it."""
    found: dict[str, np.ndarray] = {}
    for digest in digests:
        row = conn.execute("SELECT samples, data FROM audio WHERE sha256 = ?", (digest,)).fetchone()
        if row is not None:
            found[digest] = samples_from_record(digest, *row, max_bytes=max_bytes)
    return found

"""A SQLite conversation store's images: one row per image (by sha256), linked to the conversations
that use it, dropped with its last use.

The functions run inside the store's transactions (``SQLiteStore``): a save
links a conversation to exactly the images its transcript names, writing the
pixels of those the file lacks (so saving after every turn compresses each
image once), and deletes the images it stopped using that no other
conversation uses. Reading checks every row (``stored_media.pixels_from_record``).
"""

from __future__ import annotations

import sqlite3
from collections.abc import Mapping

import numpy as np

from clika_runtime.sessions.stored_media import pixels_from_record, pixels_record

# The tables of schema 2: the pixels, and which conversation uses which image.
MEDIA_TABLES = (
    "CREATE TABLE media ("
    " sha256 TEXT PRIMARY KEY,"
    " height INTEGER NOT NULL,"
    " width INTEGER NOT NULL,"
    " pixels BLOB NOT NULL,"
    " created_at REAL NOT NULL)",
    "CREATE TABLE conversation_media ("
    " conversation_id TEXT NOT NULL,"
    " sha256 TEXT NOT NULL,"
    " PRIMARY KEY (conversation_id, sha256)) WITHOUT ROWID",
    "CREATE INDEX conversation_media_by_image ON conversation_media (sha256)",
)


def linked_images(conn: sqlite3.Connection, key: str) -> set[str]:
    """The digests conversation ``key`` is linked to."""
    rows = conn.execute("SELECT sha256 FROM conversation_media WHERE conversation_id = ?", (key,))
    return {row[0] for row in rows.fetchall()}


def link_images(
    conn: sqlite3.Connection, key: str, named: list[str], images: Mapping[str, np.ndarray], now: float
) -> None:
    """Store the images the file lacks (each once) and link ``key`` to exactly the ``named`` ones;
    a digest named without its pixels must already be stored (else ValueError)."""
    before = linked_images(conn, key)
    conn.execute("DELETE FROM conversation_media WHERE conversation_id = ?", (key,))
    for digest in named:
        held = conn.execute("SELECT 1 FROM media WHERE sha256 = ?", (digest,)).fetchone()
        if held is None and digest not in images:
            raise ValueError(
                f"messages name image {digest[:16]}... without its pixels, and the store holds none"
            )
        if held is None:
            height, width, data = pixels_record(images[digest])
            conn.execute(
                "INSERT INTO media (sha256, height, width, pixels, created_at) VALUES (?, ?, ?, ?, ?)",
                (digest, height, width, data, now),
            )
        conn.execute("INSERT INTO conversation_media (conversation_id, sha256) VALUES (?, ?)", (key, digest))
    drop_unused(conn, before - set(named))


def unlink_images(conn: sqlite3.Connection, key: str) -> None:
    """Forget ``key``'s links, and the images no other conversation uses."""
    before = linked_images(conn, key)
    conn.execute("DELETE FROM conversation_media WHERE conversation_id = ?", (key,))
    drop_unused(conn, before)


def drop_unused(conn: sqlite3.Connection, digests: set[str]) -> None:
    """Delete those of ``digests`` no conversation links to any more."""
    for digest in digests:
        conn.execute(
            "DELETE FROM media WHERE sha256 = ? AND NOT EXISTS (SELECT 1 FROM conversation_media WHERE sha256 = ?)",
            (digest, digest),
        )


def read_images(conn: sqlite3.Connection, digests: list[str], max_bytes: int) -> dict[str, np.ndarray]:
    """The stored pixels of ``digests`` (those the file holds), each checked; a damaged row raises
    StoredImageError naming it."""
    found: dict[str, np.ndarray] = {}
    for digest in digests:
        row = conn.execute("SELECT height, width, pixels FROM media WHERE sha256 = ?", (digest,)).fetchone()
        if row is not None:
            found[digest] = pixels_from_record(digest, *row, max_bytes=max_bytes)
    return found

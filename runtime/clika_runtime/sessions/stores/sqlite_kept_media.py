"""One kind of media in a SQLite conversation store: a row per item (by sha256), linked to the
conversations that use it, dropped with its last use.

Images (``sqlite_media``) and audio clips (``sqlite_audio``) are kept the same
way, each in tables of its own described by a :class:`KeptMedia`. The
functions run inside the store's transactions (``SQLiteStore``): a save links a
conversation to exactly the items its transcript names, writing the data of
those the file lacks (so saving after every turn writes each item once), and
deletes the items it stopped using that no other conversation uses. Reading
checks every row (the kind's ``from_record``).
"""

from __future__ import annotations

import sqlite3
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

import numpy as np


@dataclass(frozen=True)
class KeptMedia:
    """Where a kind of media sits in the file and how its rows are written and read back.

    The names are the schema's own constants (never input), so they are safe in SQL text.
    """

    table: str  # one row per item: sha256, the record's columns, created_at
    links: str  # (conversation_id, sha256): which conversation uses which item
    columns: tuple[str, ...]  # the columns ``to_record`` fills and ``from_record`` reads, in order
    noun: str  # how messages name an item ("image", "audio clip")
    payload: str  # what an item holds ("pixels", "samples")
    to_record: Callable[[np.ndarray], tuple[Any, ...]]
    from_record: Callable[..., np.ndarray]  # (digest, *columns, max_bytes=...): checked, or raises


def linked(conn: sqlite3.Connection, kind: KeptMedia, key: str) -> set[str]:
    """The digests of ``kind`` conversation ``key`` is linked to."""
    rows = conn.execute(f"SELECT sha256 FROM {kind.links} WHERE conversation_id = ?", (key,))
    return {row[0] for row in rows.fetchall()}


def link(
    conn: sqlite3.Connection,
    kind: KeptMedia,
    key: str,
    named: list[str],
    items: Mapping[str, np.ndarray],
    now: float,
) -> None:
    """Store the items the file lacks (each once) and link ``key`` to exactly the ``named`` ones;
    a digest named without its data must already be stored (else ValueError)."""
    before = linked(conn, kind, key)
    conn.execute(f"DELETE FROM {kind.links} WHERE conversation_id = ?", (key,))
    columns = ", ".join(("sha256", *kind.columns, "created_at"))
    marks = ", ".join("?" * (len(kind.columns) + 2))
    for digest in named:
        held = conn.execute(f"SELECT 1 FROM {kind.table} WHERE sha256 = ?", (digest,)).fetchone()
        if held is None and digest not in items:
            raise ValueError(
                f"messages name {kind.noun} {digest[:16]}... without its {kind.payload}, and the store holds none"
            )
        if held is None:
            record = kind.to_record(items[digest])
            conn.execute(f"INSERT INTO {kind.table} ({columns}) VALUES ({marks})", (digest, *record, now))
        conn.execute(f"INSERT INTO {kind.links} (conversation_id, sha256) VALUES (?, ?)", (key, digest))
    drop_unused(conn, kind, before - set(named))


def unlink(conn: sqlite3.Connection, kind: KeptMedia, key: str) -> None:
    """Forget ``key``'s links to ``kind``, and the items no other conversation uses."""
    before = linked(conn, kind, key)
    conn.execute(f"DELETE FROM {kind.links} WHERE conversation_id = ?", (key,))
    drop_unused(conn, kind, before)


def drop_unused(conn: sqlite3.Connection, kind: KeptMedia, digests: set[str]) -> None:
    """Delete those of ``digests`` no conversation links to any more."""
    for digest in digests:
        conn.execute(
            f"DELETE FROM {kind.table} WHERE sha256 = ? "
            f"AND NOT EXISTS (SELECT 1 FROM {kind.links} WHERE sha256 = ?)",
            (digest, digest),
        )


def read(
    conn: sqlite3.Connection, kind: KeptMedia, digests: list[str], max_bytes: int
) -> dict[str, np.ndarray]:
    """The stored data of ``digests`` (those the file holds), each checked; a damaged row raises
    the kind's error naming it."""
    query = f"SELECT {', '.join(kind.columns)} FROM {kind.table} WHERE sha256 = ?"
    found: dict[str, np.ndarray] = {}
    for digest in digests:
        row = conn.execute(query, (digest,)).fetchone()
        if row is not None:
            found[digest] = kind.from_record(digest, *row, max_bytes=max_bytes)
    return found

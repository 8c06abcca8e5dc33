"""Shared set-up for the conversation-store tests: each store over a real backing (a dict, a SQLite
file), the media a transcript read back holds, rows changed behind a store's back, and files as
older schemas wrote them."""

from __future__ import annotations

import sqlite3
from collections.abc import Iterator
from contextlib import closing, contextmanager
from pathlib import Path
from typing import Any

from clika_runtime.sessions import InMemoryStore, SQLiteStore

STORE_KINDS = ("memory", "sqlite")

# Written out as the older schemas wrote them (not taken from the runtime): what a migration meets.
_CONVERSATIONS_TABLES = (
    "CREATE TABLE conversations (id TEXT PRIMARY KEY, messages TEXT NOT NULL,"
    " created_at REAL NOT NULL, updated_at REAL NOT NULL)",
    "CREATE INDEX conversations_by_update ON conversations (updated_at)",
)
_MEDIA_TABLES = (
    "CREATE TABLE media (sha256 TEXT PRIMARY KEY, height INTEGER NOT NULL, width INTEGER NOT NULL,"
    " pixels BLOB NOT NULL, created_at REAL NOT NULL)",
    "CREATE TABLE conversation_media (conversation_id TEXT NOT NULL, sha256 TEXT NOT NULL,"
    " PRIMARY KEY (conversation_id, sha256)) WITHOUT ROWID",
    "CREATE INDEX conversation_media_by_image ON conversation_media (sha256)",
)
OLD_SCHEMAS = {1: _CONVERSATIONS_TABLES, 2: _CONVERSATIONS_TABLES + _MEDIA_TABLES}


@contextmanager
def opened_store(kind: str, folder: Path) -> Iterator[InMemoryStore | SQLiteStore]:
    """A fresh store of ``kind`` (one of STORE_KINDS), a SQLite one in a file in ``folder``."""
    if kind == "memory":
        yield InMemoryStore()
    else:
        with SQLiteStore(folder / "conversations.db") as opened:
            yield opened


def media_of(messages: list[dict[str, Any]], kind: str) -> list[Any]:
    """What a transcript's ``kind`` parts ("image", "audio") hold, in order."""
    return [
        part[kind]
        for m in messages
        if isinstance(m["content"], list)
        for part in m["content"]
        if part["type"] == kind
    ]


def run_sql(path: Path, *statements: str | tuple[str, tuple[Any, ...]]) -> None:
    """Run ``statements`` (SQL, or SQL and its parameters) on the file directly and commit."""
    with closing(sqlite3.connect(path)) as raw:
        for statement in statements:
            sql, params = (statement, ()) if isinstance(statement, str) else statement
            raw.execute(sql, params)
        raw.commit()


def query_one(path: Path, sql: str) -> Any:
    """The first column of the first row ``sql`` reads from the file directly."""
    with closing(sqlite3.connect(path)) as raw:
        return raw.execute(sql).fetchone()[0]


def old_schema_file(path: Path, version: int) -> None:
    """A store as schema ``version`` (1: no media tables, 2: no audio tables) wrote it, holding
    ``[{"role": "user", "content": "hi"}]`` under "old"."""
    run_sql(
        path,
        "PRAGMA journal_mode=WAL",
        *OLD_SCHEMAS[version],
        ("INSERT INTO conversations VALUES ('old', ?, 1.0, 1.0)", ('[{"role":"user","content":"hi"}]',)),
        "PRAGMA application_id = 1131178819",  # 0x436C6B43
        f"PRAGMA user_version = {version}",
    )

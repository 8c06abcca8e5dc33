"""SQLiteStore: conversations in one SQLite file, durable across restarts and crashes.

The file runs in WAL mode with ``synchronous=FULL``: a save is one
transaction, so once ``save`` returns the transcript is on disk, and a
process killed mid-save leaves the previous transcript in place (SQLite rolls
the unfinished transaction back when the file is next opened). Several
processes may share a file; a writer waits up to ``timeout`` seconds for
another's transaction.

The schema is versioned with ``PRAGMA user_version`` and the file is marked
with an ``application_id``, so a file from a newer runtime, or a database that
is not a conversation store, is refused with a message saying so instead of
being misread, before anything is written to it. A damaged file (a corrupt page,
a row that is not a transcript) raises ``StoreError``.

Images a transcript's turns carry are kept once each, by their sha256, in the
``media`` table (``stored_media``): the transcript names them, a link
table says which conversations use which, and an image no conversation uses
any more is deleted in the transaction that dropped its last use. Audio clips
are kept the same way in tables of their own (``stored_audio``,
schema 3); ``sqlite_kept_media`` keeps both kinds. A file of an older schema (1: no media tables, 2: no audio tables)
is migrated in place when opened: the tables are added in one transaction,
after the file was inspected read-only.
"""

from __future__ import annotations

import asyncio
import hashlib
import sqlite3
import threading
import time
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Any, TypeVar

from clika_runtime.sessions.stores.conversation_store import (
    StoreError,
    checked_id,
    decode_messages,
    encode_messages,
)
from clika_runtime.sessions.stores.sqlite_audio import AUDIO, AUDIO_TABLES
from clika_runtime.sessions.stores.sqlite_kept_media import link, read, unlink
from clika_runtime.sessions.stores.sqlite_media import IMAGES, MEDIA_TABLES
from clika_runtime.sessions.stores.stored_audio import (
    MAX_STORED_AUDIO_BYTES,
    attach_audio,
    audio_digests,
    detach_audio,
)
from clika_runtime.sessions.stores.stored_media import (
    MAX_STORED_IMAGE_BYTES,
    StoredImageError,
    attach_images,
    detach_images,
    image_digests,
)

SCHEMA_VERSION = 3
APPLICATION_ID = 0x436C6B43  # "ClkC": marks a clika conversation store

# Each schema version's statements, applied in order from a file's version to the newest.
_SCHEMAS = {
    1: (
        "CREATE TABLE conversations ("
        " id TEXT PRIMARY KEY,"
        " messages TEXT NOT NULL,"
        " created_at REAL NOT NULL,"
        " updated_at REAL NOT NULL)",
        "CREATE INDEX conversations_by_update ON conversations (updated_at)",
    ),
    2: MEDIA_TABLES,
    3: AUDIO_TABLES,
}

_T = TypeVar("_T")


class SQLiteStore:
    """A :class:`~clika_runtime.sessions.stores.conversation_store.ConversationStore` in a SQLite file (created when absent).

    ::

        store = SQLiteStore("conversations.db")
        chat = AsyncChat(model, store=store)
        await chat.ask("My name is Ada.", id="ada")   # a later process continues "ada"

    Its methods run the database work on a worker thread, so the event loop
    never waits on the disk. ``close`` releases the file. A transcript's images
    are stored once each by sha256; one larger than ``max_image_bytes`` (its
    uint8 pixels) is refused by the save, naming its part. Its audio clips
    likewise, bounded by ``max_audio_bytes`` (their float32 samples).
    """

    def __init__(
        self,
        path: str | Path,
        *,
        timeout: float = 30.0,
        max_image_bytes: int = MAX_STORED_IMAGE_BYTES,
        max_audio_bytes: int = MAX_STORED_AUDIO_BYTES,
    ) -> None:
        if str(path) == ":memory:" or not str(path):
            raise ValueError("SQLiteStore needs a file path; use InMemoryStore for conversations in memory")
        for name, bound in (("max_image_bytes", max_image_bytes), ("max_audio_bytes", max_audio_bytes)):
            if isinstance(bound, bool) or not isinstance(bound, int) or bound < 1:
                raise ValueError(f"{name} must be a positive integer, got {bound!r}")
        self.path = Path(path)
        self.max_image_bytes = max_image_bytes
        self.max_audio_bytes = max_audio_bytes
        self._lock = threading.Lock()
        try:
            self._conn: sqlite3.Connection | None = sqlite3.connect(
                self.path, timeout=timeout, isolation_level=None, check_same_thread=False
            )
        except sqlite3.Error as exc:
            raise StoreError(f"cannot open the conversation store {self.path}: {exc}") from None
        try:
            self._inspect()
            self._configure()
            self._migrate()
        except BaseException:
            self._conn.close()
            raise

    # -- the ConversationStore protocol ----------------------------------------------------------

    async def get(self, conversation_id: str) -> list[dict[str, Any]] | None:
        return await self._off_loop(self.get_now, conversation_id)

    async def save(self, conversation_id: str, messages: Sequence[Mapping[str, Any]]) -> None:
        await self._off_loop(self.save_now, conversation_id, messages)

    async def list(self) -> list[str]:
        return await self._off_loop(self.list_now)

    async def delete(self, conversation_id: str) -> bool:
        return await self._off_loop(self.delete_now, conversation_id)

    # -- the same, blocking (for code outside an event loop) -------------------------------------

    def get_now(self, conversation_id: str) -> list[dict[str, Any]] | None:
        """``get`` on the calling thread (the transcript and its images read in one snapshot)."""
        key = checked_id(conversation_id)
        return self._read(lambda conn: self._read_conversation(conn, key))

    def save_now(self, conversation_id: str, messages: Sequence[Mapping[str, Any]]) -> None:
        """``save`` on the calling thread: one transaction, durable once it returns."""
        key = checked_id(conversation_id)
        try:
            stored, images = detach_images(messages, self.max_image_bytes)
            stored, clips = detach_audio(stored, self.max_audio_bytes)
        except StoredImageError as exc:
            raise ValueError(str(exc)) from None
        text = encode_messages(stored)
        now = time.time()

        def write(conn: sqlite3.Connection) -> sqlite3.Cursor:
            cursor = conn.execute(
                "INSERT INTO conversations (id, messages, created_at, updated_at) VALUES (?, ?, ?, ?) "
                "ON CONFLICT(id) DO UPDATE SET messages = excluded.messages, updated_at = excluded.updated_at",
                (key, text, now, now),
            )
            # Parts may name a stored image by digest alone (a transcript read back and saved).
            link(conn, IMAGES, key, image_digests(stored), images, now)
            link(conn, AUDIO, key, audio_digests(stored), clips, now)
            return cursor

        self._transaction(write)

    def list_now(self) -> list[str]:
        """``list`` on the calling thread."""
        rows = self._query("SELECT id FROM conversations ORDER BY updated_at DESC, rowid DESC", ())
        return [row[0] for row in rows]

    def delete_now(self, conversation_id: str) -> bool:
        """``delete`` on the calling thread."""
        key = checked_id(conversation_id)

        def forget(conn: sqlite3.Connection) -> sqlite3.Cursor:
            unlink(conn, IMAGES, key)
            unlink(conn, AUDIO, key)
            return conn.execute("DELETE FROM conversations WHERE id = ?", (key,))

        cursor = self._transaction(forget)
        self.kv_path(key).unlink(missing_ok=True)
        return cursor.rowcount > 0

    def kv_path(self, conversation_id: str) -> Path:
        """Where a conversation's saved KV lives: a file in the folder ``<store file>.kv`` beside
        the store, named by the sha256 of the id (``ChatSession.save_kv`` / ``restore_kv``)."""
        name = hashlib.sha256(checked_id(conversation_id).encode()).hexdigest()[:32]
        return self.path.with_name(self.path.name + ".kv") / f"{name}.kv"

    def close(self) -> None:
        """Close the file (later calls raise StoreError)."""
        with self._lock:
            conn, self._conn = self._conn, None
        if conn is not None:
            conn.close()

    def __enter__(self) -> SQLiteStore:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    # -- the machinery ---------------------------------------------------------------------------

    async def _off_loop(self, work: Callable[..., _T], *args: Any) -> _T:
        return await asyncio.get_running_loop().run_in_executor(None, work, *args)

    def _connection(self) -> sqlite3.Connection:
        if self._conn is None:
            raise StoreError(f"the conversation store {self.path} is closed")
        return self._conn

    def _query(self, sql: str, params: tuple[Any, ...]) -> list[tuple[Any, ...]]:
        # Rows are fetched here: SQLite reads (and finds corrupt) later pages while stepping.
        with self._lock:
            try:
                return self._connection().execute(sql, params).fetchall()
            except sqlite3.Error as exc:
                raise StoreError(f"conversation store {self.path}: {exc}") from None

    def image_count(self) -> int:
        """How many distinct images the store holds (each once, however many turns use it)."""
        return int(self._query("SELECT COUNT(*) FROM media", ())[0][0])

    def audio_count(self) -> int:
        """How many distinct audio clips the store holds (each once, however many turns use it)."""
        return int(self._query("SELECT COUNT(*) FROM audio", ())[0][0])

    def _read_conversation(self, conn: sqlite3.Connection, key: str) -> list[dict[str, Any]] | None:
        rows = conn.execute("SELECT messages FROM conversations WHERE id = ?", (key,)).fetchall()
        if not rows:
            return None
        messages = self._transcript(key, rows[0][0])
        digests, clip_digests = image_digests(messages), audio_digests(messages)
        try:
            if digests:
                pixels = read(conn, IMAGES, digests, self.max_image_bytes)
                messages = attach_images(messages, pixels.get)
            if clip_digests:
                samples = read(conn, AUDIO, clip_digests, self.max_audio_bytes)
                messages = attach_audio(messages, samples.get)
            return messages
        except StoredImageError as exc:
            raise StoreError(f"conversation store {self.path}: {key!r}: {exc}") from None

    def _read(self, work: Callable[[sqlite3.Connection], _T]) -> _T:
        """Run ``work`` in one read transaction: it sees one committed state of the file."""
        with self._lock:
            conn = self._connection()
            try:
                conn.execute("BEGIN")
                try:
                    return work(conn)
                finally:
                    conn.execute("COMMIT")
            except sqlite3.Error as exc:
                raise StoreError(f"conversation store {self.path}: {exc}") from None

    def _transcript(self, key: str, text: Any) -> list[dict[str, Any]]:
        try:
            messages = decode_messages(text)
        except (TypeError, ValueError, RecursionError):  # not JSON (or nested past the parser's depth)
            messages = None
        if not isinstance(messages, list) or not all(isinstance(m, dict) for m in messages):
            raise StoreError(
                f"conversation store {self.path}: {key!r} is not a readable transcript (a damaged row?)"
            )
        return messages

    def _transaction(self, work: Callable[[sqlite3.Connection], sqlite3.Cursor]) -> sqlite3.Cursor:
        """Run ``work`` in one write transaction: all of it is committed, or none of it."""
        with self._lock:
            conn = self._connection()
            try:
                conn.execute("BEGIN IMMEDIATE")
                try:
                    cursor = work(conn)
                    conn.execute("COMMIT")
                except BaseException:
                    conn.execute("ROLLBACK")
                    raise
            except sqlite3.Error as exc:
                raise StoreError(f"conversation store {self.path}: {exc}") from None
            return cursor

    def _inspect(self) -> None:
        """Refuse a file that is not a SQLite database or belongs to another application.

        Runs before anything is written (WAL mode changes the file), so a database
        opened by mistake is left exactly as it was.
        """
        conn = self._connection()
        try:
            version = self._checked_version(conn)
            tables = conn.execute("SELECT name FROM sqlite_master WHERE type = 'table'").fetchall()
        except sqlite3.DatabaseError as exc:
            raise StoreError(f"{self.path} is not a SQLite database: {exc}") from None
        if version == 0 and tables:
            raise StoreError(
                f"{self.path} already holds tables of another application, not a conversation store"
            )

    def _configure(self) -> None:
        conn = self._connection()
        try:
            mode = conn.execute("PRAGMA journal_mode=WAL").fetchone()[0]
            conn.execute("PRAGMA synchronous=FULL")
        except sqlite3.DatabaseError as exc:
            raise StoreError(f"{self.path} is not a SQLite database: {exc}") from None
        if str(mode).lower() != "wal":
            raise StoreError(f"{self.path}: SQLite refused write-ahead logging (journal_mode={mode})")

    def _migrate(self) -> None:
        """Create the schema in a new file, add the newer tables to an older one; refuse a file of
        another application or a newer schema."""
        if self._checked_version(self._connection()) != SCHEMA_VERSION:
            # Re-checked under the write lock: another process may be creating it right now.
            self._transaction(self._create_schema)

    def _checked_version(self, conn: sqlite3.Connection) -> int:
        app = conn.execute("PRAGMA application_id").fetchone()[0]
        version = conn.execute("PRAGMA user_version").fetchone()[0]
        if app not in (0, APPLICATION_ID) or (app == 0 and version != 0):
            raise StoreError(
                f"{self.path} is a SQLite database of another application, not a conversation store"
            )
        if version > SCHEMA_VERSION:
            raise StoreError(
                f"{self.path} holds conversation store schema {version}; this runtime reads up to "
                f"schema {SCHEMA_VERSION} (a newer runtime wrote it)"
            )
        return version

    def _create_schema(self, conn: sqlite3.Connection) -> sqlite3.Cursor:
        """Bring the file to SCHEMA_VERSION: a new file gets every table, an older one the tables
        of the versions after its own (re-checked here, under the write lock)."""
        version = self._checked_version(conn)
        if version == SCHEMA_VERSION:
            return conn.execute("SELECT 1")
        if version == 0 and conn.execute("SELECT name FROM sqlite_master WHERE type = 'table'").fetchall():
            raise StoreError(
                f"{self.path} already holds tables of another application, not a conversation store"
            )
        for step in range(version + 1, SCHEMA_VERSION + 1):
            for statement in _SCHEMAS[step]:
                conn.execute(statement)
        conn.execute(f"PRAGMA application_id = {APPLICATION_ID}")
        return conn.execute(f"PRAGMA user_version = {SCHEMA_VERSION}")

"""Where ``clika chat`` keeps what outlives a chat: saved conversations and the line history.

Conversations go to the runtime's SQLite conversation store
(``clika_runtime.sessions.SQLiteStore``), one file next to the model cache, so
``/save``, ``/load`` and ``clika chat --resume ID`` see the same chats from any
process.
"""

from __future__ import annotations

import os
import sqlite3
import time
from pathlib import Path
from typing import Any

from clika_runtime.sessions.stores.conversation_store import StoreError, checked_id
from clika_runtime.sessions.stores.sqlite import SQLiteStore
from clika_runtime.store import cache_root

CHAT_HOME_ENV = "CLIKA_CHAT_HOME"  # saved chats elsewhere than next to the models


class ConversationError(Exception):
    """A conversation that cannot be saved or loaded (the message says why)."""


def chat_folder() -> Path:
    """``$CLIKA_CHAT_HOME``, else ``$CLIKA_CACHE/chat`` (default ``~/.cache/clika/chat``)."""
    home = os.environ.get(CHAT_HOME_ENV)
    if home:
        return Path(home).expanduser()
    return cache_root() / "chat"


def private_folder(folder: Path) -> Path:
    """``folder``, created readable by this user only when new: chats and typed lines are private."""
    folder.mkdir(mode=0o700, parents=True, exist_ok=True)
    return folder


def history_file() -> Path:
    return chat_folder() / "history"


def store_file() -> Path:
    return chat_folder() / "conversations.db"


def new_conversation_id() -> str:
    """A readable id: the time the chat was first saved (a suffix when that id is taken)."""
    return time.strftime("chat-%Y%m%d-%H%M%S")


class Conversations:
    """The saved conversations: save, load and list by id, opened on first use."""

    def __init__(self, path: Path | None = None) -> None:
        self.path = path or store_file()
        self._store: SQLiteStore | None = None

    def _opened(self) -> SQLiteStore:
        if self._store is None:
            try:
                private_folder(self.path.parent)
                self._store = SQLiteStore(self.path)
            except (OSError, StoreError, sqlite3.Error) as exc:
                raise ConversationError(f"cannot open the saved conversations: {exc}") from None
        return self._store

    def save(self, conversation_id: str, messages: list[dict[str, Any]]) -> None:
        try:
            self._opened().save_now(checked_id(conversation_id), messages)
        except (ValueError, StoreError, sqlite3.Error) as exc:
            raise ConversationError(f"cannot save {conversation_id!r}: {exc}") from None

    def load(self, conversation_id: str) -> list[dict[str, Any]]:
        try:
            messages = self._opened().get_now(checked_id(conversation_id))
        except (ValueError, StoreError, sqlite3.Error) as exc:
            raise ConversationError(f"cannot load {conversation_id!r}: {exc}") from None
        if messages is None:
            known = self.ids()
            listed = f" (saved: {', '.join(known[:10])})" if known else " (none is saved yet)"
            raise ConversationError(f"no saved conversation {conversation_id!r}{listed}")
        return messages

    def kv_file(self, conversation_id: str) -> Path:
        """Where the conversation's KV is kept beside its transcript (``SQLiteStore.kv_path``)."""
        try:
            return self._opened().kv_path(checked_id(conversation_id))
        except ValueError as exc:
            raise ConversationError(f"no KV file for {conversation_id!r}: {exc}") from None

    def ids(self) -> list[str]:
        """Saved ids, the most recently saved first."""
        try:
            return self._opened().list_now()
        except (StoreError, sqlite3.Error) as exc:
            raise ConversationError(f"cannot list the saved conversations: {exc}") from None

    def unused_id(self) -> str:
        base = new_conversation_id()
        taken = set(self.ids())
        candidate, n = base, 1
        while candidate in taken:
            n += 1
            candidate = f"{base}-{n}"
        return candidate

    def close(self) -> None:
        if self._store is not None:
            self._store.close()
            self._store = None

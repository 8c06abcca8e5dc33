"""Stored conversations over HTTP, for the chat page: ``/api/conversations`` (list) and
``/api/conversations/{id}`` (GET, PUT ``{"messages": [...]}``, DELETE).

They live in the SQLite conversation store ``clika chat`` saves to
(``$CLIKA_CHAT_HOME``, else ``$CLIKA_CACHE/chat``, file ``conversations.db``),
so a chat saved in the terminal opens in the page and ``clika chat --resume
ID`` continues one begun in the page. The store is opened on first use.
"""

from __future__ import annotations

import json
import os
import sqlite3
import threading
from pathlib import Path
from typing import Any

from starlette.concurrency import run_in_threadpool
from starlette.requests import Request
from starlette.responses import JSONResponse, Response
from starlette.routing import Route

from clika_runtime.server.endpoints import endpoint, routes_of
from clika_runtime.server.errors import ApiError, bad_request
from clika_runtime.server.served import Served
from clika_runtime.sessions.stores.conversation_store import StoreError, checked_id
from clika_runtime.sessions.stores.sqlite import SQLiteStore
from clika_runtime.store import cache_root

CHAT_HOME_ENV = "CLIKA_CHAT_HOME"
MAX_LISTED = 200
ROLES = ("system", "user", "assistant", "tool")


def default_conversations_path() -> Path:
    """The file ``clika chat`` saves conversations in."""
    home = os.environ.get(CHAT_HOME_ENV)
    folder = Path(home).expanduser() if home else cache_root() / "chat"
    return folder / "conversations.db"


class ConversationFile:
    """The SQLite conversation store, opened on first use (its folder private to the user)."""

    def __init__(self, path: Path | None = None) -> None:
        self.path = path or default_conversations_path()
        self._store: SQLiteStore | None = None
        self._lock = threading.Lock()

    def store(self) -> SQLiteStore:
        with self._lock:
            if self._store is None:
                try:
                    self.path.parent.mkdir(mode=0o700, parents=True, exist_ok=True)
                    self._store = SQLiteStore(self.path)
                except (OSError, StoreError, sqlite3.Error) as exc:
                    raise ApiError(500, f"cannot open the conversation store: {exc}") from None
            return self._store

    def close(self) -> None:
        with self._lock:
            if self._store is not None:
                self._store.close()
                self._store = None


def conversation_routes(served: Served, conversations: ConversationFile) -> list[Route]:
    return routes_of(_Conversations(served, conversations))


class _Conversations:
    def __init__(self, served: Served, conversations: ConversationFile) -> None:
        self.served = served
        self.conversations = conversations

    @endpoint("/api/conversations", "GET")
    async def listed(self, request: Request) -> Response:
        self.served.intake.authorize(request)
        return JSONResponse({"conversations": await run_in_threadpool(self._summaries)})

    @endpoint("/api/conversations/{conversation_id}", "GET", "PUT", "DELETE")
    async def one(self, request: Request) -> Response:
        self.served.intake.authorize(request)
        conversation_id = _id(request.path_params["conversation_id"])
        if request.method == "PUT":
            body = await self.served.intake.json(request)
            messages = _messages(body)
            await run_in_threadpool(self._call, "save_now", conversation_id, messages)
            return JSONResponse({"id": conversation_id, "messages": len(messages)})
        if request.method == "DELETE":
            if not await run_in_threadpool(self._call, "delete_now", conversation_id):
                raise ApiError(
                    404, f"no stored conversation {conversation_id!r}", code="conversation_not_found"
                )
            return JSONResponse({"id": conversation_id, "deleted": True})
        messages = await run_in_threadpool(self._call, "get_now", conversation_id)
        if messages is None:
            raise ApiError(404, f"no stored conversation {conversation_id!r}", code="conversation_not_found")
        body = json.dumps({"id": conversation_id, "messages": messages}, default=_media_placeholder)
        return Response(body, media_type="application/json")

    def _call(self, method: str, *args: Any) -> Any:
        try:
            return getattr(self.conversations.store(), method)(*args)
        except (StoreError, sqlite3.Error, ValueError) as exc:
            raise ApiError(400, f"the conversation store refused it: {exc}") from None

    def _summaries(self) -> list[dict[str, Any]]:
        """The newest conversations first, each with a title (its first user words) and its length."""
        summaries = []
        for conversation_id in self._call("list_now")[:MAX_LISTED]:
            messages = self._call("get_now", conversation_id) or []
            summaries.append({"id": conversation_id, "title": _title(messages), "messages": len(messages)})
        return summaries


def _id(value: str) -> str:
    try:
        return checked_id(value)
    except ValueError as exc:
        raise bad_request(str(exc), "id") from None


def _messages(body: Any) -> list[dict[str, Any]]:
    """The ``messages`` of a PUT body: chat messages with a known role (400 naming the first that is not)."""
    if not isinstance(body, dict) or not isinstance(body.get("messages"), list):
        raise bad_request('the body must be {"messages": [...]}', "messages")
    for index, message in enumerate(body["messages"]):
        if not isinstance(message, dict) or message.get("role") not in ROLES:
            raise bad_request(
                f"messages[{index}] must be an object with a role of {', '.join(ROLES)}", "messages"
            )
    return body["messages"]


def _title(messages: list[dict[str, Any]]) -> str:
    for message in messages:
        if message.get("role") == "user":
            content = message.get("content")
            if isinstance(content, list):
                content = " ".join(p.get("text", "") for p in content if isinstance(p, dict))
            text = " ".join(str(content or "").split())
            if text:
                return text[:60]
    return "(empty)"


def _media_placeholder(value: object) -> str:
    """A stored image or clip (pixels, samples) as the page shows it: a note, not the data."""
    return "[media]"

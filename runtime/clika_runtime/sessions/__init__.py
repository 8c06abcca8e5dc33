"""Async sessions and durable conversations.

* :class:`AsyncChat`: async conversations with one model on one shared engine
  (``create_session``, ``ask(prompt, id=...)``, ``prompt``, ``stream``, ``fork``);
* :class:`AsyncSession`: one conversation (``await send``, ``async for event in
  stream``, ``set_options``, ``undo_turns``, ``fork``, cancellation by an
  ``asyncio.Event``, by cancelling the task, or by closing or dropping a stream);
* :class:`TurnResult` and :class:`Event`: a turn's result message and its streamed events;
* :class:`ConversationStore`, :class:`InMemoryStore`, :class:`SQLiteStore`: where
  conversations are kept, in memory or durably in a SQLite file.
"""

from clika_runtime.sessions.chat import AsyncChat
from clika_runtime.sessions.results import EVENT_TYPES, Event, RunCancelled, TurnResult
from clika_runtime.sessions.run_result import RunResult
from clika_runtime.sessions.session import AsyncSession, new_session_id
from clika_runtime.sessions.stores.conversation_store import ConversationStore, InMemoryStore, StoreError
from clika_runtime.sessions.stores.sqlite import SCHEMA_VERSION, SQLiteStore
from clika_runtime.sessions.tool_run import ToolConversation
from clika_runtime.sessions.turn import TurnStream

__all__ = [
    "EVENT_TYPES",
    "SCHEMA_VERSION",
    "AsyncChat",
    "AsyncSession",
    "ConversationStore",
    "Event",
    "InMemoryStore",
    "RunCancelled",
    "RunResult",
    "SQLiteStore",
    "StoreError",
    "ToolConversation",
    "TurnResult",
    "TurnStream",
    "new_session_id",
]

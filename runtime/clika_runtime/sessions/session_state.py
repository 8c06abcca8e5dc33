"""What an async session is and keeps, apart from running its turns: the host that made it, its
state and options, edits to its conversation, and saving it (transcript and KV).

``AsyncSession`` (``sessions/session.py``) is a :class:`SessionState` that runs turns.
"""

from __future__ import annotations

import asyncio
import copy
import uuid
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any, Protocol

from clika_runtime.chat.history import checked_messages
from clika_runtime.chat.kv_resume import ConversationPrompt, conversation_prompt, restore_kv, save_kv
from clika_runtime.engine.config import GenerationConfig
from clika_runtime.sessions.prefill import PrefillHost
from clika_runtime.sessions.results import TurnResult
from clika_runtime.sessions.stores.conversation_store import ConversationStore

if TYPE_CHECKING:
    from clika_runtime.chat.model import ChatModel
    from clika_runtime.engine.engine import Engine
    from clika_runtime.sessions.turn import TurnRun


class SessionHost(PrefillHost, Protocol):
    """What a session's turns need of the chat that made it (an ``AsyncChat``): what prefilling
    needs (preparing, encoding, submitting) and its defaults, tools, model and engine."""

    @property
    def defaults(self) -> GenerationConfig: ...

    def checked_tools(self, tools: Sequence[Mapping[str, Any]] | None) -> list[dict[str, Any]] | None: ...

    @property
    def model(self) -> ChatModel: ...

    @property
    def engine(self) -> Engine: ...


def new_session_id() -> str:
    """A fresh, unguessable session id."""
    return uuid.uuid4().hex


class SessionState:
    """A session's conversation, options and store, and what edits or saves them."""

    _chat: SessionHost
    _id: str
    _history: list[dict[str, Any]]
    _store: ConversationStore | None
    _cancel: asyncio.Event | None
    _tools: list[dict[str, Any]] | None
    _options: dict[str, Any]
    _live: TurnRun | None
    _last: TurnResult | None
    _save_lock: asyncio.Lock
    _closed: bool
    _interrupt: Callable[[str], None]  # cancels a running turn, naming why

    # -- state -----------------------------------------------------------------------------------

    @property
    def session_id(self) -> str:
        """The conversation's id (its key in the store)."""
        return self._id

    @property
    def messages(self) -> list[dict[str, Any]]:
        """The conversation so far, in the message shape: a new list of the transcript's
        messages (the messages themselves are not copied on every read)."""
        return list(self._history)

    @property
    def transcript(self) -> list[dict[str, Any]]:
        """The transcript itself (no copy): it grows as turns complete; change it only through
        the session's methods, or assign ``messages``."""
        return self._history

    @property
    def model_id(self) -> str:
        """The name the chat gives its model (``AsyncChat.model_id``)."""
        return getattr(self._chat, "model_id", "")

    @messages.setter
    def messages(self, messages: Sequence[Mapping[str, Any]]) -> None:
        """Replace the conversation (a running turn is cancelled first); the next turn, or
        :meth:`respond`, runs on from the new history."""
        self._history = checked_messages(messages)
        self._interrupt("the conversation was replaced")

    @property
    def cancel_event(self) -> asyncio.Event | None:
        """The cancel event every turn of this session honours (None: none)."""
        return self._cancel

    @property
    def options(self) -> dict[str, Any]:
        """The session-scoped decode options (a copy)."""
        return dict(self._options)

    @property
    def store(self) -> ConversationStore | None:
        """The store the session saves to after each turn (None: it is not saved)."""
        return self._store

    @property
    def last_result(self) -> TurnResult | None:
        """The last completed turn's result, or None before the first."""
        return self._last

    @property
    def closed(self) -> bool:
        return self._closed

    # -- options ---------------------------------------------------------------------------------

    def set_options(self, options: Mapping[str, Any] | None = None, /, **more: Any) -> None:
        """Set decode options (``temperature=``, ``max_new_tokens=``, ...) for every later turn of
        this session; a turn's own keyword arguments still override them for that turn."""
        merged = {**self._options, **dict(options or {}), **more}
        self._chat.defaults.overlay(merged)  # refuses unknown names and bad values, naming them
        self._options = merged

    def clear_options(self, *names: str) -> None:
        """Forget the named session options (all of them when none is named)."""
        unknown = [name for name in names if name not in self._options]
        if unknown:
            raise ValueError(f"no session option(s) {unknown} set; set: {sorted(self._options)}")
        self._options = {k: v for k, v in self._options.items() if names and k not in names}

    # -- editing and saving the conversation ------------------------------------------------------

    def reset(self, *, keep_system: bool = True) -> None:
        """Forget the conversation (the system turn stays unless told otherwise); a running turn
        is cancelled. A store-bound session writes the change at its next turn or :meth:`save`."""
        self._interrupt("the conversation was reset")
        first = self._history[:1]
        self._history = first if keep_system and first and first[0].get("role") == "system" else []

    def undo_turns(self, n: int = 1) -> list[dict[str, Any]]:
        """Remove the last ``n`` user turns and everything after each (replies, tool turns); returns
        the removed messages. A running turn is cancelled first."""
        if isinstance(n, bool) or not isinstance(n, int) or n < 1:
            raise ValueError(f"n must be an integer >= 1, got {n!r}")
        starts = [i for i, message in enumerate(self._history) if message.get("role") == "user"]
        if n > len(starts):
            raise ValueError(f"cannot undo {n} turn(s): the conversation has {len(starts)} user turn(s)")
        self._interrupt("turns were undone")
        cut = starts[-n]
        removed, self._history = self._history[cut:], self._history[:cut]
        return removed

    async def save(self, *, with_kv: bool = False) -> None:
        """Write the conversation to the session's store now; ``with_kv`` writes its KV beside it
        too (:meth:`save_kv`), so a later process resumes it without reading it again."""
        if self._store is None:
            raise ValueError("this session has no store to save to")
        async with self._save_lock:  # saves land in the order they were asked for
            await self._store.save(self._id, copy.deepcopy(self._history))
        if with_kv:
            await self.save_kv()

    async def save_kv(self, path: str | Path | None = None) -> int:
        """Write the conversation's KV to ``path`` (None: where the store keeps it,
        ``SQLiteStore.kv_path``); how many tokens it holds (``ChatSession.save_kv`` says how)."""
        return await self._off_loop_kv(save_kv, self._kv_path(path))

    async def restore_kv(self, path: str | Path | None = None) -> int:
        """Install the KV saved for the conversation (None: where the store keeps it), so the next
        turn starts from it; how many tokens were restored (0, logged, when the file cannot be used)."""
        return await self._off_loop_kv(restore_kv, self._kv_path(path))

    async def _off_loop_kv(self, work: Callable[..., int], target: Path) -> int:
        # Rendering the history (and embedding its images) is CPU work: keep it off the loop too.
        history = list(self._history)

        def run() -> int:
            prompt = self._transcript(history)
            return work(self._chat.model, self._chat.engine, prompt, target)

        return await asyncio.get_running_loop().run_in_executor(None, run)

    def _kv_path(self, path: str | Path | None) -> Path:
        if path is not None:
            return Path(path)
        kv_path = getattr(self._store, "kv_path", None)
        if kv_path is None:
            raise ValueError("this session's store keeps no KV files (a SQLiteStore does): give a path")
        return kv_path(self._id)

    def _transcript(self, history: list[dict[str, Any]]) -> ConversationPrompt:
        policy = self._chat.defaults.overlay(self._options)
        return conversation_prompt(self._chat.model, history, self._tools, policy)

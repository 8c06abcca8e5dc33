"""AsyncChat: async conversations with one model, their turns sharing one serving engine.

::

    chat = AsyncChat(model, store=SQLiteStore("conversations.db"), system="You are terse.")
    result = await chat.ask("My name is Ada.", id="ada")      # load "ada", continue it, save it
    result = await chat.ask("What is my name?", id="ada")     # ... in this process or a later one
    print(result.result, result.usage)

    session = chat.create_session(cancel=stop_event)           # a live conversation object
    async for event in session.stream("Tell me a story."):
        ...

Every session of a chat decodes on the model's engine, the one ``generate``,
``chat``, ``ChatSession`` and the server use (``max_active`` of its requests
together; the others queue), so two conversations interleave step by step
while each keeps its own history. Sessions a chat creates save to its store
after every completed turn (an :class:`InMemoryStore` unless one is given), so
``ask(..., id=session.session_id)`` continues a session too.
"""

from __future__ import annotations

import asyncio
import threading
import weakref
from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING, Any

from clika_runtime.chat.tools.loop import LoopHooks, checked_max_turns
from clika_runtime.chat.tools.toolkit import Toolkit
from clika_runtime.chat.turn import Turn, check_chat_arguments, offered_tools, prepare_turn, submit_turn
from clika_runtime.engine.config import GenerationConfig
from clika_runtime.sessions.foreign_toolkit import as_toolkit, toolkit_instructions
from clika_runtime.sessions.results import TurnResult
from clika_runtime.sessions.retry import RetryPolicy
from clika_runtime.sessions.run_result import RunResult
from clika_runtime.sessions.session import AsyncSession
from clika_runtime.sessions.stores.conversation_store import ConversationStore, InMemoryStore, checked_id
from clika_runtime.sessions.tool_run import ToolConversation

if TYPE_CHECKING:
    from clika_runtime.chat.model import ChatModel
    from clika_runtime.engine.engine import Engine, RequestStream


class AsyncChat:
    """Async conversations with ``model`` (see the module docstring).

    The chat's turns run on the model's engine (``max_active`` and
    ``max_queued`` raise its limits to those when they are higher), or on
    ``engine`` when one is given (its owner closes it). ``default_budget`` caps a reply's new tokens
    unless a turn says otherwise; ``tools`` are offered on every turn unless a
    session or turn names its own.
    """

    def __init__(
        self,
        model: ChatModel,
        *,
        system: str | None = None,
        store: ConversationStore | None = None,
        engine: Engine | None = None,
        max_active: int = 4,
        max_queued: int = 256,
        default_budget: int = 256,
        tools: Sequence[Mapping[str, Any]] | None = None,
        model_id: str | None = None,
        retries: int = 2,
        retry_base_ms: int = 500,
        on_error: Any = None,
    ) -> None:
        check_chat_arguments(default_budget, system)
        self._retry = RetryPolicy(retries, retry_base_ms, on_error)
        self._model_id = model_id if model_id is not None else _folder_name(model)
        self._model = model
        self._system = system or None
        self._store: ConversationStore = store if store is not None else InMemoryStore()
        self._own_engine = engine
        if engine is None:
            model.raise_limits(max_active=max_active, max_queued=max_queued)
        self._requests: set[RequestStream] = set()  # the turns running now, cancelled by close()
        self._requests_lock = threading.Lock()
        self._defaults = model.defaults.overlay({"max_new_tokens": default_budget})
        self._tools = self.checked_tools(tools)
        self._id_locks: weakref.WeakValueDictionary[str, asyncio.Lock] = weakref.WeakValueDictionary()

    # -- what the chat is ------------------------------------------------------------------------

    @property
    def model(self) -> ChatModel:
        return self._model

    @property
    def model_id(self) -> str:
        """The model's name in results (``RunResult.model``): ``model_id=``, else its folder's name."""
        return self._model_id

    @property
    def engine(self) -> Engine:
        """The engine every session of this chat decodes on (the model's unless one was given)."""
        return self._own_engine if self._own_engine is not None else self._model.engine

    @property
    def store(self) -> ConversationStore:
        """Where the chat's conversations are saved."""
        return self._store

    @property
    def defaults(self) -> GenerationConfig:
        """The decode policy a turn starts from (the checkpoint's defaults, the reply budget)."""
        return self._defaults

    # -- sessions --------------------------------------------------------------------------------

    def create_session(
        self,
        *,
        session_id: str | None = None,
        system: str | None = None,
        cancel: asyncio.Event | None = None,
        tools: Sequence[Mapping[str, Any]] | None = None,
        options: Mapping[str, Any] | None = None,
        persist: bool = True,
    ) -> AsyncSession:
        """A new conversation (a fresh id unless ``session_id`` names one), seeded with ``system``
        (None: the chat's); it saves to the chat's store after each turn unless ``persist`` is False."""
        if system is not None and not isinstance(system, str):
            raise ValueError(f"system must be a string or None, got {type(system).__name__}")
        return AsyncSession(
            self,
            session_id=session_id,
            messages=self._seed(system),
            store=self._store if persist else None,
            cancel=cancel,
            tools=tools,
            options=options,
        )

    def conversation(
        self,
        toolkit: Any = None,
        cancel: asyncio.Event | None = None,
        *,
        max_turns: int | None = None,
        hooks: LoopHooks | None = None,
        **options: Any,
    ) -> ToolConversation:
        """A new in-memory conversation whose every turn honours ``cancel``: each ``send`` runs
        the model and ``toolkit``'s tools (a runtime Toolkit or a toolnexus one, adapted; None:
        no tools) until the model answers (``max_turns`` model calls at most, ``hooks`` around
        each call). Its system turn is the chat's system prompt and the toolkit's skills catalog."""
        kit = as_toolkit(toolkit)
        checked_max_turns(max_turns)
        session = self.create_session(cancel=cancel, system="", **options)
        return ToolConversation(
            session,
            kit,
            cancel=cancel,
            max_turns=max_turns,
            hooks=hooks,
            system=self._system_with(kit),
            retry=self._retry,
        )

    async def run(
        self,
        prompt: str,
        toolkit: Any = None,
        history: Sequence[Mapping[str, Any]] | None = None,
        cancel: asyncio.Event | None = None,
        *,
        max_turns: int | None = None,
        hooks: LoopHooks | None = None,
        **turn_options: Any,
    ) -> RunResult:
        """Run ``prompt`` (and ``toolkit``'s tools) on from ``history`` (a transcript such as a
        conversation's ``messages``; the system turn is not added again) and return the
        RunResult, whose ``messages`` is the transcript after it. Nothing is kept."""
        kit = as_toolkit(toolkit)
        conversation = ToolConversation(
            AsyncSession(self, messages=history or (), cancel=cancel),
            kit,
            cancel=cancel,
            max_turns=max_turns,
            hooks=hooks,
            system="" if history else self._system_with(kit),
            retry=self._retry,
        )
        return await conversation.send(prompt, **turn_options)

    async def open(
        self,
        session_id: str,
        *,
        cancel: asyncio.Event | None = None,
        tools: Sequence[Mapping[str, Any]] | None = None,
        options: Mapping[str, Any] | None = None,
        with_kv: bool = False,
    ) -> AsyncSession:
        """The conversation saved under ``session_id`` (a new one seeded with the chat's system
        turn when the store has none), bound to the store; ``with_kv`` restores the KV saved with
        it (``session.save(with_kv=True)``), so its next turn does not read it again."""
        saved = await self._store.get(checked_id(session_id))
        session = AsyncSession(
            self,
            session_id=session_id,
            messages=self._seed(None) if saved is None else saved,
            store=self._store,
            cancel=cancel,
            tools=tools,
            options=options,
        )
        if with_kv and saved is not None:
            await session.restore_kv()
        return session

    async def ask(
        self,
        prompt: str,
        toolkit: Any = None,
        *,
        id: str | None = None,  # noqa: A002  (the name agent clients use for a conversation id)
        cancel: asyncio.Event | None = None,
        config: GenerationConfig | Mapping[str, Any] | None = None,
        tools: Sequence[Mapping[str, Any]] | None = None,
        max_turns: int | None = None,
        **overrides: Any,
    ) -> Any:
        """Continue the conversation saved under ``id`` with ``prompt`` and save it: it loads the
        conversation, runs the turn and writes the conversation back before returning, so the next
        ``ask`` with that id (in this process or another) continues from here. Without an id,
        a one-shot :meth:`prompt`. Asks on one id in this process take turns.

        With a ``toolkit`` (a runtime Toolkit or a toolnexus one) the turn runs the tool loop
        and returns its RunResult; the tool turns are saved with the conversation."""
        if toolkit is not None:
            if config is not None:
                overrides = {"config": config, **overrides}
            kit = as_toolkit(toolkit)
            return await self._ask_with_tools(prompt, kit, id, cancel, max_turns, overrides)
        if id is None:
            return await self.prompt(prompt, cancel=cancel, config=config, tools=tools, **overrides)
        lock = self._id_locks.setdefault(checked_id(id), asyncio.Lock())
        async with lock:
            session = await self.open(id, cancel=cancel)
            return await session.send(prompt, config=config, tools=tools, **overrides)

    async def _ask_with_tools(
        self,
        prompt: str,
        kit: Toolkit,
        id: str | None,  # noqa: A002
        cancel: asyncio.Event | None,
        max_turns: int | None,
        options: dict[str, Any],
    ) -> RunResult:
        if id is None:
            return await self.run(prompt, kit, cancel=cancel, max_turns=max_turns, **options)
        lock = self._id_locks.setdefault(checked_id(id), asyncio.Lock())
        async with lock:
            saved = await self._store.get(checked_id(id))
            session = AsyncSession(
                self, session_id=id, messages=saved or (), store=self._store, cancel=cancel
            )
            conversation = ToolConversation(
                session,
                kit,
                cancel=cancel,
                max_turns=max_turns,
                system=self._system_with(kit),
                retry=self._retry,
            )
            result = await conversation.send(prompt, **options)
            await session.save()  # the last tool turns too
            return result

    async def prompt(
        self,
        message: str,
        *,
        system: str | None = None,
        cancel: asyncio.Event | None = None,
        config: GenerationConfig | Mapping[str, Any] | None = None,
        tools: Sequence[Mapping[str, Any]] | None = None,
        **overrides: Any,
    ) -> TurnResult:
        """A one-shot reply to ``message`` (nothing is kept)."""
        session = self.create_session(system=system, cancel=cancel, persist=False)
        return await session.send(message, config=config, tools=tools, **overrides)

    def stream(
        self,
        message: str,
        toolkit: Any = None,
        *,
        system: str | None = None,
        cancel: asyncio.Event | None = None,
        config: GenerationConfig | Mapping[str, Any] | None = None,
        tools: Sequence[Mapping[str, Any]] | None = None,
        **overrides: Any,
    ) -> Any:
        """A one-shot reply to ``message``, streamed as events (nothing is kept). With a
        ``toolkit`` it is the tool loop, streamed as ``ToolConversation.stream``'s events (text
        deltas, tool calls and results, suspensions, usage, done)."""
        if toolkit is not None:
            kit = as_toolkit(toolkit)
            conversation = self.conversation(kit, cancel)
            if config is not None:
                overrides = {"config": config, **overrides}
            return conversation.stream(message, **overrides)
        session = self.create_session(system=system, cancel=cancel, persist=False)
        return session.stream(message, config=config, tools=tools, **overrides)

    async def fork(self, source_id: str, new_id: str | None = None) -> AsyncSession:
        """A new conversation saved under ``new_id`` (a fresh id when None) holding the history of
        the one saved under ``source_id``; the source is left as it is."""
        saved = await self._store.get(checked_id(source_id))
        if saved is None:
            raise ValueError(f"the store holds no conversation {source_id!r} to fork")
        if new_id is not None and await self._store.get(checked_id(new_id)) is not None:
            raise ValueError(f"the store already holds a conversation {new_id!r}; fork to a new id")
        session = AsyncSession(self, session_id=new_id, messages=saved, store=self._store)
        await session.save()
        return session

    def close(self) -> None:
        """Cancel the chat's running turns (they end with RunCancelled); the engine stays."""
        with self._requests_lock:
            running = list(self._requests)
        for request in running:
            request.cancel()

    async def __aenter__(self) -> AsyncChat:
        return self

    async def __aexit__(self, *exc: object) -> None:
        self.close()

    # -- for sessions ----------------------------------------------------------------------------

    def checked_tools(self, tools: Sequence[Mapping[str, Any]] | None) -> list[dict[str, Any]] | None:
        """``tools`` normalized; ValueError when the model takes none."""
        return offered_tools(self._model, tools)

    def prepare(
        self,
        messages: Sequence[Mapping[str, Any]],
        tools: list[dict[str, Any]] | None,
        policy: GenerationConfig,
    ) -> Turn:
        """Render ``messages`` for the model, tokenize them and make the reply's parser."""
        return prepare_turn(self._model, messages, tools, policy)

    def encode(self, text: str) -> list[int]:
        """Token ids of ``text`` as the model reads a rendered prompt."""
        return self._model.tokenizer.encode(text)

    def submit(self, prepared: Turn, policy: GenerationConfig) -> RequestStream:
        """Submit a prepared turn to the chat's engine; ``close`` cancels it while it runs."""
        request = submit_turn(self.engine, prepared, policy)
        with self._requests_lock:
            self._requests.add(request)
        request.when_ended(lambda: self._forget(request))
        return request

    def _forget(self, request: RequestStream) -> None:
        with self._requests_lock:
            self._requests.discard(request)

    def _system_with(self, kit: Toolkit) -> str:
        """The system turn a conversation with ``kit`` starts from: the chat's system prompt, then
        what the toolkit asks to add (a toolnexus toolkit's skills catalog)."""
        return "\n\n".join(part for part in (self._system or "", toolkit_instructions(kit)) if part)

    def _seed(self, system: str | None) -> list[dict[str, Any]]:
        text = self._system if system is None else (system or None)
        return [{"role": "system", "content": text}] if text else []


def _folder_name(model: Any) -> str:
    folder = getattr(model, "local_dir", None)
    return folder.name if folder is not None else ""

"""The Chucky client's shape over a local model: ``prompt`` / ``stream`` / sessions, ``@tool``,
result messages with usage.

Code written for the Chucky Python SDK runs on a local model by changing its import::

    from clika_runtime.compat.chucky import Chucky, tool, text_result, get_assistant_text

    client = Chucky(model="smollm2-135m-instruct", system_prompt="You are terse.")
    result = await client.prompt("What is 2 + 2?")
    print(result.get("result"), result.get("total_cost_usd"))

    session = client.create_session(tools=[get_time])
    await session.send("What time is it?")
    async for msg in session.stream():
        if msg.get("type") == "assistant":
            print(get_assistant_text(msg))
        if msg.get("type") == "result":
            break
    await session.close()
    await client.close()

``model`` is a loaded :class:`~clika_runtime.modelverse.GenerativeModel` or
anything :func:`~clika_runtime.modelverse.load` takes; a name that is no local
model (a hosted model's name, as SDK code carries) stands for the model the
``CLIKA_MODEL`` environment variable names. ``token``, ``url``, ``timeout``
and ``keepalive_interval`` are accepted for compatibility and unused (nothing
leaves the machine); :func:`create_token` and :func:`create_budget` make the
token such code passes. A per-call ``model=`` (on ``prompt``, ``stream`` and
``create_session``) is resolved as the constructor's is and runs on that model
(loaded once, closed with the client); a name that is no local model stands in
as above, so SDK code naming a hosted model runs on the client's own.
``num_turns`` counts the assistant replies in the session's conversation after
the turn, as a :class:`~clika_runtime.sessions.results.TurnResult` does; an
error result is preceded by an ``{'type': 'error', 'error': {'message': ...}}``
message in ``Session.stream()``. ``options`` are decode options for every turn
(``temperature``, ``max_new_tokens``, ...); other keyword arguments go to ``load``. A session is an async session on one
shared engine; with tools its turns run the tool loop
(:mod:`clika_runtime.chat.tools.loop`). Failures, a prompt longer than the
context included, come back as result messages with ``subtype: 'error'``.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
from collections.abc import AsyncIterator, Mapping, Sequence
from pathlib import Path
from typing import Any

from clika_runtime.chat.tools.loop import LoopHooks, ModelTurn
from clika_runtime.chat.tools.toolkit import Tool, Toolkit, ToolOutput, make_tool, text_result, tool
from clika_runtime.compat.chucky_messages import (
    PromptResult,
    StreamEvent,
    assistant_message,
    get_assistant_text,
    get_result_text,
    stream_events,
    tool_result_message,
)
from clika_runtime.compat.chucky_tokens import create_budget, create_token
from clika_runtime.modelverse import GenerativeModel, load
from clika_runtime.sessions.chat import AsyncChat
from clika_runtime.sessions.results import Event, RunCancelled
from clika_runtime.sessions.session import AsyncSession
from clika_runtime.store.load_target import folder_to_load
from clika_runtime.store.local_model import ModelError

__all__ = [
    "Chucky",
    "PromptResult",
    "Session",
    "StreamEvent",
    "create_budget",
    "create_token",
    "get_assistant_text",
    "get_result_text",
    "text_result",
    "tool",
]

DEFAULT_SESSION_TURNS = 8


class Chucky:
    """The client (see the module docstring)."""

    def __init__(
        self,
        token: str = "",
        url: str = "",
        model: Any = None,
        system_prompt: str | None = None,
        max_turns: int | None = None,
        timeout: float = 30.0,
        keepalive_interval: float = 60.0,
        *,
        options: Mapping[str, Any] | None = None,
        **load_options: Any,
    ) -> None:
        self._model, self._owns_model, self._stood_in = _loaded(model, load_options)
        self._model_arg = model
        self._load_options = load_options
        self._options = dict(options or {})
        self._system = system_prompt
        self._max_turns = max_turns
        self._chat = AsyncChat(self._model, system=system_prompt)
        self._chats: dict[Any, tuple[AsyncChat, GenerativeModel | None]] = {}  # per-call models
        self._closed = False

    @property
    def model(self) -> Any:
        return self._model

    async def prompt(
        self,
        message: str,
        *,
        model: Any = None,
        system_prompt: str | None = None,
        tools: Sequence[Tool | Any] | None = None,
        max_turns: int | None = None,
    ) -> PromptResult:
        """A one-shot reply to ``message`` (tools run until the model answers)."""
        session = self._session(model, system_prompt, tools, max_turns, persist=False)
        try:
            await session.send(message)
            result: PromptResult | None = None
            async for item in session.stream():
                if item.get("type") == "result":
                    result = PromptResult(item)
            assert result is not None
            return result
        finally:
            await session.close()

    async def stream(
        self,
        message: str,
        *,
        model: Any = None,
        system_prompt: str | None = None,
        tools: Sequence[Tool | Any] | None = None,
        max_turns: int | None = None,
    ) -> AsyncIterator[StreamEvent]:
        """A one-shot reply streamed as :class:`StreamEvent` items (text pieces as they are made)."""
        session = self._session(model, system_prompt, tools, max_turns, persist=False, pieces=True)
        try:
            await session.send(message)
            async for item in session.stream():
                for event in stream_events(item):
                    yield event
            yield StreamEvent("done")
        finally:
            await session.close()

    def create_session(
        self,
        *,
        model: Any = None,
        system_prompt: str | None = None,
        tools: Sequence[Tool | Any] | None = None,
        max_turns: int | None = None,
    ) -> Session:
        """A new conversation (returned at once; its first :meth:`Session.send` starts work)."""
        return self._session(model, system_prompt, tools, max_turns, persist=True)

    async def close(self) -> None:
        """Stop the client's engine (a model it loaded itself is closed too)."""
        if self._closed:
            return
        self._closed = True
        self._chat.close()
        for chat, owned in self._chats.values():
            chat.close()
            if owned is not None:
                owned.close()
        if self._owns_model:
            self._model.close()

    async def __aenter__(self) -> Chucky:
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.close()

    def _session(
        self,
        model: Any,
        system_prompt: str | None,
        tools: Sequence[Tool | Any] | None,
        max_turns: int | None,
        *,
        persist: bool,
        pieces: bool = False,
    ) -> Session:
        if self._closed:
            raise ValueError("this client is closed")
        system = self._system if system_prompt is None else system_prompt
        inner = self._chat_for(model).create_session(system=system, persist=persist, options=self._options)
        toolkit = Toolkit(make_tool(item) for item in tools or ())
        bound = max_turns if max_turns is not None else self._max_turns
        return Session(inner, toolkit, bound, pieces=pieces)

    def _chat_for(self, model: Any) -> AsyncChat:
        """The chat a per-call ``model=`` runs on (None, the client's model or its name: the
        client's own); another model is loaded once and kept until the client closes."""
        if model is None or model is self._model or (isinstance(model, str) and model == self._model_arg):
            return self._chat
        key = id(model) if isinstance(model, GenerativeModel) else model
        if key not in self._chats:
            if isinstance(model, GenerativeModel):
                self._chats[key] = (AsyncChat(model, system=self._system), None)
            elif self._stood_in and _is_stand_in(model):
                return self._chat  # a hosted name: the client's model already stands in for it
            else:
                loaded, owned, _ = _loaded(model, self._load_options)
                self._chats[key] = (AsyncChat(loaded, system=self._system), loaded if owned else None)
        return self._chats[key][0]


class Session:
    """A multi-turn conversation: ``await send(text)``, then ``async for msg in stream()``."""

    def __init__(
        self, session: AsyncSession, toolkit: Toolkit, max_turns: int | None, *, pieces: bool
    ) -> None:
        self._session = session
        self._toolkit = toolkit
        self._max_turns = max_turns
        self._pieces = pieces
        self._queue: asyncio.Queue[dict[str, Any] | None] | None = None
        self._task: asyncio.Task[None] | None = None

    @property
    def session_id(self) -> str:
        return self._session.session_id

    @property
    def messages(self) -> list[dict[str, Any]]:
        """The conversation so far, in the OpenAI message shape."""
        return self._session.messages

    async def send(self, message: str) -> None:
        """Start the next turn; :meth:`stream` reads its messages. A turn still running is cancelled."""
        if not isinstance(message, str):
            raise ValueError(f"message must be a string, got {type(message).__name__}")
        if self._session.closed:
            raise ValueError(f"session {self.session_id} is closed: create a new session to go on")
        await self._stop()
        queue: asyncio.Queue[dict[str, Any] | None] = asyncio.Queue()
        self._queue = queue
        self._task = asyncio.ensure_future(self._run(message, queue))

    async def stream(self) -> AsyncIterator[dict[str, Any]]:
        """The turn's SDK messages: ``assistant`` messages (text and tool_use blocks), ``user``
        messages carrying tool results, then one ``result`` message."""
        queue = self._queue
        if queue is None:
            raise ValueError("nothing was sent: call send() first")
        while (item := await queue.get()) is not None:
            yield item

    def receive(self) -> AsyncIterator[dict[str, Any]]:
        """The same as :meth:`stream`."""
        return self.stream()

    async def close(self) -> None:
        """Cancel a running turn and end the session."""
        await self._stop()
        await self._session.close()

    async def _stop(self) -> None:
        task, self._task = self._task, None
        if task is not None and not task.done():
            task.cancel()
            with contextlib.suppress(asyncio.CancelledError, RunCancelled):
                await task

    async def _run(self, message: str, queue: asyncio.Queue[dict[str, Any] | None]) -> None:
        try:
            result = await self._turn(message, queue)
        except RunCancelled as error:
            result = self._error_result(f"cancelled: {error}")
        except ValueError as error:  # a prompt too long for the context, a bad option
            result = self._error_result(str(error))
        try:
            if result.get("subtype") == "error":  # the message a stream() reader waits for
                await queue.put({"type": "error", "error": {"message": result.get("result")}})
            await queue.put(result)
        finally:
            await queue.put(None)

    def _num_turns(self) -> int:
        """The assistant replies in the conversation (what ``TurnResult.num_turns`` counts)."""
        return sum(1 for message in self._session.messages if message.get("role") == "assistant")

    async def _turn(self, message: str, queue: asyncio.Queue[dict[str, Any] | None]) -> dict[str, Any]:
        def emit_turn(turn: ModelTurn) -> None:
            queue.put_nowait(assistant_message(turn))

        def emit_output(output: ToolOutput) -> None:
            queue.put_nowait(tool_result_message(output))

        def emit_piece(event: Event) -> None:
            if event.type == "text":
                queue.put_nowait(
                    {"type": "stream_event", "event": {"type": "text_delta", "text": event.text}}
                )

        hooks = LoopHooks(after_model=emit_turn, after_tool=emit_output)
        result = await self._session.run(
            message,
            toolkit=self._toolkit,
            max_turns=self._max_turns or DEFAULT_SESSION_TURNS,
            hooks=hooks,
            on_event=emit_piece if self._pieces else None,
        )
        return {**result.to_message(), "num_turns": self._num_turns()}

    def _error_result(self, message: str) -> dict[str, Any]:
        return {
            "type": "result",
            "subtype": "error",
            "result": message,
            "session_id": self.session_id,
            "total_cost_usd": 0.0,
            "duration_ms": 0,
            "num_turns": self._num_turns(),
            "usage": {},
            "is_error": True,
        }


def _is_stand_in(model: Any) -> bool:
    """True when ``model`` names no local model, so CLIKA_MODEL's model stands in for it."""
    if model is None:
        return True
    if not isinstance(model, str) or Path(model).exists():
        return False
    try:
        folder_to_load(model)
    except (FileNotFoundError, ValueError, ModelError):
        return True
    return False


def _loaded(model: Any, options: dict[str, Any]) -> tuple[Any, bool, bool]:
    """The model ``model`` names, whether it was loaded here (and is closed with its user), and
    whether CLIKA_MODEL's model stands in for it."""
    if isinstance(model, GenerativeModel):
        return model, False, False
    stand_in = os.environ.get("CLIKA_MODEL")
    if model is None:
        if not stand_in:
            raise ValueError("no model: pass model= (a model folder or name) or set CLIKA_MODEL")
        return load(stand_in, **options), True, True
    try:
        return load(model, **options), True, False
    except (FileNotFoundError, ValueError, ModelError) as error:
        if not isinstance(model, str) or Path(model).exists():
            raise  # a folder that is there but broken is its own error, never stood in for
        if not stand_in:
            raise ValueError(
                f"{model!r} is not a local model ({error}); pass a model folder or name, "
                "or set CLIKA_MODEL to the local model it stands for"
            ) from None
        return load(stand_in, **options), True, True

"""AsyncSession: one conversation held in an event loop, its turns run on a shared engine.

::

    chat = AsyncChat(model)
    session = chat.create_session(system="You are terse.")
    result = await session.send("My name is Ada.")        # a TurnResult
    async for event in session.stream("What is my name?"):
        if event.type == "text":
            print(event.text, end="")

A session's turns run one after another: a ``send`` waits for the session's
earlier ``send``; a new turn closes a stream that is still open. A turn joins
the history only when it completes; one cancelled (its cancel event, its task
cancelled, its stream closed or dropped) leaves the history as it was. A
session bound to a store saves the whole conversation after every completed
turn (one transaction in a durable store).
"""

from __future__ import annotations

import asyncio
import copy
from collections.abc import AsyncIterator, Callable, Mapping, Sequence
from typing import TYPE_CHECKING, Any

from clika_runtime.chat.history import checked_messages
from clika_runtime.chat.history_turns import tool_result_turn
from clika_runtime.chat.media_turns import attach_audio, attach_images, refuse_media_for
from clika_runtime.chat.tools.loop import LoopHooks
from clika_runtime.chat.tools.toolkit import Toolkit
from clika_runtime.engine.async_bridge import AsyncBridge
from clika_runtime.engine.config import GenerationConfig
from clika_runtime.sessions.prefill import prefill_partial_turn
from clika_runtime.sessions.results import Event, TurnResult
from clika_runtime.sessions.retry import RetryPolicy
from clika_runtime.sessions.run_result import RunResult
from clika_runtime.sessions.session_state import SessionHost, SessionState, new_session_id
from clika_runtime.sessions.stores.conversation_store import ConversationStore, checked_id
from clika_runtime.sessions.tool_run import run_on_session
from clika_runtime.sessions.turn import TurnHandle, TurnRun, TurnSpec, TurnStream

if TYPE_CHECKING:
    pass


class AsyncSession(SessionState):
    """A conversation that keeps its own history; ``send`` / ``stream`` its turns without blocking
    the event loop.

    ``cancel`` (an ``asyncio.Event``) is honoured by every turn: once set, the
    running turn stops at the engine's next step and raises
    :class:`~clika_runtime.sessions.results.RunCancelled`, as does every later
    turn until it is cleared. :meth:`set_options` sets decode options that
    persist across turns; keyword arguments of a turn override them for that
    turn only.
    """

    def __init__(
        self,
        chat: SessionHost,
        *,
        session_id: str | None = None,
        messages: Sequence[Mapping[str, Any]] = (),
        store: ConversationStore | None = None,
        cancel: asyncio.Event | None = None,
        tools: Sequence[Mapping[str, Any]] | None = None,
        options: Mapping[str, Any] | None = None,
    ) -> None:
        if cancel is not None and not isinstance(cancel, asyncio.Event):
            raise ValueError(f"cancel must be an asyncio.Event, got {type(cancel).__name__}")
        self._chat = chat
        self._id = checked_id(session_id) if session_id is not None else new_session_id()
        self._history = checked_messages(messages)
        self._store = store
        self._cancel = cancel
        self._tools = chat.checked_tools(tools)
        self._options: dict[str, Any] = {}
        self._live: TurnRun | None = None
        self._last: TurnResult | None = None
        self._save_lock = asyncio.Lock()
        self._closed = False
        if options:
            self.set_options(options)

    # -- turns -----------------------------------------------------------------------------------

    async def send(
        self,
        content: str,
        *,
        config: GenerationConfig | Mapping[str, Any] | None = None,
        tools: Sequence[Mapping[str, Any]] | None = None,
        cancel: asyncio.Event | None = None,
        images: Sequence[Any] = (),
        videos: Sequence[Any] = (),
        audio: Sequence[Any] = (),
        **overrides: Any,
    ) -> TurnResult:
        """Add a user turn and return the turn's result once the reply is complete.

        ``images`` ([H, W, 3] tensors), ``videos`` ((frames, timestamps) pairs, on a model
        whose ``supports_video``) and ``audio`` ([S] float mono clips, on a model whose
        ``supports_audio``) ride the user turn and stay in the history
        (a store keeps them; later turns render them again and reuse their KV);
        ``tools`` offers tool definitions for this turn (None: the session's);
        ``config`` and keyword arguments override the decode policy for this
        turn only; ``cancel`` is an extra cancel event for this turn. A failure
        of the engine comes back as a result with ``subtype == "error"``; a
        cancelled turn raises RunCancelled.
        """
        turn = self._user_turn(content, images, videos, audio)
        return await self._complete(self._spec(turn, config, tools, cancel, overrides, False))

    def stream(
        self,
        content: str,
        *,
        config: GenerationConfig | Mapping[str, Any] | None = None,
        tools: Sequence[Mapping[str, Any]] | None = None,
        cancel: asyncio.Event | None = None,
        images: Sequence[Any] = (),
        videos: Sequence[Any] = (),
        audio: Sequence[Any] = (),
        **overrides: Any,
    ) -> TurnStream:
        """Add a user turn and stream the reply: ``text``, ``thinking`` and ``tool_use`` events as
        the model makes them, then one ``result`` event (an ``error`` event before it when the
        engine failed). Arguments as for :meth:`send`."""
        turn = self._user_turn(content, images, videos, audio)
        spec = self._spec(turn, config, tools, cancel, overrides, True)
        return self._open(spec)

    async def respond(
        self,
        *,
        config: GenerationConfig | Mapping[str, Any] | None = None,
        tools: Sequence[Mapping[str, Any]] | None = None,
        cancel: asyncio.Event | None = None,
        **overrides: Any,
    ) -> TurnResult:
        """Run the conversation on from where it stands (after :meth:`add_tool_result`)."""
        if not self._history:
            raise ValueError("the conversation is empty: send a user turn first")
        return await self._complete(self._spec((), config, tools, cancel, overrides, False))

    async def run(
        self,
        prompt: str,
        *,
        toolkit: Toolkit,
        max_turns: int | None = None,
        hooks: LoopHooks | None = None,
        cancel: asyncio.Event | None = None,
        on_event: Callable[[Event], Any] | None = None,
        retry: RetryPolicy | None = None,
        **turn_options: Any,
    ) -> RunResult:
        """Add a user turn and run the model with ``toolkit``'s tools until it answers without a
        call (or ``max_turns`` model calls have run): every call is executed (the calls of one
        reply concurrently) and its output added as a tool turn. ``hooks`` audit, veto or
        rewrite model and tool calls; a fired cancel event (the session's or ``cancel``) raises
        RunCancelled. ``on_event`` (a function or coroutine function) receives each model turn's
        streamed text, thinking and tool_use events as they are made. Keyword arguments are each
        model turn's options (as for :meth:`send`)."""
        return await run_on_session(
            self,
            prompt,
            toolkit,
            max_turns=max_turns,
            hooks=hooks,
            cancel=cancel,
            on_event=on_event,
            turn_options=turn_options,
            retry=retry,
        )

    def respond_stream(
        self,
        *,
        config: GenerationConfig | Mapping[str, Any] | None = None,
        tools: Sequence[Mapping[str, Any]] | None = None,
        cancel: asyncio.Event | None = None,
        **overrides: Any,
    ) -> TurnStream:
        """:meth:`respond`, streamed as :meth:`stream`'s events."""
        if not self._history:
            raise ValueError("the conversation is empty: send a user turn first")
        return self._open(self._spec((), config, tools, cancel, overrides, True))

    async def prefill(self, partial_text: str, *, tools: Sequence[Mapping[str, Any]] | None = None) -> int:
        """Compute ahead of time the KV of a user turn that begins with ``partial_text`` (see
        :mod:`clika_runtime.sessions.prefill`): a later :meth:`send` of a text starting the same
        way reuses it. Returns how many prompt tokens are now computed."""
        if not isinstance(partial_text, str):
            raise ValueError(f"partial_text must be a string, got {type(partial_text).__name__}")
        spec = self._spec((), None, tools, None, {}, False)
        return await prefill_partial_turn(self._chat, self._history, partial_text, spec.tools, spec.policy)

    def add_tool_result(self, call_id: str, content: str, *, name: str = "") -> None:
        """Append a tool's answer as a tool turn (a running turn is cancelled first);
        :meth:`respond` then runs the model on."""
        turn = tool_result_turn(call_id, content, name)  # checked before the running turn is cancelled
        self._interrupt("a tool result was added to the conversation")
        self._history.append(turn)

    # -- editing the conversation ------------------------------------------------------------------

    def fork(self, session_id: str | None = None) -> AsyncSession:
        """A new conversation starting from this one's history (and options, tools and store);
        it is saved at its first turn or :meth:`save`."""
        forked = AsyncSession(
            self._chat, session_id=session_id, messages=self._history, store=self._store, tools=self._tools
        )
        forked._options = dict(self._options)
        return forked

    async def close(self) -> None:
        """Cancel a running turn (its slot is free on return); later turns raise ValueError."""
        self._closed = True
        live = self._live
        if live is not None:
            live.cancel("the session was closed")
            await live.wait_request_end()

    async def __aenter__(self) -> AsyncSession:
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.close()

    # -- the machinery ---------------------------------------------------------------------------

    def _user_turn(
        self, content: str, images: Sequence[Any], videos: Sequence[Any], audio: Sequence[Any]
    ) -> tuple[dict[str, Any], ...]:
        if not isinstance(content, str):
            raise ValueError(f"content must be a string, got {type(content).__name__}")
        refuse_media_for(self._chat.model, images, audio, videos)
        turn = attach_images({"role": "user", "content": content}, images, videos)
        return (attach_audio(turn, audio),)

    def _spec(
        self,
        new_turns: tuple[dict[str, Any], ...],
        config: GenerationConfig | Mapping[str, Any] | None,
        tools: Sequence[Mapping[str, Any]] | None,
        cancel: asyncio.Event | None,
        overrides: Mapping[str, Any],
        streamed: bool,
    ) -> TurnSpec:
        if self._closed:
            raise ValueError("this session is closed")
        if cancel is not None and not isinstance(cancel, asyncio.Event):
            raise ValueError(f"cancel must be an asyncio.Event, got {type(cancel).__name__}")
        base = self._chat.defaults.overlay(self._options)
        policy = GenerationConfig.resolve(base, config, overrides)
        offered = self._chat.checked_tools(tools) if tools is not None else self._tools
        cancels = tuple(event for event in (self._cancel, cancel) if event is not None)
        return TurnSpec(new_turns, policy, offered, cancels, streamed)

    async def _complete(self, spec: TurnSpec) -> TurnResult:
        stream = self._open(spec)
        async with stream:
            return await stream.collect()

    def _open(self, spec: TurnSpec) -> TurnStream:
        handle = TurnHandle(session_id=self._id)
        return TurnStream(self._turn(spec, handle), handle)

    async def _turn(self, spec: TurnSpec, handle: TurnHandle) -> AsyncIterator[Event]:
        run = await self._claim(spec)
        handle.run = run
        try:
            await self._submit(run)
            async for event in run.events():
                yield event
            result = await self._finish(run)
            handle.result = result
            if result.is_error:
                yield Event("error", text=result.result)
            yield Event("result", result=result)
        finally:
            await run.stop()
            self._release(run)

    async def _claim(self, spec: TurnSpec) -> TurnRun:
        """Wait for the session's earlier turn (closing an open stream), then make this turn live."""
        while self._live is not None:
            live = self._live
            if live.streamed:
                live.cancel("a newer turn on this session closed the stream")
                await live.wait_request_end()
                self._release(live)
            else:
                await asyncio.shield(live.finished)
        if self._closed:
            raise ValueError("this session is closed")
        run = TurnRun(spec, asyncio.get_running_loop())
        self._live = run
        return run

    async def _submit(self, run: TurnRun) -> None:
        run.raise_if_cancelled()
        messages = [*self._history, *run.spec.new_turns]
        loop = asyncio.get_running_loop()
        # Rendering a long history and tokenizing it is CPU work: keep it off the loop.
        run.prepared = await loop.run_in_executor(
            None, self._chat.prepare, messages, run.spec.tools, run.spec.policy
        )
        run.raise_if_cancelled()
        request = self._chat.submit(run.prepared, run.spec.policy)
        run.request = request
        run.bridge = AsyncBridge(
            iter(request), loop, request.cancel, name=f"clika-bridge-{request.request_id}"
        )

    async def _finish(self, run: TurnRun) -> TurnResult:
        report = run.report
        assert report is not None
        if report.finish_reason == "error":
            return run.result(self._id, self._history)
        run.raise_if_cancelled()  # no await between this check and the commit
        self._history.extend([*copy.deepcopy(run.spec.new_turns), run.reply_message()])
        result = run.result(self._id, self._history)
        self._last = result
        if self._store is not None:
            await self.save()
        return result

    def _release(self, run: TurnRun) -> None:
        if self._live is run:
            self._live = None
        if not run.finished.done():
            run.finished.set_result(None)

    def _interrupt(self, reason: str) -> None:
        live, self._live = self._live, None
        if live is not None:
            live.cancel(reason)

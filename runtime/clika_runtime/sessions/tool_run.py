"""The tool-running loop on an async session (what it hands back: ``run_result.RunResult``).

``await session.run(prompt, toolkit=kit)`` runs the loop of
:mod:`clika_runtime.chat.tools.loop` on an :class:`AsyncSession`: each model
turn is a turn of the session (so it is saved, cancellable and shares the
model's engine), each tool output a tool turn. ``AsyncChat.conversation(kit,
cancel=event)`` gives a :class:`ToolConversation`, the shape agent clients know
(``messages``, ``await send(prompt)``, ``reset()``), whose every send runs the loop.
"""

from __future__ import annotations

import asyncio
import contextlib
import inspect
from collections.abc import AsyncIterator, Callable, Mapping
from typing import Any, Protocol

from clika_runtime.chat.tools.loop import LoopCancelled, LoopHooks, ModelTurn, Veto, run_tool_loop
from clika_runtime.chat.tools.toolkit import Toolkit, ToolOutput
from clika_runtime.sessions.results import Event, RunCancelled, TurnResult
from clika_runtime.sessions.retry import RetryPolicy
from clika_runtime.sessions.run_result import RunResult
from clika_runtime.sessions.turn import TurnStream


class ToolRunHost(Protocol):
    """The session a tool run drives: what the loop needs of it (``sessions.session.AsyncSession`` is one)."""

    @property
    def session_id(self) -> str: ...

    @property
    def messages(self) -> list[dict[str, Any]]: ...

    @property
    def transcript(self) -> list[dict[str, Any]]: ...

    @property
    def closed(self) -> bool: ...

    @property
    def cancel_event(self) -> asyncio.Event | None: ...

    async def send(self, content: str, **options: Any) -> TurnResult: ...

    async def respond(self, **options: Any) -> TurnResult: ...

    def stream(self, content: str, **options: Any) -> TurnStream: ...

    def respond_stream(self, **options: Any) -> TurnStream: ...

    def add_tool_result(self, call_id: str, content: str, *, name: str = "") -> None: ...

    def reset(self, *, keep_system: bool = True) -> None: ...

    async def run(self, prompt: str, **options: Any) -> RunResult: ...


class SessionConversation:
    """The loop's driver over one async session (its turns honour ``cancel`` too)."""

    def __init__(
        self,
        session: ToolRunHost,
        cancel: asyncio.Event | None,
        turn_options: Mapping[str, Any],
        on_event: Callable[[Event], Any] | None = None,
        retry: RetryPolicy | None = None,
    ) -> None:
        self._session = session
        self._cancel = cancel
        self._options = dict(turn_options)
        self._on_event = on_event
        self._retry = retry or RetryPolicy(retries=0)

    @property
    def messages(self) -> list[dict[str, Any]]:
        return self._session.messages

    async def ask(self, prompt: str, tools: list[dict[str, Any]]) -> ModelTurn:
        options = {"tools": tools, "cancel": self._cancel, **self._options}
        if self._on_event is None:
            return model_turn(await self._retry.run(lambda: self._session.send(prompt, **options)))
        return await self._retry.run(lambda: self._streamed(self._session.stream(prompt, **options)))

    async def resume(self, tools: list[dict[str, Any]]) -> ModelTurn:
        options = {"tools": tools, "cancel": self._cancel, **self._options}
        if self._on_event is None:
            return model_turn(await self._retry.run(lambda: self._session.respond(**options)))
        return await self._retry.run(lambda: self._streamed(self._session.respond_stream(**options)))

    async def _streamed(self, stream: TurnStream) -> ModelTurn:
        async with stream:
            async for event in stream:
                if event.type not in ("result", "error"):
                    outcome = self._on_event(event)  # type: ignore[misc]
                    if inspect.isawaitable(outcome):
                        await outcome
        assert stream.result is not None
        return model_turn(stream.result)

    def add_tool_output(self, output: ToolOutput) -> None:
        self._session.add_tool_result(output.call.id, output.content, name=output.call.name)

    def cancelled(self) -> bool:
        return self._session.closed or any(event.is_set() for event in self._cancels())

    def _cancels(self) -> list[asyncio.Event]:
        return [event for event in (self._session.cancel_event, self._cancel) if event is not None]


async def run_on_session(
    session: ToolRunHost,
    prompt: str,
    toolkit: Toolkit,
    *,
    max_turns: int | None,
    hooks: LoopHooks | None,
    cancel: asyncio.Event | None,
    turn_options: Mapping[str, Any],
    on_event: Callable[[Event], Any] | None = None,
    retry: RetryPolicy | None = None,
) -> RunResult:
    """Run the loop on ``session``; a fired cancel event raises RunCancelled. A toolkit adapted
    from a foreign one stops at a call that suspends (the result's ``pending`` holds its request)."""
    driver = SessionConversation(session, cancel, turn_options, on_event, retry)
    pending = getattr(toolkit, "pending", None)
    mark = None if pending is None else len(pending)
    try:
        loop = await run_tool_loop(
            driver, prompt, toolkit, max_turns=max_turns, hooks=_stopping_at_suspension(hooks, pending, mark)
        )
    except LoopCancelled as error:
        raise RunCancelled(str(error)) from None
    suspended = None if pending is None or mark is None or len(pending) <= mark else pending[mark]
    model = getattr(session, "model_id", "")
    return RunResult(loop, session.session_id, tuple(session.messages), model=model, pending=suspended)


def _stopping_at_suspension(
    hooks: LoopHooks | None, pending: list[Any] | None, mark: int | None
) -> LoopHooks | None:
    """``hooks`` with a ``before_model`` that ends the loop once a call suspended (the model
    would otherwise read a placeholder as the tool's answer)."""
    if pending is None or mark is None:
        return hooks
    given = hooks or LoopHooks()

    async def before_model(messages: list[dict[str, Any]]) -> Any:
        if len(pending) > mark:
            return Veto("a tool call is waiting for an answer (pending)")
        if given.before_model is None:
            return None
        outcome = given.before_model(messages)
        return await outcome if inspect.isawaitable(outcome) else outcome

    return LoopHooks(before_model, given.after_model, given.before_tool, given.after_tool)


def model_turn(result: TurnResult) -> ModelTurn:
    """A session turn's result as one model call of the loop."""
    return ModelTurn(
        text=result.result if not result.is_error else "",
        tool_calls=tuple(result.tool_calls),
        usage=dict(result.usage),
        error=result.result if result.is_error else None,
        detail=result,
    )


class ToolConversation:
    """One conversation whose every :meth:`send` runs the tool loop with the same toolkit.

    ``messages`` is the running transcript itself (read it directly, hand it to
    ``AsyncChat.run(..., history=...)``, or assign to it to continue another
    one); :meth:`reset` clears it to ``[]``, and the next send starts afresh
    with the system turn (the chat's system prompt and the toolkit's skills
    catalog). The cancel event given at creation is honoured by every send (a
    fired one raises RunCancelled); ``retry`` retries a model turn the engine's
    full queue refused."""

    def __init__(
        self,
        session: ToolRunHost,
        toolkit: Toolkit,
        *,
        cancel: asyncio.Event | None = None,
        max_turns: int | None = None,
        hooks: LoopHooks | None = None,
        system: str = "",
        retry: RetryPolicy | None = None,
    ) -> None:
        self._session = session
        self._toolkit = toolkit
        self._cancel = cancel
        self._max_turns = max_turns
        self._hooks = hooks
        self._system = system
        self._retry = retry

    @property
    def session(self) -> ToolRunHost:
        return self._session

    @property
    def toolkit(self) -> Toolkit:
        return self._toolkit

    @property
    def messages(self) -> list[dict[str, Any]]:
        """The running transcript itself (no copy on read)."""
        return self._session.transcript

    @messages.setter
    def messages(self, messages: list[dict[str, Any]]) -> None:
        self._session.messages = messages

    async def send(self, prompt: str, **turn_options: Any) -> RunResult:
        """The next user turn, tools run until the model answers."""
        return await self._run(prompt, None, turn_options)

    async def stream(self, prompt: str, **turn_options: Any) -> AsyncIterator[dict[str, Any]]:
        """:meth:`send`, streamed as agent clients' events: ``{"type": "text", "delta"}`` as the
        model writes, ``tool_call`` (``id``, ``name``, ``args``) and ``tool_result`` (``id``,
        ``name``, ``output``, ``is_error``) per call, ``pending`` (``request``) when a call
        suspends, then ``usage`` and ``done`` (``result``: the RunResult)."""
        events: asyncio.Queue[dict[str, Any] | None] = asyncio.Queue()
        task = asyncio.ensure_future(self._run(prompt, events, turn_options))
        task.add_done_callback(lambda _: events.put_nowait(None))
        try:
            while (event := await events.get()) is not None:
                yield event
            result = await task
            yield {"type": "usage", "usage": result.usage}
            yield {"type": "done", "result": result}
        finally:
            if not task.done():
                task.cancel()
                with contextlib.suppress(asyncio.CancelledError, RunCancelled):
                    await task

    def reset(self) -> None:
        """Clear the transcript: the next send starts a fresh conversation."""
        self._session.reset(keep_system=False)

    async def _run(
        self,
        prompt: str,
        events: asyncio.Queue[dict[str, Any] | None] | None,
        turn_options: Mapping[str, Any],
    ) -> RunResult:
        if self._cancel is not None and self._cancel.is_set():
            raise RunCancelled("the conversation's cancel event is set")
        if not self._session.messages and self._system:
            self._session.messages = [{"role": "system", "content": self._system}]
        hooks = self._hooks if events is None else _emitting(self._hooks, events, self._toolkit)
        return await run_on_session(
            self._session,
            prompt,
            self._toolkit,
            max_turns=self._max_turns,
            hooks=hooks,
            cancel=self._cancel,
            on_event=None if events is None else _text_to(events),
            turn_options=turn_options,
            retry=self._retry,
        )


def _text_to(events: asyncio.Queue[dict[str, Any] | None]) -> Callable[[Event], None]:
    def on_event(event: Event) -> None:
        if event.type == "text" and event.text:
            events.put_nowait({"type": "text", "delta": event.text})

    return on_event


def _emitting(
    hooks: LoopHooks | None, events: asyncio.Queue[dict[str, Any] | None], toolkit: Toolkit
) -> LoopHooks:
    """``hooks`` that also put each model turn's calls and each call's output on ``events``."""
    given = hooks or LoopHooks()
    pending = getattr(toolkit, "pending", None)
    emitted = [0 if pending is None else len(pending)]  # suspensions already announced

    async def after_model(turn: ModelTurn) -> Any:
        for call in turn.tool_calls:
            events.put_nowait(
                {"type": "tool_call", "id": call.id, "name": call.name, "args": dict(call.arguments)}
            )
        return await _maybe(given.after_model, turn)

    async def after_tool(output: ToolOutput) -> Any:
        rewritten = await _maybe(given.after_tool, output)
        final = rewritten if isinstance(rewritten, ToolOutput) else output
        content = rewritten if isinstance(rewritten, str) else final.content
        while pending is not None and emitted[0] < len(pending):
            events.put_nowait({"type": "pending", "request": pending[emitted[0]]})
            emitted[0] += 1
        call = output.call
        result = {"type": "tool_result", "id": call.id, "name": call.name, "output": content}
        events.put_nowait({**result, "is_error": final.is_error})
        return rewritten

    return LoopHooks(given.before_model, after_model, given.before_tool, after_tool)


async def _maybe(hook: Callable[..., Any] | None, value: Any) -> Any:
    if hook is None:
        return None
    outcome = hook(value)
    return await outcome if inspect.isawaitable(outcome) else outcome

"""One turn of an async session: what was asked, the reply being made, and its stream.

:class:`TurnRun` is a reply on the engine: it reads the request's deltas
through the engine's :class:`~clika_runtime.engine.async_bridge.AsyncBridge`, splits them
into the reply's channels (visible text, reasoning, tool calls) and stops the
request when cancelled. :class:`TurnStream` is what a caller iterates; it holds
no reference its generator holds back, so dropping it cancels the reply at
once (reference counting runs ``__del__``).
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import AsyncIterator, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from clika_runtime.chat.history_turns import assistant_turn
from clika_runtime.chat.reply.events import CallDelta, ReasoningDelta, ReplyEvent, ReplyReader, TextDelta
from clika_runtime.chat.turn import Turn
from clika_runtime.engine.async_bridge import AsyncBridge
from clika_runtime.engine.config import GenerationConfig
from clika_runtime.engine.engine import RequestStream
from clika_runtime.engine.report import GenerationReport
from clika_runtime.forwarded import Forwarded
from clika_runtime.sessions.results import Event, RunCancelled, TurnResult

# The prepared turn a run carries, by the name the sessions knew it under.
Prepared = Turn


@dataclass(frozen=True)
class TurnSpec:
    """A turn as asked: the turns it adds (a user turn, or none to run on), its decode policy,
    the tools it offers, the cancel events it honours and whether it is streamed."""

    new_turns: tuple[dict[str, Any], ...]
    policy: GenerationConfig
    tools: list[dict[str, Any]] | None
    cancels: tuple[asyncio.Event, ...] = ()
    streamed: bool = False


class TurnRun:
    """A reply being generated for one turn (see the module docstring)."""

    def __init__(self, spec: TurnSpec, loop: asyncio.AbstractEventLoop) -> None:
        self.spec = spec
        self.started = time.perf_counter()
        self.finished: asyncio.Future[None] = loop.create_future()
        self.cancel_reason: str | None = None
        self.bridge: AsyncBridge | None = None
        self.request: RequestStream | None = None
        self.prepared: Turn | None = None
        self._watchers: list[asyncio.Task[Any]] = []
        for event in spec.cancels:
            self._watch(event, loop)

    @property
    def streamed(self) -> bool:
        return self.spec.streamed

    @property
    def report(self) -> GenerationReport | None:
        return None if self.request is None else self.request.report

    # -- cancelling ------------------------------------------------------------------------------

    def cancel(self, reason: str) -> None:
        """Stop the reply at the engine's next step; the turn then raises RunCancelled(reason)."""
        if self.cancel_reason is None:
            self.cancel_reason = reason
        if self.bridge is not None:
            self.bridge.cancel()

    def raise_if_cancelled(self) -> None:
        if self.cancel_reason is None:
            for event in self.spec.cancels:
                if event.is_set():
                    self.cancel_reason = "the turn's cancel event was set"
        if self.cancel_reason is not None:
            raise RunCancelled(self.cancel_reason)

    def _watch(self, event: asyncio.Event, loop: asyncio.AbstractEventLoop) -> None:
        watcher = loop.create_task(event.wait())
        watcher.add_done_callback(self._on_cancel_event)
        self._watchers.append(watcher)

    def _on_cancel_event(self, watcher: asyncio.Task[Any]) -> None:
        if not watcher.cancelled():
            self.cancel("the turn's cancel event was set")

    async def stop(self) -> None:
        """End the turn's machinery: a reply still running is cancelled and its end awaited
        (the engine slot is free when this returns)."""
        for watcher in self._watchers:
            watcher.cancel()
        if self.bridge is not None and not self.bridge.ended.done():
            self.bridge.cancel()
            await self.bridge.wait_end()

    async def wait_request_end(self) -> None:
        """Wait until the engine no longer works on this turn."""
        if self.bridge is None:
            await asyncio.shield(self.finished)
        else:
            await self.bridge.wait_end()

    # -- the reply -------------------------------------------------------------------------------

    async def events(self) -> AsyncIterator[Event]:
        """The reply's text, thinking and tool_use events as the engine makes them; raises
        RunCancelled once the request ended if the turn was cancelled."""
        assert self.bridge is not None and self.prepared is not None
        reader = ReplyReader(self.prepared.parser)
        while (delta := await self.bridge.next()) is not None:
            if self.cancel_reason is None and delta.text:
                for event in public_events(reader.feed(delta.text)):
                    yield event
        report = self.report
        if self.cancel_reason is not None or (report is not None and report.finish_reason == "cancelled"):
            raise RunCancelled(self.cancel_reason or "the engine closed before the reply ended")
        for event in public_events(reader.finish(reasoning_first=True)):
            yield event

    def reply_message(self) -> dict[str, Any]:
        """The assistant turn the reply adds to the history."""
        assert self.prepared is not None
        parser = self.prepared.parser
        return assistant_turn(parser.text, parser.tool_calls, parser.reasoning)

    def result(self, session_id: str, history: Sequence[Mapping[str, Any]]) -> TurnResult:
        """The turn's result (``history``: the conversation after it)."""
        assert self.prepared is not None
        report = self.report
        assert report is not None
        parser = self.prepared.parser
        failed = report.finish_reason == "error"
        return TurnResult(
            result=(report.error or "the engine failed this request") if failed else parser.text,
            session_id=session_id,
            subtype="error" if failed else "success",
            duration_ms=round((time.perf_counter() - self.started) * 1000),
            num_turns=sum(1 for message in history if message.get("role") == "assistant"),
            usage={
                "input_tokens": report.prompt_tokens,
                "output_tokens": report.completion_tokens,
                "cache_read_input_tokens": report.cached_tokens,
            },
            finish_reason="tool_calls" if parser.tool_calls else report.finish_reason,
            reasoning=parser.reasoning,
            tool_calls=tuple(parser.tool_calls),
            error=report.error if failed else None,
            messages=tuple(dict(message) for message in history),
            prompt_text=self.prepared.prompt_text,
        )


def public_events(events: Sequence[ReplyEvent]) -> list[Event]:
    """The reply events in the sessions' public shape."""
    out: list[Event] = []
    for event in events:
        if isinstance(event, TextDelta):
            out.append(Event("text", text=event.text))
        elif isinstance(event, ReasoningDelta):
            out.append(Event("thinking", text=event.text))
        elif isinstance(event, CallDelta):
            out.append(Event("tool_use", tool_call=event.call))
    return out


@dataclass
class TurnHandle:
    """What a TurnStream and its generator share: the run once started, the result once made."""

    run: TurnRun | None = None
    result: TurnResult | None = None
    session_id: str = ""


class TurnStream:
    """The events of one turn: ``async for event in stream``; ``result`` once it ended.

    The turn starts at the first ``__anext__``. ``aclose()`` (or leaving
    ``async with``), cancelling the task that iterates it, or dropping the
    stream stops the decode at the engine's next step and frees its slot; a
    turn that did not reach its result never joins the history.
    """

    def __init__(self, events: AsyncIterator[Event], handle: TurnHandle) -> None:
        self._events = events
        self._handle = handle

    session_id = Forwarded[str]("_handle")
    # The turn's result once the stream yielded it, else None.
    result = Forwarded[TurnResult | None]("_handle")

    @property
    def report(self) -> GenerationReport | None:
        """How the turn's request ended (None before it started and while it runs)."""
        run = self._handle.run
        return None if run is None else run.report

    def __aiter__(self) -> TurnStream:
        return self

    async def __anext__(self) -> Event:
        return await self._events.__anext__()

    def cancel(self) -> None:
        """Stop the reply at the engine's next step; iterating on raises RunCancelled."""
        run = self._handle.run
        if run is not None:
            run.cancel("the stream was cancelled")

    async def aclose(self) -> None:
        """Stop the turn; returns once the engine freed its slot."""
        await self._events.aclose()  # type: ignore[attr-defined]

    async def collect(self) -> TurnResult:
        """Read the stream to its end and return the result."""
        async for _ in self:
            pass
        assert self._handle.result is not None
        return self._handle.result

    async def __aenter__(self) -> TurnStream:
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.aclose()

    def __del__(self) -> None:
        run = self._handle.run
        if run is not None and self._handle.result is None:
            run.cancel("the stream was dropped")

"""Replies over HTTP: whole (gathered) or streamed, cancelled when the client leaves, ended on shutdown.

Every front end (OpenAI's, the Responses API, Ollama's) writes its stream
through :class:`EventStream`: a listener beside the writer cancels the decode
the moment the client disconnects, and when the server shuts down each open
stream stops reading the model and writes its protocol's farewell (an error
event, and ``[DONE]`` where the protocol has one) before the connection
closes, so no client sees a stream simply cut.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Callable
from dataclasses import dataclass, field

import anyio
from starlette.requests import Request
from starlette.responses import StreamingResponse
from starlette.types import Receive, Scope, Send

from clika_runtime.chat.tools.definitions import ToolCall
from clika_runtime.engine.report import GenerationReport
from clika_runtime.server.backend import CallDelta, Event, Finished, ReasoningDelta, ReplyRun, TextDelta
from clika_runtime.server.boundary import log_fault
from clika_runtime.server.bridge import run_events
from clika_runtime.server.errors import ApiError

SHUTDOWN_MESSAGE = "the server is shutting down; the reply ends here"


@dataclass
class Reply:
    """A whole reply gathered from its events (the non-streamed answer)."""

    text: list[str] = field(default_factory=list)
    reasoning: list[str] = field(default_factory=list)
    calls: list[ToolCall] = field(default_factory=list)
    finished: Finished | None = None
    echoed: bool = False  # text[0] is the prompt, put back by ``echo``

    def add(self, event: Event) -> None:
        if isinstance(event, TextDelta):
            self.text.append(event.text)
        elif isinstance(event, ReasoningDelta):
            self.reasoning.append(event.text)
        elif isinstance(event, CallDelta):
            self.calls.append(event.call)
        else:
            self.finished = event


class Closing:
    """Set once when the server begins to shut down (from the event loop's thread)."""

    def __init__(self) -> None:
        self.event = asyncio.Event()

    def begin(self) -> None:
        self.event.set()

    @property
    def closing(self) -> bool:
        return self.event.is_set()

    async def wait(self) -> None:
        await self.event.wait()


async def gather(
    runs: list[ReplyRun], request: Request, closing: Closing, record: Callable[[GenerationReport], None]
) -> list[Reply]:
    """The whole replies (each report handed to ``record``); a client that leaves cancels every decode
    of its request; shutdown is a 503."""
    watchers = [
        asyncio.ensure_future(_cancel_on_disconnect(request, runs)),
        asyncio.ensure_future(closing.wait()),
    ]
    replies = asyncio.ensure_future(asyncio.gather(*(collect(run, record) for run in runs)))
    try:
        await asyncio.wait([replies, watchers[1]], return_when=asyncio.FIRST_COMPLETED)
        if not replies.done():
            replies.cancel()
            raise ApiError(503, SHUTDOWN_MESSAGE, code="server_shutting_down")
        return list(replies.result())
    finally:
        for watcher in watchers:
            watcher.cancel()
        for run in runs:  # no-op for finished runs; stops the others when one failed
            run.cancel()


async def collect(run: ReplyRun, record: Callable[[GenerationReport], None]) -> Reply:
    reply = Reply()
    try:
        async for event in run_events(run):
            reply.add(event)
    except RuntimeError as exc:  # the engine failed this reply: a server fault, named and logged once
        ident = log_fault("generation", exc)
        raise ApiError(500, f"{exc} ({ident})", code="generation_failed") from None
    if reply.finished is not None:
        record(reply.finished.report)
    return reply


async def _cancel_on_disconnect(request: Request, runs: list[ReplyRun]) -> None:
    while True:
        message = await request.receive()
        if message["type"] == "http.disconnect":
            for run in runs:
                run.cancel()
            return


async def guarded(
    chunks: AsyncIterator[bytes], where: str, failure: Callable[[str], bytes]
) -> AsyncIterator[bytes]:
    """``chunks``, except that a fault after the headers went out travels in the stream as ``failure(message)``."""
    try:
        async for chunk in chunks:
            yield chunk
    except Exception as exc:
        ident = log_fault(where, exc)
        yield failure(f"{exc} ({ident})" if isinstance(exc, RuntimeError) else f"internal error {ident}")
    finally:
        await chunks.aclose()  # type: ignore[attr-defined]  # the inner stream's own cleanup runs now


class EventStream(StreamingResponse):
    """A streamed reply that stops (and calls ``on_close``) the moment the client leaves or the server stops.

    Starlette's StreamingResponse notices a disconnect only on its next write
    under some servers; here a listener runs beside the writer, so a request
    still waiting in the queue, or in a long prefill, is cancelled at once.
    On shutdown the writer stops and ``farewell()`` (the protocol's error
    event and end marker) is the last thing written.
    """

    def __init__(
        self,
        chunks: AsyncIterator[bytes],
        on_close: Callable[[], None],
        closing: Closing,
        farewell: Callable[[], bytes],
        media_type: str = "text/event-stream",
    ) -> None:
        headers = {"cache-control": "no-cache", "x-accel-buffering": "no"}
        super().__init__(chunks, media_type=media_type, headers=headers)
        self.chunks = chunks
        self.on_close = on_close
        self.closing = closing
        self.farewell = farewell

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        try:
            async with anyio.create_task_group() as group:
                group.start_soon(self._stream, send, group.cancel_scope)
                await _wait_for_disconnect(receive)
                group.cancel_scope.cancel()
        finally:
            self.on_close()
            await self.chunks.aclose()  # type: ignore[attr-defined]

    async def _stream(self, send: Send, outer: anyio.CancelScope) -> None:
        await send({"type": "http.response.start", "status": self.status_code, "headers": self.raw_headers})
        stopped = False
        async with anyio.create_task_group() as writing:

            async def stop_on_shutdown() -> None:
                nonlocal stopped
                await self.closing.wait()
                stopped = True
                writing.cancel_scope.cancel()

            writing.start_soon(stop_on_shutdown)
            async for chunk in self.chunks:
                await send({"type": "http.response.body", "body": chunk, "more_body": True})
            writing.cancel_scope.cancel()
        if stopped:
            self.on_close()  # the decode stops at the engine's next step
            await send({"type": "http.response.body", "body": self.farewell(), "more_body": True})
        await send({"type": "http.response.body", "body": b"", "more_body": False})
        outer.cancel()


async def _wait_for_disconnect(receive: Receive) -> None:
    while (await receive())["type"] != "http.disconnect":
        pass

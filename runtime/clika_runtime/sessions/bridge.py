"""Carry one engine request's deltas into an asyncio event loop.

The engine hands a request's deltas to a thread-safe queue that blocks its
reader. A small forwarding thread per request blocks on it instead of the
loop, and passes each delta over with ``loop.call_soon_threadsafe`` into an
``asyncio.Queue`` the turn awaits: the loop never blocks and never polls.
"""

from __future__ import annotations

import asyncio
import threading
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from clika_runtime.engine.engine import Delta, RequestStream

_END = object()


class EngineBridge:
    """The deltas of ``request`` on ``loop``: ``await next_delta()`` until it answers None.

    ``ended`` is a future on the loop that completes once the request's end has
    arrived (whoever reads the deltas), so a caller may wait for a cancelled
    request to free its slot without draining it.
    """

    def __init__(self, request: RequestStream, loop: asyncio.AbstractEventLoop) -> None:
        self.request = request
        self._loop = loop
        self._deltas: asyncio.Queue[Any] = asyncio.Queue()
        self.ended: asyncio.Future[None] = loop.create_future()
        self._thread = threading.Thread(
            target=self._forward, name=f"clika-bridge-{request.request_id}", daemon=True
        )
        self._thread.start()

    async def next_delta(self) -> Delta | None:
        """The next delta, or None once the request ended (``request.report`` is then set)."""
        if self.ended.done() and self._deltas.empty():
            return None
        item = await self._deltas.get()
        return None if item is _END else item

    async def wait_end(self) -> None:
        """Return once the request ended (its slot is free by then)."""
        await asyncio.shield(self.ended)

    def cancel(self) -> None:
        """Stop the request at the engine's next step (thread-safe; no-op once it ended)."""
        self.request.cancel()

    # -- the forwarding thread -------------------------------------------------------------------

    def _forward(self) -> None:
        try:
            for delta in self.request:
                self._post(delta)
        finally:
            self._post(_END)

    def _post(self, item: Any) -> None:
        try:
            self._loop.call_soon_threadsafe(self._arrive, item)
        except RuntimeError:  # the loop is closed: nobody will read the reply, stop making it
            self.request.cancel()

    def _arrive(self, item: Any) -> None:
        self._deltas.put_nowait(item)
        if item is _END and not self.ended.done():
            self.ended.set_result(None)

"""Carry a blocking stream of the engine into an asyncio event loop: the one bridge every async caller uses.

A request's output arrives on a thread-safe queue that blocks its reader (a
``RequestStream``, or an iterator draining one, such as a server reply's
events). A small forwarding thread per stream blocks on it instead of the
loop and passes each item over with ``loop.call_soon_threadsafe`` into an
``asyncio.Queue`` the caller awaits: the loop never blocks and never polls.
"""

from __future__ import annotations

import asyncio
import threading
from collections.abc import Callable, Iterator
from typing import Any

_END = object()


class _Failure:
    def __init__(self, error: BaseException) -> None:
        self.error = error


class AsyncBridge:
    """The items of ``items`` on ``loop``: ``await next()`` until it answers None.

    ``cancel`` stops the stream's request (called by :meth:`cancel`, and when
    the loop is gone so nobody will read the rest). An exception raised by the
    iterator is raised by ``next``. ``ended`` is a future on the loop that
    completes once the stream's end has arrived, whoever reads the items, so a
    caller may wait for a cancelled request to free its slot without draining it.
    """

    def __init__(
        self,
        items: Iterator[Any],
        loop: asyncio.AbstractEventLoop,
        cancel: Callable[[], None],
        *,
        name: str = "clika-bridge",
    ) -> None:
        self._items = items
        self._loop = loop
        self._cancel = cancel
        self._queue: asyncio.Queue[Any] = asyncio.Queue()
        self.ended: asyncio.Future[None] = loop.create_future()
        self._thread = threading.Thread(target=self._forward, name=name, daemon=True)
        self._thread.start()

    async def next(self) -> Any:
        """The next item, or None once the stream ended."""
        if self.ended.done() and self._queue.empty():
            return None
        item = await self._queue.get()
        if isinstance(item, _Failure):
            raise item.error
        return None if item is _END else item

    async def wait_end(self) -> None:
        """Return once the stream ended (its request's slot is free by then)."""
        await asyncio.shield(self.ended)

    def cancel(self) -> None:
        """Stop the stream's request at the engine's next step (thread-safe; no-op once it ended)."""
        self._cancel()

    # -- the forwarding thread -------------------------------------------------------------------

    def _forward(self) -> None:
        end: Any = _END
        try:
            for item in self._items:
                if not self._post(item):
                    close = getattr(self._items, "close", None)
                    if close is not None:
                        close()
                    return
        except Exception as exc:  # handed to the reader, which raises it
            end = _Failure(exc)
        self._post(end)

    def _post(self, item: Any) -> bool:
        try:
            self._loop.call_soon_threadsafe(self._arrive, item)
            return True
        except RuntimeError:  # the loop is closed: nobody will read the reply, stop making it
            self._cancel()
            return False

    def _arrive(self, item: Any) -> None:
        self._queue.put_nowait(item)
        if (item is _END or isinstance(item, _Failure)) and not self.ended.done():
            self.ended.set_result(None)

"""From the engine's blocking streams to the event loop.

A reply's events are produced by a blocking iterator (it waits on the
engine's queue), so each run gets a small worker thread that hands its events
to the event loop; the loop never blocks, and a slow client never stalls the
engine. Leaving the async iteration early (client gone, error) cancels the
run, which ends the worker's iterator at the next engine step.
"""

from __future__ import annotations

import asyncio
import threading
from collections.abc import AsyncIterator, Iterator

from clika_runtime.server.backend import Event, ReplyRun

_END = object()


class _Failure:
    def __init__(self, error: BaseException) -> None:
        self.error = error


async def run_events(run: ReplyRun) -> AsyncIterator[Event]:
    """``run.events()`` as an async iterator; exceptions from the worker are raised here."""
    loop = asyncio.get_running_loop()
    queue: asyncio.Queue[object] = asyncio.Queue()
    worker = threading.Thread(
        target=_produce, args=(run.events(), loop, queue), name="clika-server-reply", daemon=True
    )
    worker.start()
    finished = False
    try:
        while True:
            item = await queue.get()
            if item is _END:
                finished = True
                return
            if isinstance(item, _Failure):
                finished = True
                raise item.error
            yield item  # type: ignore[misc]
    finally:
        if not finished:
            run.cancel()


def _produce(events: Iterator[Event], loop: asyncio.AbstractEventLoop, queue: asyncio.Queue) -> None:
    def hand_over(item: object) -> bool:
        try:
            loop.call_soon_threadsafe(queue.put_nowait, item)
            return True
        except RuntimeError:  # the loop is gone (server shut down): stop reading
            return False

    try:
        for event in events:
            if not hand_over(event):
                events.close()  # type: ignore[attr-defined]
                return
    except Exception as exc:  # reported to the request's handler, which answers with it
        hand_over(_Failure(exc))
        return
    hand_over(_END)

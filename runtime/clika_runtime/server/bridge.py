"""A server reply's events on the event loop, through the engine's one async bridge.

A reply's events are produced by a blocking iterator (it waits on the
engine's queue and parses the text), so each run's iterator is forwarded by
``clika_runtime.engine.async_bridge.AsyncBridge``; the loop never blocks, and
a slow client never stalls the engine. Leaving the async iteration early
(client gone, error) cancels the run, which ends the iterator at the next
engine step.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator

from clika_runtime.engine.async_bridge import AsyncBridge
from clika_runtime.server.backend import Event, ReplyRun


async def run_events(run: ReplyRun) -> AsyncIterator[Event]:
    """``run.events()`` as an async iterator; exceptions from the worker are raised here."""
    bridge = AsyncBridge(run.events(), asyncio.get_running_loop(), run.cancel, name="clika-server-reply")
    finished = False
    try:
        while (event := await bridge.next()) is not None:
            yield event
        finished = True
    finally:
        if not finished:
            run.cancel()

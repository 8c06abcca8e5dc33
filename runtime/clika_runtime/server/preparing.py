"""Request preparation off the event loop, a few at a time.

Reading a request's JSON, checking it, rendering its chat template and
tokenizing its prompt run on worker threads; some of that (``json.loads``,
regex scans) holds the GIL for tens of milliseconds per megabyte without
yielding. With every request's preparation on its own thread, a burst of large
bodies would take turns holding the GIL and the event loop (``/health``,
streams already decoding) would wait behind all of them; at most
``MAX_PREPARING`` at a time, it waits behind one or two.
"""

from __future__ import annotations

import functools
from collections.abc import Callable
from typing import Any, TypeVar

import anyio
import anyio.to_thread

MAX_PREPARING = 2

T = TypeVar("T")


class Preparing:
    """The worker threads requests are prepared on (created with the app, bound on first use)."""

    def __init__(self, limit: int = MAX_PREPARING) -> None:
        self.limit = limit
        self._limiter: anyio.CapacityLimiter | None = None

    async def run(self, function: Callable[..., T], *args: Any) -> T:
        if self._limiter is None:  # made inside the event loop, the first time it is needed
            self._limiter = anyio.CapacityLimiter(self.limit)
        return await anyio.to_thread.run_sync(functools.partial(function, *args), limiter=self._limiter)

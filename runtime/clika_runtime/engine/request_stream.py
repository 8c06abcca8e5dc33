"""One submitted request's side of the engine: ``RequestStream``, the queue its deltas arrive on.

The engine thread puts each ``Delta`` and, once the request ended, its report;
the caller drains the stream on its own thread, so a slow reader never stalls
the model. Closing the stream early cancels the request.
"""

from __future__ import annotations

import queue
import threading
from collections.abc import Callable, Iterator
from typing import Any, Protocol

from clika_runtime.engine.output import Delta
from clika_runtime.engine.report import GenerationReport

_DONE = object()


class CancelsRequests(Protocol):
    """The engine as a stream sees it: what closing a stream early asks of it."""

    def cancel(self, request_id: int) -> None: ...


class RequestStream:
    """One submitted request: iterate it for ``Delta``s; ``report`` is set once it ended.

    Closing it (or ``cancel``) before the end cancels the request: its decode
    stops at the next step and its slot is freed.
    """

    def __init__(self, engine: CancelsRequests, request_id: int) -> None:
        self.request_id = request_id
        self._engine = engine
        self._queue: queue.SimpleQueue[Any] = queue.SimpleQueue()
        self._done = threading.Event()
        self._drained = False
        self._report: GenerationReport | None = None
        self._text: list[str] = []
        self._end_lock = threading.Lock()
        self._on_end: list[Callable[[], None]] = []

    # -- engine side (a ReplySink) ---------------------------------------------------------

    def put(self, delta: Delta) -> None:
        self._queue.put(delta)

    def end(self, report: GenerationReport) -> None:
        self._report = report
        with self._end_lock:
            self._done.set()
            callbacks, self._on_end = self._on_end, []
        self._queue.put(_DONE)
        for callback in callbacks:
            callback()

    # -- caller side ---------------------------------------------------------------

    def when_ended(self, callback: Callable[[], None]) -> None:
        """Call ``callback`` once the request ended (at once when it has; else on the engine's
        thread, so it must return at once)."""
        with self._end_lock:
            if not self._done.is_set():
                self._on_end.append(callback)
                return
        callback()

    @property
    def finished(self) -> bool:
        return self._done.is_set()

    @property
    def report(self) -> GenerationReport | None:
        """How the request ended (None while it runs)."""
        return self._report if self._done.is_set() else None

    @property
    def ready(self) -> bool:
        """Whether the next delta (or the end) is already waiting: reading it will not block."""
        return not self._queue.empty()

    def __iter__(self) -> Iterator[Delta]:
        try:
            while not self._drained:
                item = self._queue.get()
                if item is _DONE:
                    self._drained = True
                    return
                self._text.append(item.text)
                yield item
        finally:
            if not self._drained:
                self.cancel()

    def texts(self) -> Iterator[str]:
        """The reply's text pieces (empty pieces skipped)."""
        for delta in self:
            if delta.text:
                yield delta.text

    def token_batches(self) -> Iterator[list[int]]:
        """The reply's token ids, one list per batch of deltas available when asked."""
        deltas = iter(self)
        try:
            for delta in deltas:
                ids = list(delta.token_ids)
                while self.ready:
                    following = next(deltas, None)
                    if following is None:
                        break
                    ids.extend(following.token_ids)
                if ids:
                    yield ids
        finally:
            deltas.close()  # type: ignore[attr-defined]

    def result(self) -> str:
        """Wait for the end; the whole visible text."""
        for _ in self:
            pass
        return "".join(self._text)

    def cancel(self) -> None:
        """Stop the request at the next step (no-op once it ended)."""
        if not self._done.is_set():
            self._engine.cancel(self.request_id)

    def close(self) -> None:
        self.cancel()

    def __enter__(self) -> RequestStream:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

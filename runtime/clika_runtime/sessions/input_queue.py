"""A user turn written in pieces: pushed while the request waits, prefilled as they arrive.

::

    queue = InputQueue(session)
    queue.push("Summarise this report: ")
    queue.push(chunk)                # each push prefills what has arrived so far
    queue.close()                    # the turn is complete: decoding may start
    text = await queue.complete()    # the whole text, once closed and prefilled

Pushes coalesce: while one prefill runs, later pieces wait and the next
prefill covers all of them, so a fast writer never queues more than one.
:meth:`abort` ends the queue without a turn (the request waiting on it raises
RunCancelled). ``progress`` records ``(characters, prompt tokens computed)``
after each prefill, so a caller can show the prefill keeping up.
Use a queue from the event loop's thread.
"""

from __future__ import annotations

import asyncio
from typing import TYPE_CHECKING

from clika_runtime.sessions.results import RunCancelled

if TYPE_CHECKING:
    from clika_runtime.sessions.session import AsyncSession


class InputQueue:
    """The pieces of one user turn (see the module docstring)."""

    def __init__(self, session: AsyncSession, *, prefill: bool = True) -> None:
        self._session = session
        self._prefill = prefill
        self._pieces: list[str] = []
        self._closed = False
        self._aborted: str | None = None
        self._ended: asyncio.Event | None = None
        self._warmer: asyncio.Task[None] | None = None
        self.head = ""  # text the turn holds before the pushed pieces (prefilled with them)
        self.progress: list[tuple[int, int]] = []

    @property
    def text(self) -> str:
        """Everything pushed so far."""
        return "".join(self._pieces)

    @property
    def closed(self) -> bool:
        return self._closed or self._aborted is not None

    @property
    def prefilled_tokens(self) -> int:
        """Prompt tokens computed ahead of the turn so far."""
        return self.progress[-1][1] if self.progress else 0

    def push(self, piece: str) -> None:
        """Add a piece of the turn's text (prefilled in the background)."""
        if not isinstance(piece, str):
            raise ValueError(f"a pushed piece must be a string, got {type(piece).__name__}")
        if self.closed:
            raise ValueError("the input queue is closed: nothing more can be pushed")
        self._pieces.append(piece)
        if self._prefill and (self._warmer is None or self._warmer.done()):
            self._warmer = asyncio.get_running_loop().create_task(self._warm())

    def close(self) -> None:
        """The turn's text is complete: the request waiting on the queue goes on."""
        if self._aborted is None:
            self._closed = True
            self._signal()

    def abort(self, reason: str = "the input queue was aborted") -> None:
        """End the queue without a turn: the request waiting on it raises RunCancelled."""
        if not self._closed:
            self._aborted = reason
            self._signal()

    async def complete(self) -> str:
        """The whole text once the queue is closed (and its last prefill has ended)."""
        if not self.closed:
            await self._ended_event().wait()
        if self._aborted is not None:
            if self._warmer is not None:
                self._warmer.cancel()
            raise RunCancelled(self._aborted)
        if self._warmer is not None:
            await self._warmer
        return self.text

    async def _warm(self) -> None:
        warmed = -1
        while len(self.text) != warmed and self._aborted is None:
            text = self.text
            tokens = await self._session.prefill(self.head + text)
            warmed = len(text)
            self.progress.append((warmed, tokens))

    def _ended_event(self) -> asyncio.Event:
        if self._ended is None:
            self._ended = asyncio.Event()
            if self.closed:
                self._ended.set()
        return self._ended

    def _signal(self) -> None:
        if self._ended is not None:
            self._ended.set()

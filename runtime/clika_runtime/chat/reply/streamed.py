"""``generate``'s replies: one streamed (pieces to iterate, the request to stop), or a batch
submitted together and collected in order."""

from __future__ import annotations

import threading
from collections.abc import Iterator, Sequence
from typing import Any

from clika_runtime.chat.reply.outcome import ChatOutcome
from clika_runtime.chat.turn import Turn, submit_turn
from clika_runtime.engine.config import GenerationConfig
from clika_runtime.engine.engine import Engine, RequestStream
from clika_runtime.engine.errors import GenerationError
from clika_runtime.engine.report import GenerationReport


class StreamedReply(Iterator[Any]):
    """A reply being streamed: iterate it for pieces.

    Closing or dropping it stops delivery while the request runs on to its end;
    :meth:`cancel` stops the request itself. ``on_end`` receives the request's
    report once it ended, however the caller left it.
    """

    def __init__(self, stream: RequestStream, pieces: Iterator[Any], on_end: Any) -> None:
        self._stream = stream
        self._pieces = pieces
        self._done = threading.Event()  # set once the request ended and ``on_end`` heard of it
        self._delivering = True

        def ended() -> None:
            on_end(stream.report)
            self_done.set()

        self_done = self._done  # the callback holds no reference to the reply: dropping it stays possible
        stream.when_ended(ended)

    @property
    def report(self) -> GenerationReport | None:
        """How this reply ended (None while it runs): the model's ``report`` may be another thread's."""
        return self._stream.report

    def __next__(self) -> Any:
        if not self._delivering:
            raise StopIteration
        try:
            return next(self._pieces)
        except StopIteration:
            self._delivering = False
            self._done.wait()  # the end callback runs on the engine's thread, right after the end
            report = self._stream.report
            if report is not None and report.finish_reason == "error":
                raise GenerationError(f"the model failed while generating: {report.error}", report) from None
            raise

    def close(self) -> None:
        """Stop delivery: no more pieces come; the generation runs to completion and ``report``
        is set once it ended."""
        if not self._delivering:
            return
        self._delivering = False
        # Closing the piece generator now would cancel the request (an engine stream left early
        # cancels it): it is closed once the request ended, when that is a no-op.
        pieces = self._pieces
        self._pieces = iter(())
        self._stream.when_ended(pieces.close)  # type: ignore[attr-defined]

    def cancel(self, wait: bool = True) -> None:
        """Stop the generation itself at the next step; returns once it ended (within one step) with
        ``report`` set, or at once with ``wait=False`` (it only posts the cancel: a signal handler's
        way). Iterating on yields what was made before it, then ends."""
        self._stream.cancel()
        if wait:
            self._done.wait()  # the engine's thread ends the request; waiting here holds no lock it needs

    def wait(self, timeout: float | None = None) -> GenerationReport | None:
        """Block until the generation ended (``timeout`` seconds at most); its report."""
        self._done.wait(timeout)
        return self._stream.report

    def __del__(self) -> None:
        self.close()


def submit_together(engine: Engine, turns: Sequence[Turn], policy: GenerationConfig) -> list[RequestStream]:
    """Every turn submitted to ``engine`` before any reply is read (so they decode together); when
    one is refused, the ones submitted before it are cancelled and the refusal raised."""
    streams: list[RequestStream] = []
    try:
        for turn in turns:
            streams.append(submit_turn(engine, turn, policy, skip_special_tokens=True))
    except BaseException:
        for stream in streams:
            stream.cancel()
        raise
    return streams


def collect_replies(
    streams: Sequence[RequestStream],
) -> tuple[list[str], list[ChatOutcome], GenerationError | None]:
    """Each stream's whole reply and its outcome, in order, and the failure of the first that
    failed (None: none did)."""
    replies = [stream.result() for stream in streams]
    outcomes = [ChatOutcome(text, stream.report) for text, stream in zip(replies, streams, strict=True)]  # type: ignore[arg-type]
    for index, stream in enumerate(streams):
        report = stream.report
        if report is not None and report.finish_reason == "error":
            failure = f"prompt {index}: the model failed while generating: {report.error}"
            return replies, outcomes, GenerationError(failure, report)
    return replies, outcomes, None

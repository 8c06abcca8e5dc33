"""The engine's refusals: a full queue, a closed engine (capacity results, not bugs)."""

from __future__ import annotations


class QueueFullError(RuntimeError):
    """The engine's waiting queue is full; the request was not accepted (nothing else changed)."""


class EngineClosedError(RuntimeError):
    """The engine was closed; it takes no more requests."""


class GenerationError(RuntimeError):
    """The model failed while it made a reply (an engine step raised): no caller should read the
    text made until then as the whole reply. ``report`` says what it made and the error."""

    def __init__(self, message: str, report: object = None) -> None:
        super().__init__(message)
        self.report = report

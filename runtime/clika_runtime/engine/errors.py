"""The engine's refusals: a full queue, a closed engine (capacity results, not bugs)."""

from __future__ import annotations


class QueueFullError(RuntimeError):
    """The engine's waiting queue is full; the request was not accepted (nothing else changed)."""


class EngineClosedError(RuntimeError):
    """The engine was closed; it takes no more requests."""

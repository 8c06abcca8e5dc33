"""Retrying a model turn the engine could not take yet (its queue was full), as agent clients
retry a provider's 429: a bounded number of tries, exponential backoff, and an ``on_error``
classifier that may say ``"fail"`` (or act, then say ``"retry"``)."""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Any, TypeVar

from clika_runtime.engine.errors import QueueFullError

T = TypeVar("T")


@dataclass(frozen=True)
class RetryPolicy:
    """``retries`` more tries after the first, ``base_ms`` doubling between them; ``on_error``
    receives ``{"error", "attempt", "retryable"}`` and returns ``"retry"`` or ``"fail"``."""

    retries: int = 2
    base_ms: int = 500
    on_error: Callable[[dict[str, Any]], str] | None = None

    def __post_init__(self) -> None:
        for name in ("retries", "base_ms"):
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, int) or value < 0:
                raise ValueError(f"{name} must be an integer >= 0, got {value!r}")

    async def run(self, attempt_once: Callable[[], Awaitable[T]]) -> T:
        """``attempt_once()``, tried again while the engine's queue is full and tries remain."""
        attempt = 0
        while True:
            try:
                return await attempt_once()
            except QueueFullError as error:
                tier = (
                    "retry"
                    if self.on_error is None
                    else self.on_error({"error": error, "attempt": attempt, "retryable": True})
                )
                if tier != "retry" or attempt >= self.retries:
                    raise
            await asyncio.sleep(self.base_ms / 1000 * (2**attempt))
            attempt += 1

"""What every front end's handlers share: the model backend, the intake rules, the shutdown signal, the metrics."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, TypeVar

from starlette.concurrency import run_in_threadpool

from clika_runtime.server.backend import ModelBackend
from clika_runtime.server.intake import Intake
from clika_runtime.server.metrics import Metrics
from clika_runtime.server.streaming import Closing

T = TypeVar("T")


@dataclass
class Served:
    backend: ModelBackend
    intake: Intake
    closing: Closing
    metrics: Metrics
    _card: dict[str, Any] | None = None

    async def prepare(self, function: Callable[..., T], *args: Any) -> T:
        """``function(*args)`` on a preparation thread (parsing, rendering, tokenizing, submitting)."""
        return await self.intake.preparing.run(function, *args)

    async def card(self) -> dict[str, Any]:
        """What the model can do, probed once on a worker thread (the probes render its chat template)."""
        if self._card is None:
            self._card = await run_in_threadpool(self._probe)
        return self._card

    def _probe(self) -> dict[str, Any]:
        model = self.backend.model
        return {
            "context_window": model.max_seq,
            "supports_tools": model.supports_tools,
            "reasoning_mode": model.reasoning_mode,
        }

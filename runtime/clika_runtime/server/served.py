"""What every front end's handlers share: the model router, the intake rules, the shutdown signal, the metrics."""

from __future__ import annotations

import contextlib
from collections.abc import AsyncIterator, Callable
from dataclasses import dataclass
from typing import Any, TypeVar

from starlette.concurrency import run_in_threadpool

from clika_runtime.server.backend import ModelBackend
from clika_runtime.server.intake import Intake
from clika_runtime.server.metrics import Metrics
from clika_runtime.server.router import ModelRouter
from clika_runtime.server.streaming import Closing

T = TypeVar("T")


@dataclass
class Served:
    router: ModelRouter
    intake: Intake
    closing: Closing
    metrics: Metrics

    async def prepare(self, function: Callable[..., T], *args: Any) -> T:
        """``function(*args)`` on a preparation thread (parsing, rendering, tokenizing, submitting)."""
        return await self.intake.preparing.run(function, *args)

    @contextlib.asynccontextmanager
    async def model(self, requested: str, keep_alive: float | None = None) -> AsyncIterator[ModelBackend]:
        """The backend for ``requested`` (404 naming it when not served; loaded first when it is not),
        kept loaded until the block ends: submit the request's work inside it."""
        lease = self.router.lease(requested, keep_alive)
        backend = await run_in_threadpool(lease.__enter__)  # a load blocks: off the event loop
        try:
            yield backend
        finally:
            await run_in_threadpool(lease.__exit__, None, None, None)

    async def card(self, backend: ModelBackend) -> dict[str, Any]:
        """What the model can do, probed once on a worker thread (the probes render its chat template)."""
        return await run_in_threadpool(backend.card)

"""What an engine is carrying, as one immutable value: ``EngineLoad``.

The engine thread publishes a new one after every step and after applying
posted commands (``Engine.load``); the server's metrics and health routes read
it from any thread instead of reaching into the scheduler, the KV cache or the
step counters while the engine thread changes them.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from types import MappingProxyType
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from clika_runtime.engine.core import EngineCore


@dataclass(frozen=True)
class EngineLoad:
    """Requests, KV memory and step totals of one engine at one moment.

    ``kv`` is the cache's ``usage()`` (``kv_cache_bytes``, ``slots``,
    ``capacity``; a paged cache adds its ``blocks``, ``blocks_owned``,
    ``blocks_cached``, ``blocks_free`` and byte counts).
    """

    running: int = 0
    waiting: int = 0
    max_active: int = 1
    kv: Mapping[str, int] = field(default_factory=lambda: MappingProxyType({}))
    kv_slots_free: int = 0
    steps: int = 0
    step_tokens: int = 0
    model_seconds: float = 0.0
    host_seconds: float = 0.0

    @classmethod
    def read(cls, core: EngineCore) -> EngineLoad:
        """The core's load now (on the engine thread, or before it starts)."""
        scheduler, stats = core.scheduler, core.stats
        return cls(
            running=len(scheduler.running),
            waiting=len(scheduler.waiting),
            max_active=scheduler.max_active,
            kv=MappingProxyType(dict(core.cache.usage())),
            kv_slots_free=core.cache.num_free,
            steps=stats.steps,
            step_tokens=stats.tokens,
            model_seconds=stats.model_s,
            host_seconds=stats.host_s,
        )

    @property
    def free_slots(self) -> int:
        """Requests that could start decoding now."""
        return max(self.max_active - self.running, 0)

    @property
    def kv_slots_used(self) -> int:
        """KV slots held by requests (the continuous cache's rows; a paged cache's sequences)."""
        return self.kv.get("slots", 0) - self.kv_slots_free

    @property
    def step_seconds(self) -> float:
        """Seconds spent in steps: ONNX Runtime's and Python's."""
        return self.model_seconds + self.host_seconds

    @property
    def tokens_per_step(self) -> float:
        """Tokens a step computed on average (0 before the first step)."""
        return self.step_tokens / self.steps if self.steps else 0.0

"""An engine's limits, set once when the model loads (``max_active`` can be raised later)."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class EngineOptions:
    """Engine limits: ``max_active`` sequences decode together, ``max_queued`` wait beyond them,
    a step computes at most ``max_step_tokens`` tokens (a longer prompt runs in chunks).
    ``kv_cache_bytes`` caps a paged KV cache (None: the runtime's default budget)."""

    max_active: int = 8
    max_queued: int = 256
    max_step_tokens: int = 256
    prefix_reuse: bool = True
    kv_cache_bytes: int | None = None

    def __post_init__(self) -> None:
        for name in ("max_active", "max_step_tokens"):
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, int) or value < 1:
                raise ValueError(f"{name} must be an integer >= 1, got {value!r}")
        if isinstance(self.max_queued, bool) or not isinstance(self.max_queued, int) or self.max_queued < 0:
            raise ValueError(f"max_queued must be an integer >= 0, got {self.max_queued!r}")
        budget = self.kv_cache_bytes
        if budget is not None and (isinstance(budget, bool) or not isinstance(budget, int) or budget < 1):
            raise ValueError(f"kv_cache_bytes must be an integer >= 1 or None, got {budget!r}")

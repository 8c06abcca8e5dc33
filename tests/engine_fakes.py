"""A deterministic stand-in for the model in the engine's bookkeeping tests.

``next_token`` picks a token from a whole history, so a wrong slot, position,
chunk, block or reused prefix changes what follows; ``alone`` applies the same
rule to one request by itself, the answer every batched run must reproduce.
"""

from __future__ import annotations

import numpy as np

from clika_runtime.engine.kv_cache import ContinuousKVCache
from clika_runtime.engine.types import StepPlan

VOCAB = 97


def next_token(history: list[int] | np.ndarray) -> int:
    h = np.asarray(history, dtype=np.int64)
    return int((np.dot(h, np.arange(1, len(h) + 1)) * 7 + len(h)) % (VOCAB - 1)) + 1


def prompt_of(length: int, salt: int) -> list[int]:
    """A prompt of ``length`` ids in the vocabulary, different for each ``salt``."""
    return [(salt * 31 + i * 17) % (VOCAB - 1) + 1 for i in range(length)]


def alone(prompt: list[int], max_new: int, stop_ids: frozenset[int] = frozenset()) -> list[int]:
    """``prompt``'s continuation by ``next_token``, ending after ``max_new`` tokens or a stop id."""
    tokens = list(prompt)
    out = []
    for _ in range(max_new):
        t = next_token(tokens)
        tokens.append(t)
        out.append(t)
        if t in stop_ids:
            break
    return out


class CacheWritingExecutor:
    """Writes token ids into layer 0's key buffer at their slot and position; predicts from the slot."""

    def __init__(self, cache: ContinuousKVCache) -> None:
        self.cache = cache
        self.plans: list[StepPlan] = []

    def run(self, plan: StepPlan) -> list[int]:
        self.plans.append(plan)
        keys = self.cache.buffers()[0][0]
        out = []
        for row in plan.rows:
            end = row.start + row.num_new
            keys[row.slot, 0, row.start : end, 0] = row.new_token_ids
            if row.sample:
                out.append(next_token(keys[row.slot, 0, :end, 0]))
        return out

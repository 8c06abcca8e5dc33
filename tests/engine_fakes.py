"""A deterministic stand-in for the model in the engine's bookkeeping tests.

``next_token`` picks a token from a whole history, so a wrong slot, position,
chunk, block or reused prefix changes what follows; ``alone`` applies the same
rule to one request by itself, the answer every batched run must reproduce.
"""

from __future__ import annotations

import itertools
from collections.abc import Callable
from typing import Any

import numpy as np

from clika_runtime.engine.config import GenerationConfig
from clika_runtime.engine.core import EngineCore
from clika_runtime.engine.executor import StepTiming
from clika_runtime.engine.kv.continuous_cache import ContinuousKVCache
from clika_runtime.engine.kv.kv_cache import KVCacheManager
from clika_runtime.engine.options import EngineOptions
from clika_runtime.engine.output import Delta
from clika_runtime.engine.report import GenerationReport
from clika_runtime.engine.sequence import Request, Sequence
from clika_runtime.engine.step_plan import StepPlan

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


def one_hot(tokens: list[int]) -> np.ndarray:
    """Logits ``[len(tokens), VOCAB]`` whose greedy picks are ``tokens``."""
    logits = np.zeros((len(tokens), VOCAB), dtype=np.float32)
    logits[np.arange(len(tokens)), tokens] = 1.0
    return logits


class Collected:
    """A reply sink that keeps what the engine core delivers."""

    def __init__(self) -> None:
        self.deltas: list[Delta] = []
        self.report: GenerationReport | None = None

    def put(self, delta: Delta) -> None:
        self.deltas.append(delta)

    def end(self, report: GenerationReport) -> None:
        self.report = report


def engine_core(
    cache: KVCacheManager,
    executor: Any,
    *,
    max_seq: int,
    max_active: int,
    max_step_tokens: int,
    max_queued: int = 64,
) -> EngineCore:
    """An engine core over ``cache`` stepping ``executor`` (no tokenizer: replies are ids)."""
    options = EngineOptions(max_active=max_active, max_queued=max_queued, max_step_tokens=max_step_tokens)
    return EngineCore(executor, cache, None, max_seq=max_seq, vocab_size=VOCAB, options=options)


_ids = itertools.count(1)


def add(
    core: EngineCore, prompt: list[int], max_new: int = 8, eos: frozenset[int] = frozenset(), **config: Any
) -> Sequence:
    """Queue ``prompt`` on ``core`` (greedy unless ``config`` says otherwise); its live sequence."""
    request = Request(next(_ids), tuple(prompt), GenerationConfig(max_new_tokens=max_new, **config), eos)
    return core.add(Sequence(request), Collected())


def run_all(core: EngineCore, limit: int = 10_000) -> int:
    """Step ``core`` until it has no work, checking its bookkeeping after every step; the step count."""
    steps = 0
    while core.has_work:
        # A step may schedule nothing only when it ended what could never run (beyond the KV budget).
        assert core.step() is not None or not core.has_work, "the engine is stuck: work but nothing to run"
        core.check_integrity()
        steps += 1
        assert steps < limit, "the engine did not finish"
    return steps


class OracleDrafter:
    """Drafts ``next_token``'s own continuation (every draft holds) or, ``wrong``, a token off from
    each (every draft is refused): the two ends of the one update path."""

    def __init__(self, wrong: bool = False) -> None:
        self.wrong = wrong
        self.calls = 0

    def propose(self, seqs: list[Sequence], limits: list[int]) -> list[list[int]]:
        self.calls += 1
        guesses = [alone(list(seq.token_ids), limit) for seq, limit in zip(seqs, limits, strict=True)]
        return [[t % (VOCAB - 1) + 1 for t in g] if self.wrong else g for g in guesses]

    def close(self) -> None:
        pass


class CacheWritingExecutor:
    """Writes token ids into layer 0's key buffer at their slot and position; predicts from the slot."""

    timing = StepTiming()

    def __init__(self, cache: ContinuousKVCache) -> None:
        self.cache = cache
        self.plans: list[StepPlan] = []

    def run(self, plan: StepPlan, before_call: Callable[[], None] | None = None) -> np.ndarray:
        self.plans.append(plan)
        keys = self.cache.buffers()[0][0]
        out = []
        for row in plan.rows:
            end = row.start + row.num_new
            keys[row.slot, 0, row.start : end, 0] = row.new_token_ids
            # A draft row is checked at every position: the pick after each of its tokens.
            ends = range(row.start + 1, end + 1) if row.draft else [end] if row.sample else []
            out.extend(next_token(keys[row.slot, 0, :e, 0]) for e in ends)
        return one_hot(out)

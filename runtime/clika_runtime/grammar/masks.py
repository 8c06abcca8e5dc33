"""The allowed-token masks of one step's constrained rows.

:meth:`StepMasks.start` computes every constrained row's mask on the grammar
engine's worker threads (the Rust call releases the GIL), so it overlaps the
model's own step; :meth:`StepMasks.apply` waits for them and sets every
disallowed logit to -inf. Masks are bit arrays, 32 tokens a word.
"""

from __future__ import annotations

import threading
from collections.abc import Sequence
from concurrent.futures import Future, ThreadPoolExecutor

import numpy as np

from clika_runtime.grammar.constraint import _engine as grammar_engine
from clika_runtime.grammar.matcher import GrammarMatcher

_STARTER = ThreadPoolExecutor(max_workers=1, thread_name_prefix="clika-grammar")
_EXECUTOR_LOCK = threading.Lock()
_EXECUTOR: list[object] = []


def _executor() -> object:
    with _EXECUTOR_LOCK:
        if not _EXECUTOR:
            _EXECUTOR.append(grammar_engine().LLExecutor(num_threads=2))
        return _EXECUTOR[0]


class StepMasks:
    """Masks for the rows of one step (see the module docstring)."""

    def __init__(self, matchers: Sequence[GrammarMatcher], vocab_size: int) -> None:
        self.matchers = list(matchers)
        self.vocab_size = vocab_size
        self.bits = np.full((len(self.matchers), (vocab_size + 31) // 32), -1, dtype=np.int32)
        self._pending: Future[None] | None = None

    def start(self) -> StepMasks:
        """Begin computing the masks in the background; returns self."""
        if self.matchers:
            self._pending = _STARTER.submit(self._fill)
        return self

    def _fill(self) -> None:
        pairs = [(matcher.inner, index) for index, matcher in enumerate(self.matchers)]
        grammar_engine()
        from llguidance.numpy import fill_next_token_bitmask_par

        fill_next_token_bitmask_par(_executor(), pairs, self.bits)

    def allowed(self) -> np.ndarray:
        """``[rows, vocab]`` booleans: which tokens each row may take next."""
        self.wait()
        as_bytes = self.bits.view(np.uint8)
        unpacked = np.unpackbits(as_bytes, axis=1, bitorder="little")
        return unpacked[:, : self.vocab_size].astype(bool)

    def wait(self) -> None:
        if self._pending is not None:
            self._pending.result()
            self._pending = None

    def apply(self, logits: np.ndarray, rows: Sequence[int]) -> None:
        """Set the disallowed logits of ``logits[rows[i]]`` (row ``i``'s mask) to -inf in place."""
        if not self.matchers:
            return
        allowed = self.allowed()
        width = min(logits.shape[1], allowed.shape[1])
        for index, row in enumerate(rows):
            view = logits[row, :width]
            view[~allowed[index, :width]] = -np.inf
            if logits.shape[1] > width:
                logits[row, width:] = -np.inf

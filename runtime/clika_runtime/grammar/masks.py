"""The allowed-token masks of one step's constrained rows.

:meth:`StepMasks.start` computes every constrained row's masks on the grammar
engine's worker threads (the Rust call releases the GIL), so it overlaps the
model's own step; :meth:`StepMasks.apply` waits for them and sets every
disallowed logit to -inf. A row that runs a draft gets one mask per position:
the grammar's state after each drafted token (drafts are trimmed to what the
grammar allows before they run). Masks are bit arrays, 32 tokens a word.
"""

from __future__ import annotations

import threading
from collections.abc import Sequence
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass

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


@dataclass(frozen=True)
class MaskedRow:
    """A constrained row of a step: its matcher, its first logits row, and the draft it runs."""

    matcher: GrammarMatcher
    logits_row: int
    draft: tuple[int, ...] = ()


class StepMasks:
    """Masks for the constrained rows of one step (see the module docstring)."""

    def __init__(self, rows: Sequence[MaskedRow], num_logits_rows: int, vocab_size: int) -> None:
        self.rows = list(rows)
        self.vocab_size = vocab_size
        self.bits = np.full((num_logits_rows, (vocab_size + 31) // 32), -1, dtype=np.int32)
        self._pending: Future[None] | None = None

    @classmethod
    def of(cls, matchers: Sequence[GrammarMatcher], vocab_size: int) -> StepMasks:
        """Masks for ``matchers``, one logits row each, in order."""
        return cls([MaskedRow(m, i) for i, m in enumerate(matchers)], len(matchers), vocab_size)

    def start(self) -> StepMasks:
        """Begin computing the masks in the background; returns self."""
        if self.rows:
            self._pending = _STARTER.submit(self._fill)
        return self

    def _fill(self) -> None:
        grammar_engine()
        from llguidance.numpy import (
            fill_next_token_bitmask_par,
            fill_next_token_bitmask_par_with_draft_tokens,
        )

        if any(row.draft for row in self.rows):
            entries = [(row.matcher.inner, row.logits_row, list(row.draft)) for row in self.rows]
            fill_next_token_bitmask_par_with_draft_tokens(_executor(), entries, self.bits)
        else:
            pairs = [(row.matcher.inner, row.logits_row) for row in self.rows]
            fill_next_token_bitmask_par(_executor(), pairs, self.bits)

    def wait(self) -> None:
        if self._pending is not None:
            self._pending.result()
            self._pending = None

    def allowed(self, logits_rows: Sequence[int] | None = None) -> np.ndarray:
        """``[rows, vocab]`` booleans: which tokens each logits row may take next."""
        self.wait()
        bits = self.bits if logits_rows is None else self.bits[list(logits_rows)]
        unpacked = np.unpackbits(bits.view(np.uint8), axis=1, bitorder="little")
        return unpacked[:, : self.vocab_size].astype(bool)

    def masked_rows(self) -> list[int]:
        """Every logits row a mask applies to (a draft row's positions included)."""
        return [row.logits_row + k for row in self.rows for k in range(len(row.draft) + 1)]

    def apply(self, logits: np.ndarray) -> list[int]:
        """Set the disallowed logits of every masked row to -inf in place; returns the logits rows
        that allow no token at all (the grammar can go no further there)."""
        rows = self.masked_rows()
        if not rows:
            return []
        allowed = self.allowed(rows)
        width = min(logits.shape[1], allowed.shape[1])
        for index, row in enumerate(rows):
            view = logits[row, :width]
            view[~allowed[index, :width]] = -np.inf
            if logits.shape[1] > width:
                logits[row, width:] = -np.inf
        return [row for index, row in enumerate(rows) if not allowed[index].any()]

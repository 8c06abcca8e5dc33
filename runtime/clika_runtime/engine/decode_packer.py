"""Decode-only steps packed without the grid arithmetic of ``clika_runtime.contract.step_graph.pack_step``.

The engine's hot path: a step where every active row runs one token needs
only the tokens and past lengths from Python; the rest is cached per layout.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from clika_runtime.contract.step_graph import (
    GRID_INDEX,
    INPUT_IDS,
    LOGITS_INDEX,
    QUERY_SEQLENS,
    SEQLENS_K,
    TOKEN_CELL,
    TOTAL_SEQUENCE_LENGTH,
)


class DecodePacker:
    """Decode-only steps (one new token per active row) without ``pack_step``'s grid arithmetic.

    Between steps the executor's caches are cold, so every NumPy call costs
    several microseconds; a decode step needs only the tokens and past lengths
    from Python. The arrays that depend on which slots are active alone
    (``grid_index``, ``token_cell``, ``query_seqlens``, ``logits_index``) are
    built once per layout and handed out read-only, so the executor can tell
    they did not change and skip copying them. The result equals ``pack_step``'s.
    """

    def __init__(self) -> None:
        self._key: tuple[int, tuple[int, ...]] | None = None
        self._layout: dict[str, np.ndarray] = {}

    def pack(
        self,
        num_rows: int,
        slots: Sequence[int],
        past_lens: Sequence[int],
        token_ids: Sequence[int],
        *,
        capacity: int | None = None,
        context_window: int | None = None,
    ) -> dict[str, np.ndarray] | None:
        """The feeds for rows ``slots`` each running one token after its past, or None when the
        slots are not strictly ascending or a limit is crossed (then ``pack_step`` packs the step,
        or raises the error that names the limit)."""
        if any(later <= earlier for earlier, later in zip(slots, slots[1:], strict=False)):
            return None
        longest = max(past_lens) + 1
        if (capacity is not None and (longest > capacity or capacity < 2)) or (
            context_window is not None and longest > context_window
        ):
            return None
        feeds = dict(self._layout_for(num_rows, tuple(slots)))
        seqlens_k = [0] * num_rows
        for slot, past in zip(slots, past_lens, strict=True):
            seqlens_k[slot] = past
        feeds[INPUT_IDS] = np.array(token_ids, dtype=np.int64)
        feeds[SEQLENS_K] = np.array(seqlens_k, dtype=np.int32)
        feeds[TOTAL_SEQUENCE_LENGTH] = np.array(longest, dtype=np.int32)
        return feeds

    def _layout_for(self, num_rows: int, slots: tuple[int, ...]) -> dict[str, np.ndarray]:
        key = (num_rows, slots)
        if key != self._key:
            grid = [[0] for _ in range(num_rows)]  # [B, 1]: a decode step's grid is one column wide
            counts = [0] * num_rows
            for rank, slot in enumerate(slots):
                grid[slot][0] = rank
                counts[slot] = 1
            layout = {
                GRID_INDEX: np.array(grid, dtype=np.int64),
                TOKEN_CELL: np.array([(slot, 0) for slot in slots], dtype=np.int64),
                QUERY_SEQLENS: np.array(counts, dtype=np.int32),
                LOGITS_INDEX: np.arange(len(slots), dtype=np.int64),
            }
            for array in layout.values():
                array.flags.writeable = False
            self._key, self._layout = key, layout
        return self._layout

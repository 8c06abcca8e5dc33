"""The Qwen2.5-VL vision graph's window inputs, computed from each image's grid.

Each frame's merged patches (``h / merge x w / merge``) are cut into windows of
``window x window`` (the last row and column of windows short where the grid
does not divide), and the patches reordered window by window, each window's
merged patches row-major and each one's ``merge x merge`` patches together, as
transformers' ``get_vision_window_index`` orders them. Blocks that attend in
windows see only their own window; the output goes back to the processor's
order. Frames stay contiguous in this order, so the frame mask is unchanged.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from clika_runtime.contract.manifest import VisionSpec


@dataclass(frozen=True)
class WindowInputs:
    order: np.ndarray  # int64 [L]: the merge-ordered patch each window-ordered row takes
    bias: np.ndarray  # float32 [L, L]: 0 within a window, -inf across (window order)
    restore: np.ndarray  # int64 [L / merge**2]: the window-ordered merged token of each output row

    def feeds(self) -> dict[str, np.ndarray]:
        return {"window_order": self.order, "window_bias": self.bias, "window_restore": self.restore}


def _frame_windows(rows: int, cols: int, window: int) -> list[np.ndarray]:
    """The merged-patch indices (row-major in the frame) of each window, in window order."""
    index = np.arange(rows * cols).reshape(rows, cols)
    return [
        index[r : r + window, c : c + window].ravel()
        for r in range(0, rows, window)
        for c in range(0, cols, window)
    ]


def window_inputs(grids: Sequence[tuple[int, int, int]], *, merge: int, window: int) -> WindowInputs:
    """The window order, mask and restore order for the patches of ``grids`` (each (t, h, w)
    patches), in order; ``window``: a window's edge in merged patches."""
    merged_order: list[np.ndarray] = []
    sizes: list[int] = []
    start = 0
    for t, h, w in grids:
        rows, cols = h // merge, w // merge
        for frame in range(t):
            for found in _frame_windows(rows, cols, window):
                merged_order.append(found + start + frame * rows * cols)
                sizes.append(len(found))
        start += t * rows * cols
    merged = np.concatenate(merged_order).astype(np.int64)
    unit = merge * merge
    order = (merged[:, None] * unit + np.arange(unit)).ravel()
    label = np.repeat(np.arange(len(sizes)), np.asarray(sizes) * unit)
    bias = np.where(label[:, None] == label[None, :], 0.0, -np.inf).astype(np.float32)
    return WindowInputs(order, bias, np.argsort(merged).astype(np.int64))


def is_windowed(spec: VisionSpec) -> bool:
    """A Qwen2.5-VL tower (window attention): its videos' positions count seconds, not built yet."""
    return "window_bias" in spec.inputs

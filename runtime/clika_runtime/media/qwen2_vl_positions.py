"""The Qwen2-VL vision graph's position inputs, computed from each image's grid.

Patches arrive in merge order (each ``merge x merge`` block contiguous), so
a patch's (row, column) is recovered the same way; its rotary angles are
``row * inv_freq`` then ``column * inv_freq`` (``head_dim / 4`` frequencies
each), the pair repeated to cover the whole head. Patches attend only within
their own frame (one temporal patch of one image).
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np


def _row_col(t: int, h: int, w: int, merge: int) -> np.ndarray:
    rows, cols = np.meshgrid(np.arange(h), np.arange(w), indexing="ij")
    shape = (h // merge, merge, w // merge, merge)
    rows = rows.reshape(shape).transpose(0, 2, 1, 3).ravel()
    cols = cols.reshape(shape).transpose(0, 2, 1, 3).ravel()
    return np.tile(np.stack([rows, cols], axis=1), (t, 1))


def rotary_tables(
    grids: Sequence[tuple[int, int, int]], *, head_dim: int, merge: int, theta: float
) -> tuple[np.ndarray, np.ndarray]:
    """cos and sin float32 [L, head_dim] for the patches of ``grids`` (each (t, h, w)), in order."""
    positions = np.concatenate([_row_col(t, h, w, merge) for t, h, w in grids])
    spatial = head_dim // 2
    inv_freq = 1.0 / (theta ** (np.arange(0, spatial, 2, dtype=np.float32) / spatial))
    angles = positions[:, :, None].astype(np.float32) * inv_freq.astype(np.float32)  # [L, 2, hd/4]
    half = angles.reshape(len(positions), -1)  # rows' angles, then columns'
    full = np.concatenate([half, half], axis=1)
    return np.cos(full).astype(np.float32), np.sin(full).astype(np.float32)


def frame_attention_bias(grids: Sequence[tuple[int, int, int]]) -> np.ndarray:
    """float32 [L, L]: 0 inside one frame's patches, -inf across frames."""
    sizes = [h * w for t, h, w in grids for _ in range(t)]
    frame = np.repeat(np.arange(len(sizes)), sizes)
    return np.where(frame[:, None] == frame[None, :], 0.0, -np.inf).astype(np.float32)

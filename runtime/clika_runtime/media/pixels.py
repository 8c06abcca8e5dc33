"""Rescale and normalize pixels the way checkpoint processors do.

transformers' processors rescale in float64 (``x * rescale_factor``), cast to
float32, then normalize in float32 (``(x - mean) / std``); doing the same steps
in the same precision keeps our values within float32 rounding of theirs.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np


def normalized_chw(
    image: np.ndarray,
    *,
    rescale_factor: float | None,
    mean: Sequence[float] | None,
    std: Sequence[float] | None,
) -> np.ndarray:
    """uint8 [H, W, 3] -> float32 [3, H, W], rescaled and normalized (either step skipped when None)."""
    chw = np.transpose(image, (2, 0, 1))
    if rescale_factor is not None:
        values = (chw.astype(np.float64) * rescale_factor).astype(np.float32)
    else:
        values = chw.astype(np.float32)
    if mean is not None and std is not None:
        mean32 = np.asarray(mean, dtype=np.float32)[:, None, None]
        std32 = np.asarray(std, dtype=np.float32)[:, None, None]
        values = (values - mean32) / std32
    return np.ascontiguousarray(values, dtype=np.float32)

"""Resize 8-bit images exactly as Pillow's ``Image.resize`` does, in NumPy.

Checkpoint processors resize with Pillow (transformers' portable backend), so
the pixels a vision tower was trained on come from Pillow's fixed-point
resampler: a separable convolution (one pass per axis), each
output weighted by coefficients rounded to 22 fractional bits and each pass
rounded back to uint8. Reproducing that arithmetic (rather than a float
resize) keeps our pixels identical to the reference, so the runtime needs no
imaging library.
"""

from __future__ import annotations

import math
from collections.abc import Callable

import numpy as np

# Pillow's PRECISION_BITS for 8-bit images: 32 - 8 - 2.
_PRECISION_BITS = 22


def _bicubic(x: np.ndarray) -> np.ndarray:
    a = -0.5
    x = np.abs(x)
    near = ((a + 2.0) * x - (a + 3.0)) * x * x + 1
    far = (((x - 5) * x + 8) * x - 4) * a
    return np.where(x < 1.0, near, np.where(x < 2.0, far, 0.0))


def _sinc(x: np.ndarray) -> np.ndarray:
    safe = np.where(x == 0.0, 1.0, x * math.pi)
    return np.where(x == 0.0, 1.0, np.sin(safe) / safe)


def _lanczos(x: np.ndarray) -> np.ndarray:
    return np.where((x >= -3.0) & (x < 3.0), _sinc(x) * _sinc(x / 3), 0.0)


def _bilinear(x: np.ndarray) -> np.ndarray:
    x = np.abs(x)
    return np.where(x < 1.0, 1.0 - x, 0.0)


# Pillow's resampling filter numbers (PIL.Image.Resampling) -> (filter, support).
FILTERS: dict[int, tuple[Callable[[np.ndarray], np.ndarray], float]] = {
    2: (_bilinear, 1.0),
    3: (_bicubic, 2.0),
    1: (_lanczos, 3.0),
}
FILTER_NAMES = {2: "bilinear", 3: "bicubic", 1: "lanczos"}


def _coefficients(in_size: int, out_size: int, resample: int) -> tuple[np.ndarray, np.ndarray]:
    """Per output pixel: the source indices [out, k] and fixed-point weights [out, k]."""
    kernel, base_support = FILTERS[resample]
    scale = in_size / out_size
    filterscale = max(scale, 1.0)
    support = base_support * filterscale
    ksize = int(math.ceil(support)) * 2 + 1
    center = (np.arange(out_size) + 0.5) * scale
    # C casts truncate toward zero; the clamp to 0 makes that floor for negatives too.
    xmin = np.maximum(np.trunc(center - support + 0.5).astype(np.int64), 0)
    xmax = np.minimum(np.trunc(center + support + 0.5).astype(np.int64), in_size) - xmin
    taps = np.arange(ksize)
    valid = taps[None, :] < xmax[:, None]
    weights = kernel((taps[None, :] + xmin[:, None] - center[:, None] + 0.5) / filterscale)
    weights = np.where(valid, weights, 0.0)
    total = weights.sum(axis=1, keepdims=True)
    weights = np.where(total != 0.0, weights / np.where(total == 0.0, 1.0, total), weights)
    scaled = weights * (1 << _PRECISION_BITS)
    fixed = np.where(scaled < 0, np.trunc(scaled - 0.5), np.trunc(scaled + 0.5)).astype(np.int64)
    index = np.minimum(xmin[:, None] + taps[None, :], in_size - 1)
    return index, np.where(valid, fixed, 0)


def _pass(image: np.ndarray, out_size: int, axis: int, resample: int) -> np.ndarray:
    """One separable pass of a uint8 [H, W, C] image along ``axis`` (0 rows, 1 columns).

    Accumulates tap by tap in int32, as Pillow does, so memory stays at one
    output-sized buffer whatever the filter's width.
    """
    index, weights = _coefficients(image.shape[axis], out_size, resample)
    shape = [out_size if a == axis else n for a, n in enumerate(image.shape)]
    acc = np.full(shape, 1 << (_PRECISION_BITS - 1), dtype=np.int32)
    broadcast = [1, 1, 1]
    broadcast[axis] = out_size
    fixed = weights.astype(np.int32)
    for k in range(index.shape[1]):
        taps = np.take(image, index[:, k], axis=axis).astype(np.int32)
        taps *= fixed[:, k].reshape(broadcast)
        acc += taps
    return np.clip(acc >> _PRECISION_BITS, 0, 255).astype(np.uint8)


def resize_uint8(image: np.ndarray, height: int, width: int, resample: int) -> np.ndarray:
    """``image`` (uint8 [H, W, C]) resized to [height, width, C] bit for bit as Pillow does."""
    if resample not in FILTERS:
        raise ValueError(f"resampling filter {resample} is not supported (supported: {sorted(FILTER_NAMES)})")
    if height < 1 or width < 1:
        raise ValueError(f"cannot resize an image to {height}x{width}")
    in_height, in_width = image.shape[:2]
    passes = [(1, width), (0, height)]
    # Pillow runs the vertical pass first when the height shrinks more than twice
    # as much as the width (the intermediate rounding differs, so the order matters).
    if in_height - height > 0 and in_height - height > (in_width - width) * 2:
        passes.reverse()
    out = image
    for axis, size in passes:
        if size != out.shape[axis]:  # Pillow skips a pass whose size does not change
            out = _pass(out, size, axis, resample)
    return out if out is not image else image.copy()

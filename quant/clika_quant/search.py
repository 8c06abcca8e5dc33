"""Block quantization by search: better scales than round-to-nearest, NumPy only.

For every block, a grid of candidate scales is tried (the RTN range stretched
or shrunk); for each candidate the codes are rounded, then the block's scale
(and offset or integer zero point) is refit to those codes by weighted least
squares, and the pair with the smallest weighted squared error wins. The same
idea drives llama.cpp's k-quant search; here every block of the matrix is
searched at once (arrays ``[N, n_blocks, block_size]`` per candidate).

``importance`` (one weight per input channel, e.g. the mean squared
activation seen on calibration text) makes the error activation-aware: the
channels that carry large activations are reproduced more precisely.
"""

from __future__ import annotations

import numpy as np

from clika_quant.blocks import BlockQuantized
from clika_quant.rtn import block_range, split_blocks

# Candidate scales: the RTN range times (levels + STEP * i + LOW) / levels, i = 0..STEPS.
LOW, STEP, STEPS = -1.0, 0.1, 20


def quantize_search(
    weight_nk: np.ndarray,
    bits: int,
    block_size: int,
    zero_point: str = "offset",
    importance: np.ndarray | None = None,
    refinements: int = 2,
) -> BlockQuantized:
    """Search-based block quantization of a ``[N, K]`` (output-row order) matrix.

    ``zero_point``: "none" (symmetric), "uint8" (integer zero point) or
    "offset" (codes from zero plus an exact float offset per block).
    """
    if zero_point not in ("none", "uint8", "offset"):
        raise ValueError(f"zero_point must be none, uint8 or offset, got {zero_point!r}")
    n, k = weight_nk.shape
    x = split_blocks(weight_nk, block_size).astype(np.float64)
    w = _block_weights(importance, n, k, block_size)
    fit = _FITS[zero_point]
    levels = (1 << bits) - 1
    best = None
    for step in range(STEPS + 1):
        stretch = (levels + STEP * step + LOW) / levels
        candidate = fit(x, w, bits, _initial(x, zero_point, bits, stretch))
        best = candidate if best is None else _keep_better(best, candidate)
    for _ in range(refinements):
        best = _keep_better(best, fit(x, w, bits, best))
    return _to_matrix(best, zero_point, bits, block_size, k)


def weighted_error(
    weight_nk: np.ndarray, matrix: BlockQuantized, importance: np.ndarray | None = None
) -> float:
    """Relative (importance-weighted) Frobenius error of the dequantized matrix."""
    diff = (matrix.dequantize().astype(np.float64) - weight_nk) ** 2
    ref = weight_nk.astype(np.float64) ** 2
    if importance is not None:
        diff, ref = diff * importance, ref * importance
    return float(np.sqrt(diff.sum() / max(ref.sum(), 1e-30)))


# -- internals: a candidate is (scale, zero, codes, error) per block ------------------------


def _block_weights(importance: np.ndarray | None, n: int, k: int, block_size: int) -> np.ndarray:
    if importance is None:
        return np.ones((1, 1, 1))
    imp = np.asarray(importance, np.float64).reshape(1, k)
    if imp.shape[1] != k:
        raise ValueError(f"importance has {imp.size} entries, the matrix has K={k}")
    imp = imp / max(imp.mean(), 1e-30) + 1e-6
    return split_blocks(np.broadcast_to(imp, (1, k)), block_size).astype(np.float64)


def _initial(x: np.ndarray, zero_point: str, bits: int, stretch: float) -> tuple:
    """RTN scale and zero for the block, the scale multiplied by ``stretch``."""
    kind = "float" if zero_point == "offset" else zero_point
    scale, zero = block_range(x.astype(np.float32), kind, bits)
    scale = scale.astype(np.float64) * stretch
    if zero_point == "none":
        return scale, zero.astype(np.float64), None, None
    low = np.minimum(x.min(axis=-1), 0.0) if zero_point == "uint8" else x.min(axis=-1)
    safe = np.where(scale == 0, 1.0, scale)
    return scale, -low / safe, None, None


def _codes(x: np.ndarray, scale: np.ndarray, zero: np.ndarray, bits: int) -> np.ndarray:
    safe = np.where(scale == 0, 1.0, scale)[..., None]
    return np.clip(np.rint(x / safe + zero[..., None]), 0, (1 << bits) - 1)


def _fit_symmetric(x, w, bits, start):
    """Codes around the fixed zero point 2**(bits-1); scale refit by least squares."""
    scale, zero = start[0], np.full(start[0].shape, float(1 << (bits - 1)))
    q = _codes(x, scale, zero, bits) - zero[..., None]
    num, den = (w * x * q).sum(-1), (w * q * q).sum(-1)
    fitted = np.where(den > 0, num / np.where(den > 0, den, 1.0), scale)
    return _scored(x, w, fitted, zero, q + zero[..., None])


def _fit_integer_zero(x, w, bits, start):
    """Integer zero point from the candidate; scale refit to the codes."""
    scale, zero = start[0], np.clip(np.rint(start[1]), 0, (1 << bits) - 1)
    q = _codes(x, scale, zero, bits) - zero[..., None]
    num, den = (w * x * q).sum(-1), (w * q * q).sum(-1)
    fitted = np.where(den > 0, num / np.where(den > 0, den, 1.0), scale)
    return _scored(x, w, fitted, zero, q + zero[..., None])


def _fit_offset(x, w, bits, start):
    """Codes from zero; scale and offset refit together (2x2 weighted least squares)."""
    scale, zero = start[0], start[1]
    q = _codes(x, scale, zero, bits)
    sw, sq, sqq = w.sum(-1) * np.ones(q.shape[:-1]), (w * q).sum(-1), (w * q * q).sum(-1)
    sx, sqx = (w * x).sum(-1), (w * q * x).sum(-1)
    det = sw * sqq - sq * sq
    ok = det > 1e-20 * np.maximum(sw * sqq, 1e-30)
    safe_det = np.where(ok, det, 1.0)
    fitted_scale = np.where(ok, (sw * sqx - sq * sx) / safe_det, scale)
    offset = np.where(ok, (sqq * sx - sq * sqx) / safe_det, -zero * scale)
    # Stored as zero = -offset / scale only to share the candidate layout; the offset is kept exactly.
    return _scored(x, w, fitted_scale, None, q, offset)


def _scored(x, w, scale, zero, codes, offset=None):
    if offset is None:
        approx = (codes - zero[..., None]) * scale[..., None]
    else:
        approx = codes * scale[..., None] + offset[..., None]
    error = (w * (approx - x) ** 2).sum(-1)
    return scale, (zero if offset is None else offset), codes, error


def _keep_better(best: tuple, candidate: tuple) -> tuple:
    better = candidate[3] < best[3]
    return tuple(
        np.where(better[..., None] if a.ndim == 3 else better, a, b)
        for a, b in zip(candidate, best, strict=True)
    )


_FITS = {"none": _fit_symmetric, "uint8": _fit_integer_zero, "offset": _fit_offset}


def _to_matrix(best: tuple, zero_point: str, bits: int, block_size: int, k: int) -> BlockQuantized:
    scale, zero_or_offset, codes, _ = best
    n, n_blocks, _ = codes.shape
    zero_points, offsets = None, None
    if zero_point == "uint8":
        zero_points = zero_or_offset.astype(np.uint8)
    elif zero_point == "offset":
        zero_points = np.zeros((n, n_blocks), np.uint8)
        offsets = zero_or_offset.astype(np.float32)
    return BlockQuantized(
        codes=codes.astype(np.uint8).reshape(n, -1),
        scales=scale.astype(np.float32),
        zero_points=zero_points,
        bits=bits,
        block_size=block_size,
        k=k,
        offsets=offsets,
    )

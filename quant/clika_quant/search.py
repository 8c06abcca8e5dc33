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

from clika_quant.rtn import block_range, split_blocks
from clika_runtime.kernels.blocks import BlockQuantized

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
    x = split_blocks(weight_nk, block_size)
    w = _block_weights(importance, n, k, block_size)
    fit = _FITS[zero_point]
    levels = (1 << bits) - 1
    base_scale, low = _initial(x, zero_point, bits)
    # Only each block's best starting point is kept during the search (cheap 2-D arrays).
    best_start, best_error = None, None
    for step in range(STEPS + 1):
        scale = base_scale * np.float32((levels + STEP * step + LOW) / levels)
        start = (scale, _zero_for(scale, low, zero_point, bits))
        error = fit(x, w, bits, start)[3]
        if best_start is None:
            best_start, best_error = start, error
            continue
        better = error < best_error
        best_start = tuple(np.where(better, new, old) for new, old in zip(start, best_start, strict=True))
        best_error = np.where(better, error, best_error)
    best = fit(x, w, bits, best_start)
    for _ in range(refinements):
        best = _keep_better(best, fit(x, w, bits, _as_start(best, zero_point)))
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


def _block_weights(importance: np.ndarray | None, n: int, k: int, block_size: int) -> np.ndarray | None:
    if importance is None:
        return None
    imp = np.asarray(importance, np.float64).reshape(1, k)
    if imp.shape[1] != k:
        raise ValueError(f"importance has {imp.size} entries, the matrix has K={k}")
    imp = imp / max(imp.mean(), 1e-30) + 1e-6
    return split_blocks(np.broadcast_to(imp, (1, k)), block_size).astype(np.float32)


def _initial(x: np.ndarray, zero_point: str, bits: int) -> tuple[np.ndarray, np.ndarray | None]:
    """The RTN scale of every block and the low end of its range (None when symmetric)."""
    scale, _ = block_range(x, "float" if zero_point == "offset" else zero_point, bits)
    if zero_point == "none":
        return scale, None
    low = np.minimum(x.min(axis=-1), 0.0) if zero_point == "uint8" else x.min(axis=-1)
    return scale, low


def _zero_for(scale: np.ndarray, low: np.ndarray | None, zero_point: str, bits: int) -> np.ndarray:
    if zero_point == "none":
        return np.full(scale.shape, float(1 << (bits - 1)), np.float32)
    return (-low / np.where(scale == 0, 1.0, scale)).astype(np.float32)


def _as_start(candidate: tuple, zero_point: str) -> tuple:
    """A fitted candidate as the starting point of another fit (offsets back to zero points)."""
    scale, zero_or_offset = candidate[0], candidate[1]
    if zero_point != "offset":
        return scale, zero_or_offset
    return scale, -zero_or_offset / np.where(scale == 0, 1.0, scale)


def _codes(x: np.ndarray, scale: np.ndarray, zero: np.ndarray, bits: int) -> np.ndarray:
    safe = np.where(scale == 0, 1.0, scale)[..., None]
    return np.clip(np.rint(x / safe + zero[..., None]), 0, (1 << bits) - 1)


def _wsum(w: np.ndarray | None, values: np.ndarray) -> np.ndarray:
    """Sum over each block, weighted when importance was given."""
    return (values if w is None else w * values).sum(-1)


def _fit_scale(x, w, bits, scale, zero):
    """Codes for (scale, integer zero); scale refit to them; error from the sums (no second pass)."""
    q = _codes(x, scale, zero, bits) - zero[..., None]
    sqq, sqx = _wsum(w, q * q), _wsum(w, q * x)
    fitted = np.where(sqq > 0, sqx / np.where(sqq > 0, sqq, 1.0), scale)
    error = fitted * fitted * sqq - 2 * fitted * sqx + _wsum(w, x * x)
    return fitted, zero, q + zero[..., None], error


def _fit_symmetric(x, w, bits, start):
    """Codes around the fixed zero point 2**(bits-1); scale refit by least squares."""
    return _fit_scale(x, w, bits, start[0], np.full(start[0].shape, float(1 << (bits - 1)), np.float32))


def _fit_integer_zero(x, w, bits, start):
    """Integer zero point from the candidate; scale refit to the codes."""
    return _fit_scale(x, w, bits, start[0], np.clip(np.rint(start[1]), 0, (1 << bits) - 1))


def _fit_offset(x, w, bits, start):
    """Codes from zero; scale and offset refit together (2x2 weighted least squares)."""
    scale, zero = start[0], start[1]
    q = _codes(x, scale, zero, bits)
    sw = np.full(q.shape[:-1], x.shape[-1], np.float32) if w is None else _wsum(w, np.ones_like(q))
    sq, sqq, sx, sqx = _wsum(w, q), _wsum(w, q * q), _wsum(w, x), _wsum(w, q * x)
    det = sw * sqq - sq * sq
    ok = det > 1e-12 * np.maximum(sw * sqq, 1e-30)
    safe_det = np.where(ok, det, 1.0)
    s = np.where(ok, (sw * sqx - sq * sx) / safe_det, scale)
    o = np.where(ok, (sqq * sx - sq * sqx) / safe_det, -zero * scale)
    error = s * s * sqq + 2 * s * o * sq + o * o * sw - 2 * s * sqx - 2 * o * sx + _wsum(w, x * x)
    return s, o, q, error


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

"""Round-to-nearest block quantization of a float matrix (the baseline).

Zero-point kinds:

* ``"none"``: symmetric. The block's value of largest magnitude maps to code 0
  (``-2**(bits-1)`` after the implicit zero point), so the full signed range is
  used and the extreme value is exact.
* ``"uint8"``: asymmetric with an integer zero point: min and max span the codes.
* ``"float"``: asymmetric with a float zero point (4 bits only): min and max exact.
* ``"offset"``: the same grid as ``"float"``, stored as codes from zero plus a
  float offset per block (what the fast kernels can run, see ``blocks``).
"""

from __future__ import annotations

import numpy as np

from clika_runtime.kernels.blocks import BlockQuantized

ZERO_POINT_KINDS = ("none", "uint8", "float", "offset")


def split_blocks(weight_nk: np.ndarray, block_size: int) -> np.ndarray:
    """``[N, K]`` -> ``[N, n_blocks, block_size]``, padding K with zeros."""
    n, k = weight_nk.shape
    pad = (-k) % block_size
    w = weight_nk.astype(np.float32, copy=False)
    if pad:
        w = np.concatenate([w, np.zeros((n, pad), np.float32)], axis=1)
    return w.reshape(n, -1, block_size)


def block_range(blocks: np.ndarray, zero_point: str, bits: int) -> tuple[np.ndarray, np.ndarray]:
    """Scale and zero point (float) covering each block's range with RTN."""
    levels = (1 << bits) - 1
    if zero_point == "none":
        idx = np.abs(blocks).argmax(axis=-1)[..., None]
        extreme = np.take_along_axis(blocks, idx, axis=-1)[..., 0]
        scale = extreme / -float(1 << (bits - 1))
        return scale.astype(np.float32), np.full(scale.shape, float(1 << (bits - 1)), np.float32)
    low = np.minimum(blocks.min(axis=-1), 0.0) if zero_point == "uint8" else blocks.min(axis=-1)
    high = np.maximum(blocks.max(axis=-1), 0.0) if zero_point == "uint8" else blocks.max(axis=-1)
    scale = ((high - low) / levels).astype(np.float32)
    constant = scale == 0
    safe = np.where(constant, 1.0, scale)
    zero = np.where(constant, -1.0, -low / safe).astype(np.float32)
    # A constant block (float zero points only) is exact as code 0 with scale=value, zero=-1.
    return np.where(constant, low, scale).astype(np.float32), zero


def encode(
    blocks: np.ndarray, scale: np.ndarray, zero: np.ndarray, zero_point: str, bits: int, k: int
) -> BlockQuantized:
    """Codes for given per-block scale and (float) zero point; integer zero points are rounded."""
    levels = (1 << bits) - 1
    n, n_blocks, block_size = blocks.shape
    if zero_point == "uint8":
        zero = np.clip(np.rint(zero), 0, levels)
    safe = np.where(scale == 0, 1.0, scale)[..., None]
    codes = np.clip(np.rint(blocks / safe + zero[..., None]), 0, levels).astype(np.uint8)
    zp_array, offsets = None, None
    if zero_point == "uint8":
        zp_array = zero.astype(np.uint8)
    elif zero_point == "float":
        zp_array = zero.astype(np.float32)
    elif zero_point == "offset":
        zp_array = np.zeros(zero.shape, np.uint8)
        offsets = -(zero.astype(np.float32) * scale.astype(np.float32))
    return BlockQuantized(
        codes=codes.reshape(n, n_blocks * block_size),
        scales=scale.astype(np.float32),
        zero_points=zp_array,
        bits=bits,
        block_size=block_size,
        k=k,
        offsets=offsets,
    )


def quantize_rtn(
    weight_nk: np.ndarray, bits: int, block_size: int, zero_point: str = "none"
) -> BlockQuantized:
    """Round-to-nearest block quantization of a ``[N, K]`` (output-row order) matrix."""
    if zero_point not in ZERO_POINT_KINDS:
        raise ValueError(f"zero_point must be one of {ZERO_POINT_KINDS}, got {zero_point!r}")
    blocks = split_blocks(weight_nk, block_size)
    scale, zero = block_range(blocks, "float" if zero_point == "offset" else zero_point, bits)
    return encode(blocks, scale, zero, zero_point, bits, weight_nk.shape[1])

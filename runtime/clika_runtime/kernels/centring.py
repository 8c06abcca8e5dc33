"""Integer zero points moved to each block's mean code, the weights unchanged bit for bit.

``w = s * (q - zp) + o`` holds for any integer ``zp`` once the offset ``o``
absorbs ``s * zp``; a zero point near the block's mean code shrinks the
integers the int8 kernel (``accuracy_level=4``) multiplies, and its error with
them (2-2.5x on SmolLM2's matrices). The exporter centres the blocks it writes
as MatMulNBits, and the runtime the ones it rewrites into that form at load, so
both give the same bytes.
"""

from __future__ import annotations

import numpy as np

from clika_runtime.kernels.blocks import BlockQuantized


def center_zero_points(matrix: BlockQuantized) -> BlockQuantized:
    """The same weights with each block's integer zero point moved to its mean code.

    Only matrices with offsets can move their zero point (the offset takes up
    ``scale * shift``). A block keeps its zero point when the new offset would
    not be exact in float32, so ``dequantize`` never changes.
    """
    if matrix.offsets is None or matrix.float_zero_points:
        return matrix
    # Padding codes past K never meet an activation: they do not count in the mean.
    counts = np.minimum(matrix.block_size, matrix.k - np.arange(matrix.n_blocks) * matrix.block_size)
    mean = _block_sums(matrix.codes[:, : matrix.k].astype(np.float64), matrix) / counts
    old = matrix.integer_zero_points().astype(np.float64)
    new = np.clip(np.rint(mean), 0, (1 << matrix.bits) - 1)
    offsets = matrix.offsets.astype(np.float64) + (new - old) * matrix.scales.astype(np.float64)
    exact = offsets.astype(np.float32).astype(np.float64) == offsets
    return BlockQuantized(
        codes=matrix.codes,
        scales=matrix.scales,
        zero_points=np.where(exact, new, old).astype(np.uint8),
        bits=matrix.bits,
        block_size=matrix.block_size,
        k=matrix.k,
        offsets=np.where(exact, offsets, matrix.offsets).astype(np.float32),
    )


def _block_sums(values_nk: np.ndarray, matrix: BlockQuantized) -> np.ndarray:
    """Sums of ``[N, K]`` values over each block of K (the last block may be short)."""
    pad = matrix.n_blocks * matrix.block_size - values_nk.shape[1]
    padded = np.pad(values_nk, ((0, 0), (0, pad)))
    return padded.reshape(matrix.n, matrix.n_blocks, matrix.block_size).sum(-1)

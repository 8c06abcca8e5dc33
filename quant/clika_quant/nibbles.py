"""An 8-bit matrix stored as its 4 high bits and its low bits, so the high bits can rank.

The output head is stored 8 bits wide (a GGUF's Q8_0, Q6_K or Q5_0 blocks, exactly) and
ranks the vocabulary with a 4-bit form (its best logits are then re-scored from the exact
bytes). A separate 4-bit copy of the head costs half the head again on disk (87 MB for
Qwen2.5-0.5B's 151,936 x 896 head). Splitting the codes instead stores the head once::

    c - zp = 2**t * (h - 8) + l        h: 4 bits, l: t bits (t = 4 for Q8_0, 2 for Q6_K, 1 for Q5_0)
    w      = S * (h - 8) + S * 2**-t * l       with S = 2**t * scale

MatMulNBits reads ``h`` with scales ``S`` as the 4-bit ranking form; a row is
``GatherBlockQuantized(h) + 2**-t * GatherBlockQuantized(l)`` and equals the 8-bit row bit for
bit (each part is an exact float product: scales from fp16 GGUF fields times a few-bit code,
so the one rounding is the sum's, the same as the 8-bit dequantization's). ``S`` is stored once:
the gathers read it through an alias of the same bytes.

The ranking form drops ``S * 2**-t * l``, a non-negative term whose mean is added back as
``mean(l) * 2**-t * blocksum(x) @ S^T`` (the same scales, no extra bytes on disk).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from clika_runtime.kernels.blocks import BlockQuantized

HIGH_BITS = 4


@dataclass(frozen=True)
class NibbleSplit:
    """``matrix`` as ``high`` (4 bits, scales ``S``) plus ``2**-shift * low`` (same scales)."""

    high: BlockQuantized
    low: BlockQuantized
    shift: int
    # The mean of the low codes: what the ranking form adds back per block sum.
    low_mean: float

    @property
    def low_weight(self) -> float:
        return 2.0**-self.shift

    def dequantize(self) -> np.ndarray:
        """The rows as the two gathers compute them (float32, equal to the 8-bit matrix's)."""
        low = (self.low.codes.astype(np.float32) * np.repeat(self.low.scales, self.low.block_size, 1))[
            :, : self.low.k
        ]
        return self.high.dequantize() + low * np.float32(self.low_weight)

    def nbytes(self) -> int:
        """Bytes on disk: both code arrays and one set of scales."""
        return (self.high.codes.size * HIGH_BITS + self.low.codes.size * self.low.bits) // 8 + (
            self.high.scales.nbytes
        )

    def scan_bytes(self) -> int:
        """Bytes the ranking form reads per token (high codes and the scales)."""
        return self.high.codes.size * HIGH_BITS // 8 + self.high.scales.nbytes


def split_nibbles(matrix: BlockQuantized) -> NibbleSplit | None:
    """The split of an 8-bit matrix with integer zero points and no offsets, or None.

    None when the codes around their zero points need more than 8 bits or fewer than 5 (a
    4-bit matrix needs no ranking form), or when a split would not be exact.
    """
    if matrix.bits != 8 or matrix.offsets is not None or matrix.float_zero_points:
        return None
    zero = matrix.integer_zero_points().astype(np.int32)
    blocks = matrix.codes.reshape(matrix.n, matrix.n_blocks, matrix.block_size).astype(np.int32)
    centred = blocks - zero[:, :, None]
    width = _signed_width(int(centred.min()), int(centred.max()))
    if width is None or width <= HIGH_BITS:
        return None
    shift = width - HIGH_BITS
    scales = matrix.scales.astype(np.float32)
    wide = scales * np.float32(2**shift)
    if not _exact_products(scales):
        return None
    biased = centred + (1 << (width - 1))  # 0 .. 2**width - 1
    high = (biased >> shift).astype(np.uint8).reshape(matrix.n, -1)
    low = (biased & ((1 << shift) - 1)).astype(np.uint8).reshape(matrix.n, -1)
    low_bits = 2 if shift <= 2 else 4
    common = {"block_size": matrix.block_size, "k": matrix.k}
    return NibbleSplit(
        high=BlockQuantized(high, wide, None, HIGH_BITS, **common),
        low=BlockQuantized(low, wide, np.zeros(scales.shape, np.uint8), low_bits, **common),
        shift=shift,
        low_mean=float(low.mean()),
    )


def _signed_width(low: int, high: int) -> int | None:
    """The fewest bits whose two's-complement range holds ``low .. high`` (None above 8)."""
    for width in range(1, 9):
        if -(1 << (width - 1)) <= low and high < (1 << (width - 1)):
            return width
    return None


def _exact_products(scales: np.ndarray) -> bool:
    """Every ``scale * code`` with ``|code| <= 15`` (4 bits) is a float32 without rounding.

    GGUF scales are fp16 fields (11 significant bits), or an fp16 times a 6- or 8-bit
    integer (Q6_K: up to 19); a float source's scales may use all 24 and are not split.
    """
    if not np.isfinite(scales).all():
        return False
    finite = np.abs(scales[scales != 0]).astype(np.float64)
    _, exponents = np.frexp(finite)
    mantissas = np.ldexp(finite, 24 - exponents).astype(np.int64)  # 24-bit integers, top bit set
    lowest = mantissas & -mantissas  # the lowest set bit
    significant = 24 - np.log2(lowest).astype(np.int64)
    return bool((significant + HIGH_BITS <= 24).all())


# ORT 1.32's 2-bit MatMulNBits has a fast int8-activation kernel only for blocks of at least 32
# (blocks of 16: 30 ms against 0.1 ms for a 4864x896 matrix, ``benchmarks/quant/split_blocks.py``).
LOW_KERNEL_MIN_BLOCK = 32


def split_layer_blocks(matrix: BlockQuantized) -> NibbleSplit | None:
    """A layer matrix of 5- or 6-bit codes stored as 4 + 2 bits a weight instead of 8, or None.

    Two MatMulNBits compute it (``Rewriter.split_matmul``): 4-bit on the high codes and 2-bit on
    the low ones (zero points 0), one set of scales. Only where that is smaller and fast: codes of
    5 or 6 bits (Q5_0, Q6_K; Q8_0's 8 split into 4 + 4, no smaller), no offsets (Q5_1/Q5_K keep
    their 8-bit form), blocks of at least ``LOW_KERNEL_MIN_BLOCK``.
    """
    if matrix.block_size < LOW_KERNEL_MIN_BLOCK:
        return None
    split = split_nibbles(matrix)
    if split is None or split.shift > 2:
        return None
    return split


def layer_split_bytes(split: NibbleSplit) -> int:
    """Bytes of a split layer matrix: its codes, scales once and the low part's zero points."""
    from clika_runtime.kernels.blocks import pack_zero_points

    return split.nbytes() + pack_zero_points(split.low).nbytes

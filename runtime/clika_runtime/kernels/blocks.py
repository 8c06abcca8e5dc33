"""Block-quantized matrices in the form ONNX Runtime's ``MatMulNBits`` reads.

A ``BlockQuantized`` holds a weight matrix in output-row order (``[N, K]``:
one row per output feature, blocks running along the input axis ``K``) as
unpacked integer codes, one scale per block and optional zero points. Its
``dequantize`` reproduces ORT's arithmetic exactly (checked by tests against the
op itself), so a quantizer can reason about what the kernel will compute:

* integer zero points (uint8, or none = ``2**(bits-1)``): ``(q - zp) * scale``;
* float zero points (4-bit only on CPU): ``q * scale - zp * scale`` in float32.

A matrix may also carry ``offsets``, one float per block added to every weight
of the block (``w = (q - zp) * scale + offset``): that is how GGUF's Q4_1/Q4_K
"min" terms and asymmetric quantization with an exact minimum are kept. ORT has
no fast kernel for float zero points, so the graph pass computes the offsets as
``blocksum(A) @ offsets`` beside the integer MatMulNBits.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

SUPPORTED_BITS = (2, 4, 8)


@dataclass(frozen=True)
class BlockQuantized:
    """A ``[N, K]`` matrix quantized block-wise along ``K``.

    ``codes`` is uint8 ``[N, n_blocks * block_size]`` (``K`` padded with zero
    codes up to whole blocks); ``scales`` float32 ``[N, n_blocks]``;
    ``zero_points`` None (the default ``2**(bits-1)``), uint8 or float32
    ``[N, n_blocks]``; ``offsets`` None or float32 ``[N, n_blocks]``.
    """

    codes: np.ndarray
    scales: np.ndarray
    zero_points: np.ndarray | None
    bits: int
    block_size: int
    k: int
    offsets: np.ndarray | None = None

    def __post_init__(self) -> None:
        if self.bits not in SUPPORTED_BITS:
            raise ValueError(f"bits must be one of {SUPPORTED_BITS}, got {self.bits}")
        if self.block_size < 16 or self.block_size & (self.block_size - 1):
            raise ValueError(f"block_size must be a power of two >= 16, got {self.block_size}")
        n, padded = self.codes.shape
        blocks = -(-self.k // self.block_size)
        if padded != blocks * self.block_size or self.scales.shape != (n, blocks):
            raise ValueError(
                f"codes {self.codes.shape} / scales {self.scales.shape} do not fit K={self.k}, "
                f"block_size={self.block_size}"
            )
        if self.zero_points is not None and self.zero_points.shape != (n, blocks):
            raise ValueError(f"zero_points shape {self.zero_points.shape} != {(n, blocks)}")
        if self.zero_points is not None and self.float_zero_points and self.bits != 4:
            raise ValueError("float zero points are supported by MatMulNBits on CPU for 4 bits only")
        if self.offsets is not None and (self.offsets.shape != (n, blocks) or self.float_zero_points):
            raise ValueError(f"offsets need shape {(n, blocks)} and integer zero points")

    @property
    def n(self) -> int:
        return self.codes.shape[0]

    @property
    def n_blocks(self) -> int:
        return self.scales.shape[1]

    @property
    def float_zero_points(self) -> bool:
        return self.zero_points is not None and self.zero_points.dtype.kind == "f"

    def integer_zero_points(self) -> np.ndarray:
        """The zero point of every block as uint8 (the default one when absent)."""
        if self.zero_points is None:
            return np.full(self.scales.shape, 1 << (self.bits - 1), np.uint8)
        if self.float_zero_points:
            raise ValueError("this matrix has float zero points")
        return self.zero_points

    def dequantize(self) -> np.ndarray:
        """float32 ``[N, K]`` exactly as MatMulNBits (accuracy_level 0) sees the weights."""
        scales = self.scales.astype(np.float32)
        codes = self.codes.reshape(self.n, self.n_blocks, self.block_size).astype(np.float32)
        if self.float_zero_points:
            offset = self.zero_points.astype(np.float32) * scales
            values = codes * scales[:, :, None] - offset[:, :, None]
        else:
            zero = self.integer_zero_points().astype(np.float32)
            values = (codes - zero[:, :, None]) * scales[:, :, None]
            if self.offsets is not None:
                values = values + self.offsets.astype(np.float32)[:, :, None]
        return values.reshape(self.n, -1)[:, : self.k]

    def nbytes(self) -> int:
        """Bytes this matrix takes as MatMulNBits initializers."""
        zp = 0
        if self.zero_points is not None:
            zp = self.zero_points.nbytes if self.float_zero_points else pack_zero_points(self).nbytes
        offsets = 0 if self.offsets is None else self.offsets.nbytes
        return self.codes.size * self.bits // 8 + self.scales.nbytes + zp + offsets


def pack_codes(codes: np.ndarray, bits: int) -> np.ndarray:
    """Pack uint8 codes along the last axis, lowest bits first (MatMulNBits order)."""
    per_byte = 8 // bits
    if codes.shape[-1] % per_byte:
        raise ValueError(f"last axis {codes.shape[-1]} is not a multiple of {per_byte}")
    if bits == 8:
        return np.ascontiguousarray(codes, dtype=np.uint8)
    grouped = codes.astype(np.uint8).reshape(*codes.shape[:-1], -1, per_byte)
    packed = np.zeros(grouped.shape[:-1], np.uint8)
    for i in range(per_byte):
        packed |= grouped[..., i] << np.uint8(i * bits)
    return packed


def unpack_codes(packed: np.ndarray, bits: int) -> np.ndarray:
    """Inverse of ``pack_codes``."""
    if bits == 8:
        return packed.astype(np.uint8)
    per_byte = 8 // bits
    shifts = (np.arange(per_byte, dtype=np.uint8) * bits).astype(np.uint8)
    mask = np.uint8((1 << bits) - 1)
    parts = (packed[..., None] >> shifts) & mask
    return parts.reshape(*packed.shape[:-1], -1)


def pack_b(matrix: BlockQuantized) -> np.ndarray:
    """MatMulNBits input B: uint8 ``[N, n_blocks, block_size * bits / 8]``."""
    blocks = matrix.codes.reshape(matrix.n, matrix.n_blocks, matrix.block_size)
    return pack_codes(blocks, matrix.bits)


def pack_zero_points(matrix: BlockQuantized) -> np.ndarray:
    """Integer zero points packed per row (``[N, ceil(n_blocks * bits / 8)]``), padded with 0."""
    zp = matrix.integer_zero_points()
    per_byte = 8 // matrix.bits
    pad = (-matrix.n_blocks) % per_byte
    if pad:
        zp = np.concatenate([zp, np.zeros((matrix.n, pad), np.uint8)], axis=1)
    return pack_codes(zp, matrix.bits)

"""Lossless transcoding of GGUF block-quantized tensors into MatMulNBits form.

Every GGUF type used by the supported models is an affine map per block,
``w = scale * (q - zero) + offset`` with small integer codes ``q``; this module
reads the codes, scales and offsets out of the raw bytes (no rounding anywhere:
every product of an fp16 scale and a 6-bit or smaller integer is exact in
float32) and returns a ``BlockQuantized`` whose ``dequantize`` equals
``gguf.quants.dequantize`` of the same bytes bit for bit.

| GGUF | block | GGUF formula | MatMulNBits form |
|---|---|---|---|
| Q4_0 | 32 | d * (q - 8) | 4-bit, default zero point 8 |
| Q4_1 | 32 | d * q + m | 4-bit, zero point 0, offset m |
| Q5_0 | 32 | d * (q - 16) | 8-bit, codes q + 112, default zero point 128 |
| Q5_1 | 32 | d * q + m | 8-bit, zero point 0, offset m |
| Q8_0 | 32 | d * q (int8) | 8-bit, codes q + 128, default zero point 128 |
| Q4_K | 32 of 256 | d*sc * q - dmin*mn | 4-bit, zero point 0, offset -dmin*mn |
| Q5_K | 32 of 256 | d*sc * q - dmin*mn | 8-bit, zero point 0, offset -dmin*mn |
| Q6_K | 16 of 256 | d*sc * (q - 32) | 8-bit block 16, codes q + 96, default zero point 128 |

Offsets (a float added to a whole block) are what the float zero points of
MatMulNBits would express, but ORT's CPU kernel dequantizes the whole matrix on
every call when zero points are float (25-30x slower than int4 with int8
compute, see the README): the graph pass adds them as ``blocksum(A) @ offsets``
instead, which keeps the fast kernel and is exact.
"""

from __future__ import annotations

import numpy as np

from clika_runtime.kernels.blocks import BlockQuantized
from clika_runtime.kernels.gguf_layout import BLOCK_LAYOUT, QK_K

TRANSCODABLE = tuple(BLOCK_LAYOUT)
# The types whose MatMulNBits form is 4-bit (the others are 8-bit codes).
FOUR_BIT_TYPES = ("Q4_0", "Q4_1", "Q4_K")


class TranscodeError(ValueError):
    """A GGUF tensor that cannot be carried over exactly (the message says why)."""


def _fp16(blocks: np.ndarray, start: int) -> np.ndarray:
    """The fp16 field at byte ``start`` of every block, as float32 ``[n, 1]``."""
    return np.ascontiguousarray(blocks[:, start : start + 2]).view(np.float16).astype(np.float32)


def _nibbles(qs: np.ndarray, group: int) -> np.ndarray:
    """ggml's nibble order: in each run of ``group`` bytes, all low nibbles, then all high ones."""
    n = qs.shape[0]
    grouped = qs.reshape(n, -1, 1, group) >> np.array([0, 4], np.uint8).reshape(1, 1, 2, 1)
    return (grouped & np.uint8(0x0F)).reshape(n, -1)


def _high_bits_32(qh_bytes: np.ndarray) -> np.ndarray:
    """Q5_0/Q5_1: bit i of a little-endian uint32 is the fifth bit of weight i."""
    qh = np.ascontiguousarray(qh_bytes).view("<u4").astype(np.uint32)
    return ((qh >> np.arange(32, dtype=np.uint32)) & np.uint32(1)).astype(np.uint8)


def _k_scales_mins(packed: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Q4_K/Q5_K: the eight 6-bit scales and mins packed into 12 bytes."""
    n = packed.shape[0]
    parts = packed.reshape(n, 3, 4)
    d, m, m_d = parts[:, 0], parts[:, 1], parts[:, 2]
    sc = np.concatenate([d & 0x3F, (m_d & 0x0F) | ((d >> 2) & 0x30)], axis=1)
    mn = np.concatenate([m & 0x3F, (m_d >> 4) | ((m >> 2) & 0x30)], axis=1)
    return sc.astype(np.float32), mn.astype(np.float32)


def _decode_q4_0(b):
    return _nibbles(b[:, 2:], 16), _fp16(b, 0), None, 4, None


def _decode_q4_1(b):
    return _nibbles(b[:, 4:], 16), _fp16(b, 0), _fp16(b, 2), 4, 0


def _decode_q5_0(b):
    q = _nibbles(b[:, 6:], 16) | (_high_bits_32(b[:, 2:6]) << 4)
    return q + np.uint8(112), _fp16(b, 0), None, 8, None


def _decode_q5_1(b):
    q = _nibbles(b[:, 8:], 16) | (_high_bits_32(b[:, 4:8]) << 4)
    return q, _fp16(b, 0), _fp16(b, 2), 8, 0


def _decode_q8_0(b):
    q = np.ascontiguousarray(b[:, 2:]).view(np.int8).astype(np.int16) + 128
    return q.astype(np.uint8), _fp16(b, 0), None, 8, None


def _k_scale_offset(b: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Per-32 scale d*sc and offset -dmin*mn of Q4_K/Q5_K super-blocks."""
    sc, mn = _k_scales_mins(b[:, 4:16])
    return _fp16(b, 0) * sc, -(_fp16(b, 2) * mn)


def _decode_q4_k(b):
    scale, offset = _k_scale_offset(b)
    return _nibbles(b[:, 16:], 32), scale, offset, 4, 0


def _decode_q5_k(b):
    scale, offset = _k_scale_offset(b)
    n = b.shape[0]
    low = _nibbles(b[:, 48:], 32)
    qh = b[:, 16:48]  # bit j of byte i is the fifth bit of weight 32*j + i
    high = ((qh[:, None, :] >> np.arange(8, dtype=np.uint8)[None, :, None]) & np.uint8(1)).reshape(n, -1)
    return low | (high << 4), scale, offset, 8, 0


def _decode_q6_k(b):
    n = b.shape[0]
    ql = _nibbles(b[:, :128], 64).reshape(n, 2, 4, 32)
    qh = b[:, 128:192].reshape(n, 2, 1, 32) >> np.array([0, 2, 4, 6], np.uint8).reshape(1, 1, 4, 1)
    q = (ql | ((qh & np.uint8(3)) << 4)).reshape(n, QK_K)
    sc = np.ascontiguousarray(b[:, 192:208]).view(np.int8).astype(np.float32)
    return q + np.uint8(96), _fp16(b, 208) * sc, None, 8, None


_DECODERS = {
    "Q4_0": _decode_q4_0,
    "Q4_1": _decode_q4_1,
    "Q5_0": _decode_q5_0,
    "Q5_1": _decode_q5_1,
    "Q8_0": _decode_q8_0,
    "Q4_K": _decode_q4_k,
    "Q5_K": _decode_q5_k,
    "Q6_K": _decode_q6_k,
}


def transcode(ggml_type: str, data: np.ndarray, shape: tuple[int, int]) -> BlockQuantized:
    """The exact MatMulNBits form of a GGUF tensor's rows.

    ``data`` is uint8 ``[rows, bytes_per_row]`` (one output feature per row, as
    ``RawBlocks`` holds it) and ``shape`` the float shape ``(rows, cols)``.
    """
    if ggml_type not in _DECODERS:
        raise TranscodeError(
            f"GGUF type {ggml_type} has no exact MatMulNBits form (supported: {TRANSCODABLE})"
        )
    block_weights, block_bytes = BLOCK_LAYOUT[ggml_type]
    rows, cols = shape
    if cols % block_weights or data.shape != (rows, cols // block_weights * block_bytes):
        raise TranscodeError(
            f"{ggml_type} data of shape {data.shape} does not hold a {rows}x{cols} matrix "
            f"({block_bytes} bytes per {block_weights} weights)"
        )
    blocks = np.ascontiguousarray(data, dtype=np.uint8).reshape(-1, block_bytes)
    codes, scale, offset, bits, zero = _DECODERS[ggml_type](blocks)
    sub = block_weights // scale.shape[1]
    scales = scale.reshape(rows, -1)
    zero_points = None if zero is None else np.full(scales.shape, zero, np.uint8)
    return BlockQuantized(
        codes=codes.astype(np.uint8).reshape(rows, cols),
        scales=scales.astype(np.float32),
        zero_points=zero_points,
        bits=bits,
        block_size=sub,
        k=cols,
        offsets=None if offset is None else np.ascontiguousarray(offset.reshape(rows, -1), np.float32),
    )

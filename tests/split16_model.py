"""The AVX-512 VNNI split engine's arithmetic for Q4_0 / Q4_1 (kernels/src/avx512_split16.cpp),
replayed in NumPy step by step, so the engine's outputs can be checked bit for bit.

Per row and 32-block: dx = max|x| / 32639 and q = round(x * (32639 / max|x|)) to nearest
even, as fp32; per output, from y = 0 over the blocks in order:
t = sum (code - 8) * q (exact), y = fma(d * dx, t, y), and for Q4_1 y = fma(m + 8 d, xsum, y)."""

from __future__ import annotations

import numpy as np

QUANT_MAX = 32639
F32 = np.float32


def fma32(a: np.ndarray, b: np.ndarray, c: np.ndarray) -> np.ndarray:
    """fp32 fused multiply-add: the product is exact in float64, the sum rounds once there
    and then to fp32 (the double rounding differs from one rounding only at exact fp32
    midpoints, which these cases do not meet: the tests compare bits)."""
    return (a.astype(np.float64) * b.astype(np.float64) + c.astype(np.float64)).astype(F32)


def block_sum(x: np.ndarray) -> np.ndarray:
    """The engine's sum of a block's 32 values: lanes i + i + 16, + 8, + 4, + 2, + 1."""
    s = x[..., :16] + x[..., 16:]
    for width in (8, 4, 2, 1):
        s = s[..., :width] + s[..., width : 2 * width]
    return s[..., 0]


def records(a: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Per row and block: the 16-bit integers q, dx, xsum."""
    m, k = a.shape
    x = a.astype(F32).reshape(m, k // 32, 32)
    amax = np.abs(x).max(axis=2)
    finite = np.isfinite(x).all(axis=2)
    with np.errstate(divide="ignore", over="ignore", invalid="ignore"):
        inv = np.where(amax > 0, F32(QUANT_MAX) / amax, F32(0)).astype(F32)
        dx = (amax / F32(QUANT_MAX)).astype(F32)
    flushed = ~finite | ~(inv <= np.finfo(F32).max)
    inv = np.where(flushed, F32(0), inv).astype(F32)
    dx = np.where(inv == 0, np.where(finite, F32(0), F32(np.nan)), dx).astype(F32)
    with np.errstate(invalid="ignore"):
        q = np.rint((x * inv[..., None]).astype(F32)).astype(np.float64)
    q = np.clip(np.nan_to_num(q), -QUANT_MAX, QUANT_MAX).astype(np.int64)
    return q, dx, block_sum(x)


def fields(ggml_type: str, b: np.ndarray, k: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Per output and block: the codes 0..15, d and m (zeros for Q4_0) from the stored bytes."""
    n = b.shape[0]
    size, head = {"Q4_0": (18, 2), "Q4_1": (20, 4)}[ggml_type]
    blocks = b.reshape(n, k // 32, size)
    d = blocks[..., 0:2].copy().view(np.float16)[..., 0].astype(F32)
    m = blocks[..., 2:4].copy().view(np.float16)[..., 0].astype(F32) if head == 4 else np.zeros_like(d)
    qs = blocks[..., head:].astype(np.int64)
    codes = np.concatenate([qs & 0x0F, qs >> 4], axis=2)
    return codes, d, m


def matmul(ggml_type: str, a: np.ndarray, b: np.ndarray, k: int) -> np.ndarray:
    """Y[m, n] as the engine computes it, bit for bit."""
    q, dx, xsum = records(a)
    codes, d, m = fields(ggml_type, b, k)
    bias = (m + F32(8) * d).astype(F32)
    y = np.zeros((a.shape[0], b.shape[0]), F32)
    for block in range(k // 32):
        t = (q[:, block, :] @ (codes[:, block, :] - 8).T).astype(F32)  # exact: |t| < 2^23
        with np.errstate(invalid="ignore", over="ignore"):
            scale = (d[None, :, block] * dx[:, block, None]).astype(F32)
            y = fma32(scale, t, y)
            if ggml_type == "Q4_1":
                y = fma32(bias[None, :, block], xsum[:, block, None], y)
    return y

"""The output head's 4-bit ranking copy stored as GGUF Q4_0 blocks, for ``GgufMatMul``.

A head whose own high bits would read more than a copy (a Q6_K head's 16-wide blocks)
ranks its vocabulary with a 4-bit copy and re-scores the best candidates exactly. That copy is
symmetric round-to-nearest with blocks of 32 (scale = the block's extreme / -8, codes
around 8), which is Q4_0's math, so it is stored as Q4_0 blocks: an fp16 scale and 16
nibble bytes a block, 4.5 bits a weight against the MatMulNBits form's 5 (fp32 scales),
and read in place by the kernels' int8 path (Qwen2.5-Coder-1.5B's head, 151936 x 1536:
4.06 ms against 5.33 ms for MatMulNBits level 4 on the same blocks, 2 threads,
``benchmarks/quant/kernel_gemv.py --shape Q4_0:1536:151936 --rows 1``). Where the
kernels are not built the runtime reads the same blocks as MatMulNBits, exactly.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from clika_quant.rtn import block_range, encode, split_blocks
from clika_runtime.kernels.gguf_layout import BLOCK_LAYOUT

Q4_0_WEIGHTS = BLOCK_LAYOUT["Q4_0"][0]


@dataclass(frozen=True)
class Q4_0Scan:
    """``[N, K]`` ranking copy: uint8 ``[N, K / 32 * 18]`` Q4_0 blocks."""

    blocks: np.ndarray
    k: int

    @property
    def n(self) -> int:
        return self.blocks.shape[0]

    def nbytes(self) -> int:
        return int(self.blocks.nbytes)


def q4_0_scan(weight_nk: np.ndarray) -> Q4_0Scan | None:
    """The Q4_0 copy of a ``[N, K]`` matrix, or None where it has none (K not whole blocks,
    or a block scale fp16 cannot hold: such a head keeps the MatMulNBits copy)."""
    n, k = weight_nk.shape
    if k % Q4_0_WEIGHTS:
        return None
    blocks = split_blocks(weight_nk, Q4_0_WEIGHTS)
    scale, zero = block_range(blocks, "none", 4)
    with np.errstate(over="ignore"):
        scales = scale.astype(np.float16)
    if not np.isfinite(scales).all():
        return None
    # The codes are rounded against the fp16 scale the blocks store.
    codes = encode(blocks, scales.astype(np.float32), zero, "none", 4, k).codes.reshape(n, -1, Q4_0_WEIGHTS)
    # Q4_0 packs weight j of a block in the low nibble of byte j, weight j + 16 in its high one.
    nibbles = codes[..., :16] | (codes[..., 16:] << 4)
    stored = np.concatenate([scales.view(np.uint8).reshape(n, -1, 2), nibbles], axis=-1)
    return Q4_0Scan(np.ascontiguousarray(stored.reshape(n, -1)), k)

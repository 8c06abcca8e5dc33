"""The block layout of each GGUF quantized type the runtime reads: weights and bytes of one block.

One table for everything that walks GGUF blocks as stored (the kernel op's row sizes,
the lossless transcoding into MatMulNBits form).
"""

from __future__ import annotations

QK_K = 256  # weights of one k-quant super-block

# type name -> (weights, bytes) of one block
BLOCK_LAYOUT = {
    "Q4_0": (32, 18),
    "Q4_1": (32, 20),
    "Q5_0": (32, 22),
    "Q5_1": (32, 24),
    "Q8_0": (32, 34),
    "Q4_K": (QK_K, 144),
    "Q5_K": (QK_K, 176),
    "Q6_K": (QK_K, 210),
}

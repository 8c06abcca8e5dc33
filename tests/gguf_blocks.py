"""Random GGUF blocks for the transcoding tests, and their values as gguf dequantizes them."""

from __future__ import annotations

import gguf
import numpy as np
from gguf.quants import dequantize

from clika_runtime.kernels.gguf_layout import BLOCK_LAYOUT

# Byte offsets of the fp16 fields (d, and dmin/m where present) in each block type.
FP16_FIELDS = {
    "Q4_0": (0,),
    "Q4_1": (0, 2),
    "Q5_0": (0,),
    "Q5_1": (0, 2),
    "Q8_0": (0,),
    "Q4_K": (0, 2),
    "Q5_K": (0, 2),
    "Q6_K": (208,),
}


def random_blocks(ggml_type: str, rows: int, cols: int, seed: int = 0) -> np.ndarray:
    """Random bytes for ``rows`` rows of ``cols`` weights, with finite fp16 scale fields of either sign."""
    rng = np.random.default_rng(seed)
    block_weights, block_bytes = BLOCK_LAYOUT[ggml_type]
    n_blocks = rows * cols // block_weights
    blocks = rng.integers(0, 256, (n_blocks, block_bytes), dtype=np.uint8)
    for start in FP16_FIELDS[ggml_type]:
        values = (rng.standard_normal(n_blocks) * 0.02).astype(np.float16)
        values[::7] = 0  # zero scales happen in real files (all-equal blocks)
        blocks[:, start : start + 2] = values.view(np.uint8).reshape(n_blocks, 2)
    return blocks.reshape(rows, -1)


def gguf_values(ggml_type: str, data: np.ndarray, rows: int, cols: int) -> np.ndarray:
    return dequantize(data, gguf.GGMLQuantizationType[ggml_type]).reshape(rows, cols)

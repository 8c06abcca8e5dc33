"""A GGUF head's 4-bit ranking copy is stored as the Q4_0 blocks llama.cpp would write."""

from __future__ import annotations

import numpy as np
from gguf import GGMLQuantizationType
from gguf.quants import dequantize, quantize

from clika_quant.q4_0_scan import q4_0_scan


def test_the_copy_is_gguf_q4_0_with_each_code_nearest_to_its_stored_scale():
    weights = np.random.default_rng(0).standard_normal((48, 160)).astype(np.float32)
    weights[3, 32:64] = 0.0  # an all-zero block: scale 0, every code 8
    scan = q4_0_scan(weights)
    assert scan is not None and (scan.n, scan.k) == (48, 160) and scan.nbytes() == 48 * 5 * 18
    ours = scan.blocks.reshape(48, 5, 18)
    theirs = quantize(weights, GGMLQuantizationType.Q4_0).reshape(48, 5, 18)
    assert np.array_equal(ours[..., :2], theirs[..., :2])  # llama.cpp's scale: the extreme / -8, as fp16
    # llama.cpp rounds against the fp32 scale, the copy against the fp16 one it stores: a
    # weight near a half step may round the other way
    assert (ours[..., 2:] == theirs[..., 2:]).mean() > 0.99
    scale = ours[..., :2].copy().view(np.float16).astype(np.float32)  # [48, 5, 1], signed
    error = np.abs(dequantize(scan.blocks, GGMLQuantizationType.Q4_0) - weights).reshape(48, 5, 32)
    steps = weights.reshape(48, 5, 32) / np.where(scale == 0, 1, scale)  # in [-8, 8]
    within = steps <= 7.5  # codes reach 7 steps above the zero point, 8 below
    assert (error[within] <= (0.5 * np.abs(scale) * (1 + 1e-3) + 1e-7).repeat(32, -1)[within]).all()
    scale = np.abs(scale)
    assert (error <= scale * (1 + 1e-6)).all()  # code 15 (7 steps) holds up to 8 steps' worth


def test_no_copy_where_the_blocks_cannot_hold_the_matrix():
    assert q4_0_scan(np.ones((4, 48), np.float32)) is None  # K not whole blocks of 32
    huge = np.full((2, 64), 1e6, np.float32)  # a scale of 1.25e5 overflows fp16
    assert q4_0_scan(huge) is None

"""GgufMatMul's swiglu activation: the cases (each matrix without and with the activation,
on the same activations) and the formula the kernels compute, step by step in float32."""

from __future__ import annotations

import numpy as np
from gguf_blocks import random_blocks
from kernel_cases import activations, k_for, make_case

FORMATS = ("Q4_0", "Q4_1", "Q4_K", "Q8_0")
HALF = 37  # odd: task ranges and vector tails end mid-vector
SILU_ERROR = 3e-7
# Activations this large push the gate's products past the exponential's clamp (|g| > 87).
LARGE = 60.0


def cases() -> list[dict]:
    """Pairs of one matrix without and with the activation, on the same activations."""
    out = []
    for i, ggml_type in enumerate(FORMATS):
        k = k_for(ggml_type)
        blocks = random_blocks(ggml_type, 2 * HALF, k, seed=40 + i)
        for precision in ("fp32", "int8"):
            for scale in (1.0, LARGE):
                plain = make_case(ggml_type, precision, blocks, k, seed=70 + i)
                plain["a"] = (activations(k, 70 + i) * np.float32(scale)).astype(np.float32)
                out += [plain, {**plain, "activation": "swiglu"}]
    return out


def swiglu_float32(products: np.ndarray) -> np.ndarray:
    """The kernels' formula (``kernels/src/epilogue.cpp``) step by step in float32."""
    f = np.float32
    gate, up = products[:, :HALF].astype(f), products[:, HALF:].astype(f)
    x = np.minimum(np.maximum(-gate, f(-87.0)), f(88.0))
    shifted = x * f(1.44269504088896341) + f(12582912.0)
    n = shifted - f(12582912.0)
    r = (x - n * f(0.693359375)) - n * f(-2.12194440e-4)
    p = f(1.9875691500e-4)
    for c in (1.3981999507e-3, 8.3334519073e-3, 4.1665795894e-2, 1.6666665459e-1, 5.0000001201e-1):
        p = p * r + f(c)
    p = p * r * r + r + f(1.0)
    scale = ((shifted.view(np.uint32) - np.uint32(0x4B400000) + np.uint32(127)) << np.uint32(23)).view(f)
    return gate / (f(1.0) + p * scale) * up


def pairs(results):
    """(plain, gated) results of each case pair."""
    return zip(results[0::2], results[1::2], strict=True)

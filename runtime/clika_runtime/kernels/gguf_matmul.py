"""The ``GgufMatMul`` op: what a graph node of it says, shared by the exporter and the runtime.

``ai.clika.GgufMatMul`` (opset 1) multiplies float32 activations ``A [..., K]`` by
a GGUF tensor's blocks exactly as the file stores them (``B``: uint8
``[N, row_bytes]``, one output feature per row): ``Y [..., N] = A @ dequant(B)^T``.
Attributes: ``ggml_type`` (the GGUF type id), ``K``, ``N`` and ``precision``:
``"fp32"`` (fp32-grade activations, the float twin's answers) or ``"int8"``
(int8 activations, llama.cpp's numerics); ``activation``: ``"swiglu"`` for a gated MLP's
gate and up rows in one node (``op``).

Where the kernel library is not loaded, the runtime rewrites each node into the
MatMulNBits form the exporter wrote before the op existed (``fallback_graph``):
``precision`` then maps onto MatMulNBits' ``accuracy_level`` (fp32 -> 0, int8 -> 4).
"""

from __future__ import annotations

# The op's contract is the kernel library's (``op``); the graph-side names read it from there.
from clika_runtime.kernels.op import DOMAIN, GGML_TYPE_IDS, OP_TYPE, check_activation
from clika_runtime.kernels.op import OP_VERSION as OPSET_VERSION

__all__ = [
    "B_SUFFIX",
    "DOMAIN",
    "GGML_TYPE_IDS",
    "GGML_TYPE_NAMES",
    "LEVEL_PRECISIONS",
    "OPSET_VERSION",
    "OP_TYPE",
    "PRECISION_LEVELS",
    "check_activation",
]

# The B initializer of the matrix ``base`` (``model.layers.0.mlp.down_proj``) is named ``base + SUFFIX``.
B_SUFFIX = ".gguf"
GGML_TYPE_NAMES = {value: name for name, value in GGML_TYPE_IDS.items()}

# precision -> the MatMulNBits accuracy level of the same numerics
PRECISION_LEVELS = {"fp32": 0, "int8": 4}
LEVEL_PRECISIONS = {level: precision for precision, level in PRECISION_LEVELS.items()}

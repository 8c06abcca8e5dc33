"""What the quantization tests share: tiny graphs to run weights through, a blocks-only checkpoint."""

from __future__ import annotations

import numpy as np
import onnx
import onnxruntime as ort
from onnx import TensorProto, helper, numpy_helper

from clika_export.checkpoint import RawBlocks
from clika_quant.onnx_ops import matmul_nbits
from clika_runtime.kernels.blocks import BlockQuantized

OPSETS = [helper.make_opsetid("", 21), helper.make_opsetid("com.microsoft", 1)]


def matmul_model(weight_kn: np.ndarray) -> onnx.ModelProto:
    """``Y = A @ W`` as a float graph with the weight as initializer ``w``."""
    k, n = weight_kn.shape
    graph = helper.make_graph(
        [helper.make_node("MatMul", ["A", "w"], ["Y"], name="/layer/proj/MatMul")],
        "t",
        [helper.make_tensor_value_info("A", TensorProto.FLOAT, ["M", k])],
        [helper.make_tensor_value_info("Y", TensorProto.FLOAT, ["M", n])],
        [numpy_helper.from_array(weight_kn.astype(np.float32), "w")],
    )
    return helper.make_model(graph, opset_imports=OPSETS)


def run_matmul_nbits(matrix: BlockQuantized, a: np.ndarray, accuracy_level: int = 0) -> np.ndarray:
    """``a @ matrix`` by one ORT MatMulNBits node (its codes, scales and zero points; offsets not added)."""
    nodes, inits = matmul_nbits(matrix, "A", "Y", "w", accuracy_level)
    graph = helper.make_graph(
        nodes,
        "t",
        [helper.make_tensor_value_info("A", TensorProto.FLOAT, ["M", matrix.k])],
        [helper.make_tensor_value_info("Y", TensorProto.FLOAT, ["M", matrix.n])],
        inits,
    )
    model = helper.make_model(graph, opset_imports=OPSETS)
    session = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"])
    return session.run(None, {"A": a})[0]


class BlocksOnly:
    """A checkpoint stand-in that only offers the raw blocks of its tensors (all these tests need)."""

    def __init__(self, blocks: dict[str, RawBlocks]) -> None:
        self.blocks = blocks

    def raw(self, name: str) -> RawBlocks | None:
        return self.blocks.get(name)


def same_bits(a: np.ndarray, b: np.ndarray) -> bool:
    """Exactly the same float32 values (a sum in ORT turns gguf's -0.0 into +0.0: equal as numbers)."""
    a, b = a.astype(np.float32), b.astype(np.float32)
    same = a.view(np.uint32) == b.view(np.uint32)
    return a.shape == b.shape and bool((same | ((a == 0) & (b == 0))).all())

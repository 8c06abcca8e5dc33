"""ONNX nodes and initializers for the quantized weight ops ORT runs on CPU.

Every builder returns ``(nodes, initializers)`` so a pass can splice them into
a graph; names derive from a prefix so the result reads like the float graph.
"""

from __future__ import annotations

import numpy as np
import onnx
from onnx import helper, numpy_helper

from clika_runtime.kernels.blocks import BlockQuantized, pack_b, pack_zero_points

MS_DOMAIN = "com.microsoft"


def matmul_nbits_initializers(matrix: BlockQuantized, prefix: str) -> list[onnx.TensorProto]:
    """B, scales and (when present) zero points of a MatMulNBits node."""
    tensors = [
        numpy_helper.from_array(pack_b(matrix), f"{prefix}.qweight"),
        numpy_helper.from_array(matrix.scales.astype(np.float32).reshape(-1), f"{prefix}.scales"),
    ]
    if matrix.zero_points is not None:
        if matrix.float_zero_points:
            zp = matrix.zero_points.astype(np.float32).reshape(-1)
        else:
            zp = pack_zero_points(matrix).reshape(-1)
        tensors.append(numpy_helper.from_array(zp, f"{prefix}.zero_points"))
    return tensors


def matmul_nbits_node(
    matrix: BlockQuantized,
    activation: str,
    output: str,
    prefix: str,
    accuracy_level: int,
    bias: str | None = None,
    name: str | None = None,
) -> onnx.NodeProto:
    """A MatMulNBits node reading the initializers named by ``matmul_nbits_initializers``."""
    inputs = [activation, f"{prefix}.qweight", f"{prefix}.scales"]
    inputs.append(f"{prefix}.zero_points" if matrix.zero_points is not None else "")
    if bias:
        inputs += ["", bias]  # g_idx unused; bias is the 6th input
    while inputs and not inputs[-1]:
        inputs.pop()
    return helper.make_node(
        "MatMulNBits",
        inputs,
        [output],
        name=name or f"{prefix}/MatMulNBits",
        domain=MS_DOMAIN,
        K=matrix.k,
        N=matrix.n,
        bits=matrix.bits,
        block_size=matrix.block_size,
        accuracy_level=accuracy_level,
    )


def matmul_nbits(
    matrix: BlockQuantized,
    activation: str,
    output: str,
    prefix: str,
    accuracy_level: int,
    bias: str | None = None,
) -> tuple[list[onnx.NodeProto], list[onnx.TensorProto]]:
    node = matmul_nbits_node(matrix, activation, output, prefix, accuracy_level, bias)
    return [node], matmul_nbits_initializers(matrix, prefix)


def quantize_per_column_int8(weight_kn: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Symmetric int8 per output column of a ``[K, N]`` matrix: (int8 [K, N], float32 scales [N])."""
    absmax = np.abs(weight_kn).max(axis=0)
    scale = np.where(absmax == 0, 1.0, absmax / 127.0).astype(np.float32)
    q = np.clip(np.rint(weight_kn / scale), -127, 127).astype(np.int8)
    return q, scale


def dynamic_quantize_matmul(
    weight_kn: np.ndarray, activation: str, output: str, prefix: str, bias: str | None = None
) -> tuple[list[onnx.NodeProto], list[onnx.TensorProto]]:
    """com.microsoft.DynamicQuantizeMatMul: uint8 activations quantized per call, int8 weights per column."""
    q, scale = quantize_per_column_int8(weight_kn)
    inits = [
        numpy_helper.from_array(q, f"{prefix}.qweight_int8"),
        numpy_helper.from_array(scale, f"{prefix}.scales"),
    ]
    inputs = [activation, f"{prefix}.qweight_int8", f"{prefix}.scales"]
    if bias:
        inputs += ["", bias]
    node = helper.make_node(
        "DynamicQuantizeMatMul", inputs, [output], name=f"{prefix}/DynamicQuantizeMatMul", domain=MS_DOMAIN
    )
    return [node], inits

"""A one-node ``ai.clika::GgufMatMul`` graph and a session that runs it, for the kernel tests."""

from __future__ import annotations

import numpy as np
import onnxruntime as ort
from onnx import TensorProto, helper

from clika_runtime.kernels.library import register_kernels
from clika_runtime.kernels.op import DOMAIN, GGML_TYPE_IDS, OP_TYPE, OP_VERSION


def gguf_matmul_model(
    ggml_type: str | int,
    k: int,
    n: int,
    precision: str = "fp32",
    activation: str | None = None,
    fp32_form: str | None = None,
) -> bytes:
    """``Y = GgufMatMul(A [M, k], B)`` with A and B graph inputs of free shape, so tests can feed any
    (``activation``, ``fp32_form``: the attributes, when given; "swiglu" makes Y ``[M, n / 2]``)."""
    type_id = GGML_TYPE_IDS[ggml_type] if isinstance(ggml_type, str) else ggml_type
    extra = {} if activation is None else {"activation": activation}
    if fp32_form is not None:
        extra["fp32_form"] = fp32_form
    node = helper.make_node(
        OP_TYPE, ["A", "B"], ["Y"], domain=DOMAIN, ggml_type=type_id, K=k, N=n, precision=precision, **extra
    )
    graph = helper.make_graph(
        [node],
        "gguf_matmul",
        [
            helper.make_tensor_value_info("A", TensorProto.FLOAT, ["M", "K"]),
            helper.make_tensor_value_info("B", TensorProto.UINT8, ["N", "row_bytes"]),
        ],
        [
            helper.make_tensor_value_info(
                "Y", TensorProto.FLOAT, ["M", n // 2 if activation == "swiglu" else n]
            )
        ],
    )
    opsets = [helper.make_opsetid("", 17), helper.make_opsetid(DOMAIN, OP_VERSION)]
    return helper.make_model(graph, opset_imports=opsets, ir_version=8).SerializeToString()


def gguf_matmul_session(model: bytes, threads: int = 2) -> ort.InferenceSession:
    options = ort.SessionOptions()
    options.intra_op_num_threads = threads
    status = register_kernels(options)
    if not status.available:
        raise RuntimeError(status.describe())
    return ort.InferenceSession(model, options, providers=["CPUExecutionProvider"])


def run_gguf_matmul(session: ort.InferenceSession, a: np.ndarray, b: np.ndarray) -> np.ndarray:
    return session.run(["Y"], {"A": np.ascontiguousarray(a, np.float32), "B": b})[0]

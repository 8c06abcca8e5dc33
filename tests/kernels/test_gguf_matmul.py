"""GgufMatMul on the ISA this machine picks, against gguf-py's dequantization in float64."""

from __future__ import annotations

import gguf
import numpy as np
import onnxruntime as ort
import pytest
from gguf.quants import dequantize, quantize
from onnx import TensorProto, helper, numpy_helper

from clika_runtime.kernels.library import kernel_status, register_kernels
from clika_runtime.kernels.op import DOMAIN, OP_TYPE, op_attributes

STATUS = kernel_status()
pytestmark = pytest.mark.skipif(not STATUS.available, reason=f"kernels not usable: {STATUS.reason}")
K, N, M = 288, 37, 64  # nine 32-blocks, odd N


def session(ggml_type: str, blocks: np.ndarray, precision: str) -> ort.InferenceSession:
    node = helper.make_node(
        OP_TYPE, ["A", "B"], ["Y"], domain=DOMAIN, **op_attributes(ggml_type, K, N, precision)
    )
    graph = helper.make_graph(
        [node],
        "g",
        [helper.make_tensor_value_info("A", TensorProto.FLOAT, ["M", K])],
        [helper.make_tensor_value_info("Y", TensorProto.FLOAT, ["M", N])],
        [numpy_helper.from_array(blocks, "B")],
    )
    model = helper.make_model(
        graph, opset_imports=[helper.make_opsetid("", 17), helper.make_opsetid(DOMAIN, 1)]
    )
    options = ort.SessionOptions()
    register_kernels(options)
    return ort.InferenceSession(model.SerializeToString(), options, providers=["CPUExecutionProvider"])


@pytest.mark.parametrize("ggml_type", ["Q4_0", "Q4_1", "Q5_0", "Q5_1", "Q8_0"])
@pytest.mark.parametrize("precision", ["fp32", "int8"])
def test_matches_float64_and_is_row_independent(ggml_type: str, precision: str) -> None:
    rng = np.random.default_rng(0)
    qtype = gguf.GGMLQuantizationType[ggml_type]
    blocks = quantize(rng.standard_normal((N, K)).astype(np.float32), qtype)
    weights = dequantize(blocks, qtype).reshape(N, K).astype(np.float64)
    a = rng.standard_normal((M, K)).astype(np.float32)
    run = session(ggml_type, blocks, precision)
    y = run.run(None, {"A": a})[0]
    ref = a.astype(np.float64) @ weights.T
    error = np.linalg.norm(y - ref) / np.linalg.norm(ref)
    bound = {"fp32": 1e-6, "int8": 2e-2}[precision]
    assert error <= bound
    for m in (1, 2, 3, 5, 8):
        assert np.array_equal(run.run(None, {"A": a[:m]})[0], y[:m])

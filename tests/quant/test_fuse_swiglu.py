"""A gated MLP's ``silu(gate) * up`` folded into the GgufMatMul of its gate and up rows: one node,
the unfused graph's outputs on the kernels (within silu's bound) and on the fallback (exactly)."""

from __future__ import annotations

import numpy as np
import onnx
import pytest
from gguf_blocks import gguf_values, random_blocks
from onnx import TensorProto, helper, numpy_helper
from quant_helpers import OPSETS, BlocksOnly

from clika_export.checkpoint import RawBlocks
from clika_quant.fuse_swiglu import fuse_swiglu
from clika_quant.quantize import quantize_proto
from clika_runtime.kernels.gguf_matmul import DOMAIN, OP_TYPE
from clika_runtime.kernels.graph_loading import inference_session
from clika_runtime.kernels.library import kernel_status

K, HALF = 256, 40
SILU_ERROR = 3e-7


def gated_model(extra_gate_output: bool = False) -> onnx.ModelProto:
    """``x -> GgufMatMul(W_gate_up) -> Split -> gate * Sigmoid(gate) * up`` as the decoder builds it."""
    blocks = random_blocks("Q4_1", 2 * HALF, K, seed=5)
    weight = gguf_values("Q4_1", blocks, 2 * HALF, K)
    scope = "/model/layers.0/mlp"
    gate, up = f"{scope}/act/Split/output_0", f"{scope}/act/Split/output_1"
    nodes = [
        helper.make_node("MatMul", ["x", "w"], ["products"], name=f"{scope}/gate_up/MatMul"),
        helper.make_node(
            "Split", ["products"], [gate, up], name=f"{scope}/act/Split", axis=-1, num_outputs=2
        ),
        helper.make_node("Sigmoid", [gate], ["sigmoid"], name=f"{scope}/act/Sigmoid"),
        helper.make_node("Mul", [gate, "sigmoid"], ["silu"], name=f"{scope}/act/Silu"),
        helper.make_node("Mul", ["silu", up], ["y"], name=f"{scope}/act/GateUp"),
    ]
    outputs = [helper.make_tensor_value_info("y", TensorProto.FLOAT, ["M", HALF])]
    if extra_gate_output:
        outputs.append(helper.make_tensor_value_info(gate, TensorProto.FLOAT, ["M", HALF]))
    graph = helper.make_graph(
        nodes,
        "gated",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["M", K])],
        outputs,
        [numpy_helper.from_array(weight.T.copy(), "w")],
    )
    model = helper.make_model(graph, opset_imports=OPSETS)
    checkpoint = BlocksOnly({"w": RawBlocks("Q4_1", blocks, (2 * HALF, K))})
    return quantize_proto(model, checkpoint, "int4", options={"accuracy_level": 0})[0]


def fused_copy(model: onnx.ModelProto) -> tuple[onnx.ModelProto, list[str]]:
    copy = onnx.ModelProto()
    copy.CopyFrom(model)
    return copy, fuse_swiglu(copy.graph)


def outputs(model: onnx.ModelProto, x: np.ndarray) -> np.ndarray:
    return inference_session(model.SerializeToString()).run(["y"], {"x": x})[0]


def test_the_chain_folds_into_one_node():
    fused, names = fused_copy(gated_model())
    (node,) = fused.graph.node
    assert names == [node.name] and node.op_type == OP_TYPE and node.domain == DOMAIN
    attrs = {a.name: helper.get_attribute_value(a) for a in node.attribute}
    assert attrs["activation"] == b"swiglu" and attrs["N"] == 2 * HALF and list(node.output) == ["y"]


def test_a_gate_the_graph_also_returns_is_left_alone():
    model = gated_model(extra_gate_output=True)
    fused, names = fused_copy(model)
    assert names == [] and fused == model


def test_the_fused_node_gives_the_unfused_graphs_outputs(monkeypatch):
    status = kernel_status()
    model = gated_model()
    fused, _ = fused_copy(model)
    x = np.random.default_rng(1).standard_normal((7, K)).astype(np.float32)
    monkeypatch.setenv("CLIKA_KERNELS", "off")  # the rewrite writes the four nodes back: the same bits
    assert np.array_equal(outputs(fused, x), outputs(model, x))
    if not status.available:
        pytest.skip(f"the kernel library is not usable here: {status.reason}")
    monkeypatch.setenv("CLIKA_KERNELS", "on")
    got, expected = outputs(fused, x).astype(np.float64), outputs(model, x).astype(np.float64)
    # ORT's Sigmoid and the kernels' exponential round differently, each within a few ulps
    assert np.all(np.abs(got - expected) <= SILU_ERROR * np.abs(expected) + 1e-6 * np.abs(expected).max())

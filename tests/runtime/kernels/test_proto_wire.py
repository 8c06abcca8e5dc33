"""The wire-format codec the runtime edits graphs with: exact round trips, ONNX's own reading."""

from __future__ import annotations

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper

from clika_runtime.kernels import proto_wire as w
from clika_runtime.kernels.onnx_wire import (
    Node,
    decode_node,
    decode_tensor,
    inline_tensor,
    placeholder_tensor,
)


def _model() -> onnx.ModelProto:
    node = helper.make_node(
        "Gemm", ["x", "w"], ["y"], name="/l/Gemm", transB=1, alpha=0.5, beta=-2.0, note="text"
    )
    negative = helper.make_node("Reshape", ["y", "shape"], ["z"], name="/l/Reshape", allowzero=-3)
    graph = helper.make_graph(
        [node, negative],
        "g",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["T", 4])],
        [helper.make_tensor_value_info("z", TensorProto.FLOAT, [-1])],
        [
            numpy_helper.from_array(np.arange(12, dtype=np.float32).reshape(3, 4), "w"),
            numpy_helper.from_array(np.array([-1], np.int64), "shape"),
        ],
    )
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 21)])


def test_every_message_round_trips_byte_for_byte():
    data = _model().SerializeToString()
    fields = w.decode(data)
    assert w.encode(fields) == data
    graph = w.decode(w.first(fields, w.MODEL_GRAPH))
    assert w.message(w.MODEL_GRAPH, graph).value == w.first(fields, w.MODEL_GRAPH)
    for f in graph:
        if f.wire_type == w.LENGTH and f.number in (w.GRAPH_NODE, w.GRAPH_INITIALIZER):
            assert w.encode(w.decode(f.value)) == f.value


def test_nodes_read_as_onnx_wrote_them_and_written_as_onnx_reads_them():
    model = _model()
    first, second = (decode_node(n.SerializeToString()) for n in model.graph.node)
    assert (first.op_type, first.inputs, first.outputs, first.name) == ("Gemm", ["x", "w"], ["y"], "/l/Gemm")
    assert first.attributes == {"transB": 1, "alpha": 0.5, "beta": -2.0, "note": "text"}
    assert second.attributes == {"allowzero": -3}  # a negative int64 is ten bytes on the wire
    written = onnx.NodeProto()
    written.ParseFromString(Node("Gemm", ["x", "w"], ["y"], "/n", "ms", first.attributes).encode())
    attrs = {a.name: helper.get_attribute_value(a) for a in written.attribute}
    assert written.domain == "ms" and attrs == {"transB": 1, "alpha": 0.5, "beta": -2.0, "note": b"text"}


def test_tensors_inline_and_placeholder():
    array = np.array([0, 7, -2], np.int64)
    tensor = onnx.TensorProto()
    tensor.ParseFromString(inline_tensor("s", array))
    assert np.array_equal(numpy_helper.to_array(tensor), array)
    info = decode_tensor(placeholder_tensor("p", np.zeros((5, 3), np.uint8)))
    assert (info.name, info.dims, info.data_type, info.raw_data) == ("p", (5, 3), TensorProto.UINT8, None)
    assert info.location is not None and info.length == 15


@pytest.mark.parametrize("bad", [b"\x0a\x05ab", b"\x08\xff\xff", b"\x0b"])
def test_malformed_bytes_are_refused(bad):
    with pytest.raises(w.WireError):
        w.decode(bad)

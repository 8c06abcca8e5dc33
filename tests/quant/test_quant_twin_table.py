"""A GGUF table stored beside a finer rounding of the same matrix is read from the head's blocks."""

from __future__ import annotations

import numpy as np
import onnx
import pytest
from gguf import GGMLQuantizationType
from gguf.quants import quantize
from onnx import TensorProto, helper, numpy_helper
from quant_helpers import BlocksOnly, same_bits

from clika_export.checkpoint import RawBlocks
from clika_quant.quantize import quantize_proto
from clika_runtime.kernels.graph_loading import inference_session
from clika_runtime.kernels.transcode import transcode

VOCAB, HIDDEN = 512, 256


def gguf_blocks(weights: np.ndarray, ggml_type: str) -> RawBlocks:
    data = quantize(weights, GGMLQuantizationType[ggml_type])
    return RawBlocks(ggml_type, data.reshape(weights.shape[0], -1), weights.shape)


def untied_model(table: np.ndarray, head_kn: np.ndarray) -> onnx.ModelProto:
    """A token table (Gather) and a separate head (MatMul), as the builder writes an untied GGUF."""
    graph = helper.make_graph(
        [
            helper.make_node("Gather", ["embed", "ids"], ["E"], name="/model/embed_tokens/Gather", axis=0),
            helper.make_node("MatMul", ["x", "head"], ["Y"], name="/model/lm_head/MatMul"),
        ],
        "untied",
        [
            helper.make_tensor_value_info("ids", TensorProto.INT64, ["T"]),
            helper.make_tensor_value_info("x", TensorProto.FLOAT, ["T", HIDDEN]),
        ],
        [
            helper.make_tensor_value_info("Y", TensorProto.FLOAT, ["T", VOCAB]),
            helper.make_tensor_value_info("E", TensorProto.FLOAT, ["T", HIDDEN]),
        ],
        [numpy_helper.from_array(table, "embed"), numpy_helper.from_array(head_kn, "head")],
    )
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 21)])


MATRICES = {
    "embed": {
        "roles": ["embed"],
        "nodes": ["/model/embed_tokens/Gather"],
        "layout": "out_in",
        "sources": ["embed"],
    },
    "head": {
        "roles": ["lm_head"],
        "nodes": ["/model/lm_head/MatMul"],
        "layout": "in_out",
        "sources": ["head"],
    },
}


def quantized(table_weights: np.ndarray, head_weights: np.ndarray, options=None):
    blocks = {"embed": gguf_blocks(table_weights, "Q5_0"), "head": gguf_blocks(head_weights, "Q8_0")}
    table = transcode("Q5_0", blocks["embed"].data, blocks["embed"].shape).dequantize()
    head = transcode("Q8_0", blocks["head"].data, blocks["head"].shape).dequantize()
    model = untied_model(table, np.ascontiguousarray(head.T))
    model, record = quantize_proto(model, BlocksOnly(blocks), "int4", dict(MATRICES), options)
    return model, record, table, head


@pytest.mark.parametrize("scan", ["nibbles", "copy"])
def test_twins_share_the_head_bytes_and_rows_are_the_head_rows(scan):
    weights = np.random.default_rng(0).standard_normal((VOCAB, HIDDEN)).astype(np.float32)
    model, record, table, head = quantized(weights, weights, {"head_scan": scan})
    twin = record["table_from_head"]
    assert twin["read_from_head"] and twin["table_type"] == "Q5_0" and twin["head_type"] == "Q8_0"
    assert 0.01 < twin["rel_difference"] < 0.1  # Q5_0's rounding of the same matrix
    names = {t.name for t in model.graph.initializer}
    assert "embed" not in names and not any(n.startswith("embed.") for n in names)
    assert record["embedding"]["matrix"] == "head" and record["embedding"]["tied"]
    ids = np.array([0, 9, 511, 9], np.int64)
    x = np.zeros((4, HIDDEN), np.float32)
    session = inference_session(model.SerializeToString())  # the copy scan is a GgufMatMul
    rows = session.run(None, {"ids": ids, "x": x})[1]
    assert same_bits(rows, head[ids])  # the finer rounding, exactly
    assert np.linalg.norm(rows - table[ids]) / np.linalg.norm(table[ids]) < 0.1


def test_different_matrices_keep_their_own_table():
    rng = np.random.default_rng(1)
    table_weights, head_weights = (rng.standard_normal((VOCAB, HIDDEN)).astype(np.float32) for _ in range(2))
    model, record, table, _ = quantized(table_weights, head_weights)
    assert record["table_from_head"]["read_from_head"] is False
    assert record["table_from_head"]["rel_difference"] > 1.0
    ids = np.array([3, 4], np.int64)
    session = inference_session(model.SerializeToString())  # the head's copy scan is a GgufMatMul
    rows = session.run(None, {"ids": ids, "x": np.zeros((2, HIDDEN), np.float32)})[1]
    assert same_bits(rows, table[ids])


def test_the_option_keeps_the_table():
    weights = np.random.default_rng(2).standard_normal((VOCAB, HIDDEN)).astype(np.float32)
    model, record, table, _ = quantized(weights, weights, {"table_from_head": False})
    assert "table_from_head" not in record and record["embedding"]["matrix"] == "embed"
    session = inference_session(model.SerializeToString())  # the head's copy scan is a GgufMatMul
    ids = np.array([7], np.int64)
    assert same_bits(session.run(None, {"ids": ids, "x": np.zeros((1, HIDDEN), np.float32)})[1], table[ids])

"""An 8-bit head stored as high and low codes: the rows stay bit for bit, the high bits rank."""

from __future__ import annotations

import numpy as np
import onnx
import onnxruntime as ort
import pytest
from gguf_blocks import gguf_values, random_blocks
from onnx import TensorProto, helper, numpy_helper
from quant_helpers import BlocksOnly, same_bits

from clika_export.checkpoint import RawBlocks
from clika_quant.model_file import load_graph
from clika_quant.nibbles import split_nibbles
from clika_quant.quantize import quantize_model, quantize_proto
from clika_quant.rtn import quantize_rtn
from clika_runtime.kernels.graph_loading import inference_session
from clika_runtime.kernels.transcode import transcode

# GGUF type -> (low bits stored, shift): Q8_0 codes span 8 bits, Q6_K 6, Q5_0 5.
SPLITS = {"Q8_0": (4, 4), "Q6_K": (2, 2), "Q5_0": (2, 1)}


@pytest.mark.parametrize("ggml_type", list(SPLITS))
def test_the_split_keeps_every_weight_bit_for_bit(ggml_type):
    rows, cols = 64, 512
    matrix = transcode(ggml_type, random_blocks(ggml_type, rows, cols, seed=2), (rows, cols))
    split = split_nibbles(matrix)
    assert split is not None and (split.low.bits, split.shift) == SPLITS[ggml_type]
    assert split.high.bits == 4 and split.high.codes.max() <= 15
    assert same_bits(split.dequantize(), matrix.dequantize())
    assert split.nbytes() < matrix.nbytes() + 1 and split.scan_bytes() < matrix.nbytes() / 1.5


def test_no_split_where_it_would_not_be_exact_or_is_not_needed():
    rows, cols = 32, 256
    assert split_nibbles(transcode("Q4_0", random_blocks("Q4_0", rows, cols), (rows, cols))) is None
    weights = np.random.default_rng(1).standard_normal((rows, cols)).astype(np.float32)
    # float weights rounded to 8 bits: their scales use all 24 bits, a split product would round
    assert split_nibbles(quantize_rtn(weights, 8, 32, "none")) is None


def tied_model(table: np.ndarray) -> onnx.ModelProto:
    """A token table read by a Gather and, transposed, by the head (a tied model's two uses)."""
    vocab, hidden = table.shape
    graph = helper.make_graph(
        [
            helper.make_node("Gather", ["table", "ids"], ["E"], name="/embed/Gather", axis=0),
            helper.make_node("Gemm", ["x", "table"], ["Y"], name="/lm_head/Gemm", transB=1),
        ],
        "tied",
        [
            helper.make_tensor_value_info("ids", TensorProto.INT64, ["T"]),
            helper.make_tensor_value_info("x", TensorProto.FLOAT, ["T", hidden]),
        ],
        [
            helper.make_tensor_value_info("Y", TensorProto.FLOAT, ["T", vocab]),
            helper.make_tensor_value_info("E", TensorProto.FLOAT, ["T", hidden]),
        ],
        [numpy_helper.from_array(table, "table")],
    )
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 21)])


MATRICES = {
    "table": {"roles": ["embed", "lm_head"], "nodes": ["/embed/Gather", "/lm_head/Gemm"], "layout": "out_in"}
}


@pytest.mark.parametrize("ggml_type", list(SPLITS))
def test_a_tied_table_is_stored_once_and_its_rows_and_best_logits_are_exact(ggml_type):
    vocab, hidden, k = 512, 256, 16
    data = random_blocks(ggml_type, vocab, hidden, seed=6)
    table = gguf_values(ggml_type, data, vocab, hidden)
    checkpoint = BlocksOnly({"table": RawBlocks(ggml_type, data, (vocab, hidden))})
    options = {"head_rescore_top_k": k, "head_scan": "nibbles"}
    model, record = quantize_proto(tied_model(table), checkpoint, "int4", dict(MATRICES), options)
    scan = record["matrices"]["table"]["scan"]
    assert scan["bytes"] == 0 and scan["low_shift"] == SPLITS[ggml_type][1]
    codes = sorted(t.name for t in model.graph.initializer if t.name.endswith(".qweight"))
    assert codes == ["table.high.qweight", "table.low.qweight"]  # no 8-bit copy, no 4-bit copy
    rng = np.random.default_rng(5)
    ids = rng.integers(0, vocab, 9).astype(np.int64)
    x = rng.standard_normal((9, hidden)).astype(np.float32)
    x[:, 5] *= 30  # an outlier channel, as final norms have
    session = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"])
    logits, rows = session.run(None, {"ids": ids, "x": x})
    assert same_bits(rows, table[ids])
    exact = x.astype(np.float64) @ table.T.astype(np.float64)
    scored = np.abs(logits - exact) < 1e-5 * np.abs(exact).max()
    assert (scored.sum(1) >= k).all() and (logits.argmax(1) == exact.argmax(1)).all()
    # the ranking form (the high bits plus the low bits' mean) is as close as a 4-bit copy's
    copy_options = {**options, "head_scan": "copy"}
    copy_model, _ = quantize_proto(tied_model(table), checkpoint, "int4", dict(MATRICES), copy_options)
    copy_session = inference_session(copy_model.SerializeToString())  # a GGUF head's copy: Q4_0 blocks
    copy_logits = copy_session.run(None, {"ids": ids, "x": x})[0]
    error = lambda got: np.sqrt(np.mean((got - exact)[~scored] ** 2))  # noqa: E731
    assert error(logits) < 1.25 * error(copy_logits)


def test_auto_ranks_a_gguf_head_with_the_copy_the_kernels_read():
    """Where the layers are GgufMatMul, a GGUF head ranks with a Q4_0 copy that op reads in place;
    in the MatMulNBits form a Q8_0 head ranks with its own high bits, and a Q6_K head's 16-wide
    blocks, whose high bits would read more than a copy, with a copy."""
    vocab, hidden = 256, 256
    forms = {}
    for gguf_matmul in (True, False):
        for ggml_type in ("Q8_0", "Q6_K"):
            data = random_blocks(ggml_type, vocab, hidden, seed=3)
            checkpoint = BlocksOnly({"table": RawBlocks(ggml_type, data, (vocab, hidden))})
            table = gguf_values(ggml_type, data, vocab, hidden)
            options = {"gguf_matmul": gguf_matmul}
            _, record = quantize_proto(tied_model(table), checkpoint, "int4", dict(MATRICES), options)
            scan = record["matrices"]["table"]["scan"]
            forms[gguf_matmul, ggml_type] = (scan["form"], scan.get("weight_format"))
    assert forms[True, "Q8_0"] == forms[True, "Q6_K"] == ("4-bit copy", "gguf Q4_0")
    assert forms[False, "Q8_0"][0].startswith("the head's high 4 bits")
    assert forms[False, "Q6_K"][0] == "4-bit copy" and forms[False, "Q6_K"][1] is None


def test_the_scales_are_written_once(tmp_path):
    """The gathers read the high part's scales through an alias of the same bytes in the data file."""
    vocab, hidden = 1024, 512
    data = random_blocks("Q8_0", vocab, hidden, seed=8)
    table = gguf_values("Q8_0", data, vocab, hidden)
    onnx.save(
        tied_model(table), tmp_path / "model.onnx", save_as_external_data=True, location="model.onnx.data"
    )
    checkpoint = BlocksOnly({"table": RawBlocks("Q8_0", data, (vocab, hidden))})
    quantize_model(tmp_path / "model.onnx", checkpoint, "int4", dict(MATRICES), {"head_scan": "nibbles"})
    model, load = load_graph(tmp_path / "model.onnx")
    places = {
        t.name: {e.key: e.value for e in t.external_data}
        for t in model.graph.initializer
        if t.data_location == TensorProto.EXTERNAL
    }
    scales, alias = places["table.high.scales"], places["table.gather_scales"]
    assert scales["offset"] == alias["offset"] and scales["length"] == alias["length"]
    np.testing.assert_array_equal(load("table.gather_scales").reshape(vocab, -1), load("table.high.scales"))
    size = (tmp_path / "model.onnx.data").stat().st_size
    # high 4 bits + low 4 bits + fp32 scales per block of 32, pages of alignment
    assert size <= vocab * hidden * (1 + 4 / 32) + 8 * 4096
    session = ort.InferenceSession(str(tmp_path / "model.onnx"), providers=["CPUExecutionProvider"])
    ids = np.arange(0, vocab, 37, dtype=np.int64)
    x = np.zeros((len(ids), hidden), np.float32)
    assert same_bits(session.run(None, {"ids": ids, "x": x})[1], table[ids])

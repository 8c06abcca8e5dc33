"""GGUF blocks carried into MatMulNBits / GatherBlockQuantized form without any rounding."""

from __future__ import annotations

import numpy as np
import onnx
import pytest
from gguf_blocks import gguf_values, random_blocks
from onnx import TensorProto, helper, numpy_helper
from quant_helpers import BlocksOnly, matmul_model, same_bits

from clika_export.checkpoint import RawBlocks
from clika_quant.quantize import quantize_proto
from clika_runtime.kernels.graph_loading import inference_session
from clika_runtime.kernels.transcode import TRANSCODABLE, TranscodeError, transcode


def run(model: onnx.ModelProto, feeds: dict) -> list[np.ndarray]:
    sess = inference_session(model.SerializeToString())
    return sess.run(None, feeds)


# The types of the supported GGUF models (SmolLM2: Q4_1 + Q8_0; Qwen2.5 / gemma Q4_K_M: Q4_K, Q6_K, Q5_0,
# Q8_0) and their siblings.
TYPES = ["Q4_0", "Q4_1", "Q5_0", "Q5_1", "Q8_0", "Q4_K", "Q5_K", "Q6_K"]


def test_every_supported_type_is_listed():
    assert set(TRANSCODABLE) == set(TYPES)


@pytest.mark.parametrize("ggml_type", TYPES)
def test_numpy_form_equals_gguf_dequantize_bit_for_bit(ggml_type):
    rows, cols = 24, 512
    data = random_blocks(ggml_type, rows, cols, seed=1)
    matrix = transcode(ggml_type, data, (rows, cols))
    assert same_bits(matrix.dequantize(), gguf_values(ggml_type, data, rows, cols))


@pytest.mark.parametrize("ggml_type", TYPES)
def test_matmulnbits_weights_equal_gguf_bit_for_bit(ggml_type):
    """A = I_K makes the op return B^T itself: at accuracy_level 0 every weight must be exact."""
    rows, cols = 40, 256
    data = random_blocks(ggml_type, rows, cols, seed=2)
    ref = gguf_values(ggml_type, data, rows, cols)
    checkpoint = BlocksOnly({"w": RawBlocks(ggml_type, data, (rows, cols))})
    model, record = quantize_proto(
        matmul_model(ref.T.copy()), checkpoint, "int4", options={"accuracy_level": 0}
    )
    assert all(n.op_type != "MatMul" or n.input[1] != "w" for n in model.graph.node)
    assert record["matrices"]["w"]["groups"][0]["method"] == f"gguf {ggml_type} exact"
    got = run(model, {"A": np.eye(cols, dtype=np.float32)})[0]
    assert same_bits(got.T, ref)


@pytest.mark.parametrize("ggml_type", TYPES)
def test_accuracy_level_4_stays_close(ggml_type):
    """int8 activations: the product stays within 1% of the exact one on random inputs."""
    rows, cols = 64, 256
    data = random_blocks(ggml_type, rows, cols, seed=3)
    ref = gguf_values(ggml_type, data, rows, cols)
    checkpoint = BlocksOnly({"w": RawBlocks(ggml_type, data, (rows, cols))})
    model, _ = quantize_proto(matmul_model(ref.T.copy()), checkpoint, "int4", options={"accuracy_level": 4})
    a = np.random.default_rng(0).standard_normal((8, cols)).astype(np.float32)
    got, exact = run(model, {"A": a})[0], a.astype(np.float64) @ ref.T
    assert np.linalg.norm(got - exact) / np.linalg.norm(exact) < 0.01


@pytest.mark.parametrize("ggml_type", ["Q8_0", "Q4_1", "Q4_K", "Q6_K", "Q5_0"])
def test_tied_table_gathers_and_projects_exactly(ggml_type):
    """One stored table read by GatherBlockQuantized (rows) and MatMulNBits (the tied head)."""
    vocab, hidden = 64, 256
    data = random_blocks(ggml_type, vocab, hidden, seed=4)
    table = gguf_values(ggml_type, data, vocab, hidden)
    graph = helper.make_graph(
        [
            helper.make_node("Gather", ["table", "ids"], ["E"], name="/embed/Gather", axis=0),
            helper.make_node("Gemm", ["E", "table"], ["Y"], name="/lm_head/Gemm", transB=1),
        ],
        "tied",
        [helper.make_tensor_value_info("ids", TensorProto.INT64, ["T"])],
        [
            helper.make_tensor_value_info("Y", TensorProto.FLOAT, ["T", vocab]),
            helper.make_tensor_value_info("E", TensorProto.FLOAT, ["T", hidden]),
        ],
        [numpy_helper.from_array(table, "table")],
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 21)])
    checkpoint = BlocksOnly({"table": RawBlocks(ggml_type, data, (vocab, hidden))})
    model, record = quantize_proto(model, checkpoint, "int4", options={"accuracy_level": 0})
    ops = [n.op_type for n in model.graph.node]
    assert "GatherBlockQuantized" in ops and "MatMulNBits" in ops and "Gather" not in ops[:1]
    qweights = [t for t in model.graph.initializer if t.name.endswith(".qweight")]
    assert len(qweights) == 1, "the tied table must be stored once"
    assert record["embedding"]["tied"] and record["lm_head"]["tied"]
    ids = np.array([0, 7, 63, 7], np.int64)
    sess = inference_session(model.SerializeToString())
    logits, rows = sess.run(None, {"ids": ids})
    assert same_bits(rows, table[ids])
    np.testing.assert_allclose(
        logits, table[ids].astype(np.float64) @ table.T, rtol=0, atol=1e-5 * np.abs(logits).max()
    )


@pytest.mark.parametrize("gguf_matmul, op_type", [(True, "GgufMatMul"), (False, "MatMulNBits")])
def test_fused_matrix_of_two_widths_is_split_and_concatenated(gguf_matmul, op_type):
    """A Q4_K query next to a Q6_K value (as in Q4_K_M files): one op a type, one Concat, exact."""
    cols = 256
    parts = {"q": ("Q4_K", 32), "k": ("Q4_K", 16), "v": ("Q6_K", 16)}
    blocks = {
        name: RawBlocks(t, random_blocks(t, r, cols, seed=i), (r, cols))
        for i, (name, (t, r)) in enumerate(parts.items())
    }
    ref = np.concatenate([gguf_values(b.ggml_type, b.data, *b.shape) for b in blocks.values()])
    model = matmul_model(ref.T.copy())
    matrices = {
        "w": {"roles": ["qkv"], "nodes": ["/layer/proj/MatMul"], "layout": "in_out", "sources": list(parts)}
    }
    options = {"accuracy_level": 0, "gguf_matmul": gguf_matmul}
    model, record = quantize_proto(model, BlocksOnly(blocks), "int4", matrices, options)
    groups = record["matrices"]["w"]["groups"]
    assert [(g["bits"], g["block_size"], g["rows"]) for g in groups] == [(4, 32, 48), (8, 16, 16)]
    assert [n.op_type for n in model.graph.node].count(op_type) == 2
    assert [n.op_type for n in model.graph.node].count("Concat") == 1
    assert same_bits(run(model, {"A": np.eye(cols, dtype=np.float32)})[0].T, ref)


def test_bad_blocks_are_refused_by_name():
    with pytest.raises(TranscodeError, match="IQ4_XS"):
        transcode("IQ4_XS", np.zeros((2, 136), np.uint8), (2, 256))
    with pytest.raises(TranscodeError, match="does not hold"):
        transcode("Q4_0", np.zeros((2, 17), np.uint8), (2, 32))


def test_graph_stays_valid_onnx():
    data = random_blocks("Q4_1", 8, 64)
    ref = gguf_values("Q4_1", data, 8, 64)
    model, _ = quantize_proto(
        matmul_model(ref.T.copy()), BlocksOnly({"w": RawBlocks("Q4_1", data, (8, 64))}), "int4"
    )
    onnx.checker.check_model(model)


@pytest.mark.slow
@pytest.mark.parametrize("model", ["smollm2_gguf", "qwen05_gguf"])
def test_real_gguf_tensors_transcode_exactly(model, request):
    """Every block-quantized tensor of the real files, through the reader's raw blocks (HF row order)."""
    from clika_export.api import read_source

    checkpoint = read_source(request.getfixturevalue(model))
    seen = set()
    for name in checkpoint.raw_loaders:
        blocks = checkpoint.raw(name)
        seen.add(blocks.ggml_type)
        got = transcode(blocks.ggml_type, blocks.data, tuple(blocks.shape)).dequantize()
        assert same_bits(got, checkpoint.tensor(name)), name
    assert seen <= set(TYPES) and seen


def test_accuracy_levels_follow_the_weight_width():
    """4-bit groups may compute in fp32 (level 0) while 8-bit ones keep int8 activations (level 0 is 10-30x slower)."""
    cols = 256
    parts = {"q": ("Q4_K", 32), "v": ("Q6_K", 16)}
    blocks = {n: RawBlocks(t, random_blocks(t, r, cols), (r, cols)) for n, (t, r) in parts.items()}
    ref = np.concatenate([gguf_values(b.ggml_type, b.data, *b.shape) for b in blocks.values()])
    matrices = {
        "w": {"roles": ["qkv"], "nodes": ["/layer/proj/MatMul"], "layout": "in_out", "sources": list(parts)}
    }
    _, record = quantize_proto(matmul_model(ref.T.copy()), BlocksOnly(blocks), "int4", dict(matrices))
    assert [g["accuracy_level"] for g in record["matrices"]["w"]["groups"]] == [4, 4]  # the default
    options = {"accuracy_level_4bit": 0}
    model, record = quantize_proto(matmul_model(ref.T.copy()), BlocksOnly(blocks), "int4", matrices, options)
    groups = record["matrices"]["w"]["groups"]
    assert [g["accuracy_level"] for g in groups] == [0, 4]
    assert [g["kernel_precision"] for g in groups] == ["fp32", "int8"]
    precisions = [
        a.s.decode()
        for n in model.graph.node
        if n.op_type == "GgufMatMul"
        for a in n.attribute
        if a.name == "precision"
    ]
    assert precisions == ["fp32", "int8"]

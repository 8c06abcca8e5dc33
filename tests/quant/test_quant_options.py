"""Zero-point centring and accuracy levels by place: same weights, chosen compute."""

from __future__ import annotations

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper
from quant_helpers import OPSETS, BlocksOnly, matmul_model, run_matmul_nbits, same_bits

from clika_export.checkpoint import RawBlocks
from clika_quant.options import QuantError, QuantOptions
from clika_quant.quantize import quantize_proto
from clika_runtime.kernels.centring import center_zero_points
from clika_runtime.kernels.gguf_layout import BLOCK_LAYOUT
from clika_runtime.kernels.graph_loading import inference_session
from clika_runtime.kernels.transcode import transcode

OFFSET_TYPES = ["Q4_1", "Q4_K", "Q5_1", "Q5_K"]


def random_blocks(ggml_type: str, rows: int, cols: int, seed: int = 0) -> np.ndarray:
    """Random GGUF bytes with small finite fp16 scale and min fields (d, then dmin/m)."""
    rng = np.random.default_rng(seed)
    block_weights, block_bytes = BLOCK_LAYOUT[ggml_type]
    n_blocks = rows * cols // block_weights
    blocks = rng.integers(0, 256, (n_blocks, block_bytes), dtype=np.uint8)
    for start in (0, 2):
        values = (rng.standard_normal(n_blocks) * 0.02).astype(np.float16)
        blocks[:, start : start + 2] = values.view(np.uint8).reshape(n_blocks, 2)
    return blocks.reshape(rows, -1)


@pytest.mark.parametrize("ggml_type", OFFSET_TYPES)
def test_centring_keeps_the_weights_bit_for_bit(ggml_type):
    rows, cols = 48, 256
    matrix = transcode(ggml_type, random_blocks(ggml_type, rows, cols, seed=5), (rows, cols))
    centred = center_zero_points(matrix)
    assert same_bits(centred.dequantize(), matrix.dequantize())
    codes = matrix.codes.reshape(rows, -1, matrix.block_size).astype(np.float64)
    moved = centred.zero_points.astype(np.float64)
    # a block moves to its rounded mean code unless the new offset would not be exact in float32
    # (random fp16 scales and mins of far-apart exponents; real files almost never)
    at_mean = moved == np.rint(codes.mean(-1))
    assert at_mean.mean() > 0.9
    assert (at_mean | (centred.zero_points == matrix.integer_zero_points())).all()


@pytest.mark.parametrize("ggml_type", ["Q4_1", "Q4_K"])
def test_centring_lowers_the_int8_compute_error(ggml_type):
    """Level 4 quantizes the activations; centred codes multiply that error by smaller weights."""
    rows, cols = 64, 512
    matrix = transcode(ggml_type, random_blocks(ggml_type, rows, cols, seed=2), (rows, cols))
    a = np.random.default_rng(1).standard_normal((16, cols)).astype(np.float32)
    exact = a.astype(np.float64) @ matrix.dequantize().T.astype(np.float64)

    def error(m):
        # MatMulNBits computes (q - zp) * s; the offsets' share is exact float math beside it
        blocks = a.reshape(16, m.n_blocks, m.block_size).sum(-1)
        got = run_matmul_nbits(m, a, accuracy_level=4) + blocks @ m.offsets.T
        return np.linalg.norm(got - exact) / np.linalg.norm(exact)

    assert error(center_zero_points(matrix)) < 0.7 * error(matrix)


def test_centring_leaves_symmetric_blocks_and_counts_only_real_columns():
    symmetric = transcode("Q4_0", random_blocks("Q4_0", 8, 64), (8, 64))
    assert center_zero_points(symmetric) is symmetric
    # K = 40 with blocks of 32: the second block has 8 real codes and 24 padding zeros
    codes = np.zeros((2, 64), np.uint8)
    codes[:, :40] = 12
    matrix = transcode("Q4_1", random_blocks("Q4_1", 2, 64), (2, 64))
    short = type(matrix)(codes, matrix.scales, matrix.zero_points, 4, 32, 40, matrix.offsets)
    assert center_zero_points(short).zero_points.tolist() == [[12, 12], [12, 12]]


def test_centring_is_an_option_recorded_in_the_groups():
    rows, cols = 32, 256
    data = random_blocks("Q4_1", rows, cols)
    checkpoint = BlocksOnly({"w": RawBlocks("Q4_1", data, (rows, cols))})
    ref = transcode("Q4_1", data, (rows, cols)).dequantize()
    for center, kind in ((True, "uint8"), (False, "uint8")):
        options = {"center_zero_points": center, "gguf_matmul": False}  # the MatMulNBits form itself
        model, record = quantize_proto(matmul_model(ref.T.copy()), checkpoint, "int4", options=options)
        assert record["options"]["center_zero_points"] is center
        assert record["matrices"]["w"]["groups"][0]["zero_points"] == kind
        zps = [t for t in model.graph.initializer if t.name.endswith("zero_points")]
        assert bool((np.frombuffer(zps[0].raw_data, np.uint8) != 0).any()) is center


def test_accuracy_by_place_most_specific_key_wins():
    options = QuantOptions(accuracy_level_4bit_by_role={"mlp.down": 0, "@-1": 0, "attn.o@-1": 4})
    level = options.accuracy_for
    assert level(4, False, "mlp.down", 3, 30) == 0  # role
    assert level(4, False, "attn.qkv", 3, 30) == 4  # the 4-bit default
    assert level(4, False, "attn.qkv", 29, 30) == 0  # the last layer
    assert level(4, False, "attn.o", 29, 30) == 4  # role and layer beat layer
    assert level(8, False, "mlp.down", 3, 30) == 4  # 8-bit weights keep int8 compute
    assert level(4, True, "lm_head", None, 30) == 4
    assert QuantOptions.from_dict(options.to_dict()) == options


@pytest.mark.parametrize("key", ["", "mlp.down@", "@last", "mlp@1.5"])
def test_bad_places_are_named(key):
    with pytest.raises(QuantError, match="accuracy_level_4bit_by_role"):
        QuantOptions(accuracy_level_4bit_by_role={key: 0})
    with pytest.raises(QuantError, match="must be 0..4"):
        QuantOptions(accuracy_level_4bit_by_role={"mlp.down": 7})


def test_levels_by_place_reach_the_graph():
    """Two layers of one role: a key on the last layer sets its node's level, and the record says so."""
    rows, cols = 32, 256
    weights = {f"w{i}": random_blocks("Q4_1", rows, cols, seed=i) for i in (0, 1)}
    checkpoint = BlocksOnly({n: RawBlocks("Q4_1", d, (rows, cols)) for n, d in weights.items()})
    graph = helper.make_graph(
        [helper.make_node("MatMul", ["A", n], [f"Y{n}"], name=f"/l{n[1]}/down/MatMul") for n in weights],
        "t",
        [helper.make_tensor_value_info("A", TensorProto.FLOAT, ["M", cols])],
        [helper.make_tensor_value_info(f"Y{n}", TensorProto.FLOAT, ["M", rows]) for n in weights],
        [
            numpy_helper.from_array(transcode("Q4_1", d, (rows, cols)).dequantize().T.copy(), n)
            for n, d in weights.items()
        ],
    )
    model = helper.make_model(graph, opset_imports=OPSETS)
    matrices = {
        n: {"roles": ["mlp.down"], "nodes": [f"/l{n[1]}/down/MatMul"], "layout": "in_out", "layer": int(n[1])}
        for n in weights
    }
    options = {"accuracy_level_4bit_by_role": {"mlp.down@-1": 0}, "gguf_matmul": False}
    model, record = quantize_proto(model, checkpoint, "int4", matrices, options)
    assert [record["matrices"][n]["groups"][0]["accuracy_level"] for n in weights] == [4, 0]
    levels = {
        n.name: next(a.i for a in n.attribute if a.name == "accuracy_level")
        for n in model.graph.node
        if n.op_type == "MatMulNBits"
    }
    assert levels == {"/l0/down/MatMulNBits": 4, "/l1/down/MatMulNBits": 0}


def head_model(table_nk: np.ndarray) -> onnx.ModelProto:
    """``logits = x @ table^T`` as the graph builder writes a tied head (Gemm, transB=1)."""
    n, k = table_nk.shape
    graph = helper.make_graph(
        [helper.make_node("Gemm", ["x", "table"], ["logits"], name="/model/lm_head/Gemm", transB=1)],
        "t",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["T", k])],
        [helper.make_tensor_value_info("logits", TensorProto.FLOAT, ["T", n])],
        [numpy_helper.from_array(table_nk.astype(np.float32), "table")],
    )
    return helper.make_model(graph, opset_imports=OPSETS)


@pytest.mark.parametrize("ggml_type", ["Q8_0", "Q4_1"])
def test_head_rescores_its_best_logits_exactly(ggml_type):
    """The k best logits of every row come out as fp32 math on the same weights; the rest as the int8 kernel's."""
    rows, cols, k = 512, 256, 8
    data = random_blocks(ggml_type, rows, cols, seed=7)
    table = transcode(ggml_type, data, (rows, cols)).dequantize()
    checkpoint = BlocksOnly({"table": RawBlocks(ggml_type, data, (rows, cols))})
    matrices = {"table": {"roles": ["lm_head"], "nodes": ["/model/lm_head/Gemm"], "layout": "out_in"}}
    x = np.random.default_rng(3).standard_normal((5, cols)).astype(np.float32)
    x[:, 3] *= 40  # an outlier channel, as final norms have: coarse int8 steps for its block
    exact = x.astype(np.float64) @ table.T.astype(np.float64)
    outputs = {}
    for top_k in (0, k):
        model, record = quantize_proto(
            head_model(table),
            checkpoint,
            "int4",
            dict(matrices),
            {"head_rescore_top_k": top_k, "head_scan_bits": None},
        )
        assert record["lm_head"].get("rescore_top_k", 0) == top_k
        assert record["summary"]["accuracy_levels"] == {f"{8 if ggml_type == 'Q8_0' else 4}-bit level 4": 1}
        session = inference_session(model.SerializeToString())
        outputs[top_k] = session.run(None, {"x": x})[0]
    plain, rescored = outputs[0], outputs[k]
    best = np.argsort(-plain, axis=1)[:, :k]
    picked = np.take_along_axis
    scale = np.abs(exact).max()
    assert np.abs(picked(rescored, best, 1) - picked(exact, best, 1)).max() < 1e-5 * scale
    assert np.abs(picked(plain, best, 1) - picked(exact, best, 1)).max() > 1e-3 * scale
    others = np.ones_like(plain, bool)
    np.put_along_axis(others, best, False, 1)
    assert np.array_equal(rescored[others], plain[others])


def test_rescoring_is_skipped_at_level_0_and_refused_out_of_range():
    rows, cols = 64, 64
    data = random_blocks("Q8_0", rows, cols)
    checkpoint = BlocksOnly({"table": RawBlocks("Q8_0", data, (rows, cols))})
    matrices = {"table": {"roles": ["lm_head"], "nodes": ["/model/lm_head/Gemm"], "layout": "out_in"}}
    table = transcode("Q8_0", data, (rows, cols)).dequantize()
    model, _ = quantize_proto(head_model(table), checkpoint, "int4", matrices, {"head_accuracy_level": 0})
    assert [n.op_type for n in model.graph.node] == ["MatMulNBits"]
    with pytest.raises(QuantError, match="head_rescore_top_k"):
        QuantOptions(head_rescore_top_k=-1)


@pytest.mark.parametrize(
    ("ggml_type", "scan", "gather_bits"),
    [("Q8_0", "copy", [8]), ("Q8_0", "nibbles", [4, 4])],
)
def test_a_4bit_scan_ranks_and_the_8bit_bytes_score(ggml_type, scan, gather_bits):
    """head_scan_bits=4: a 4-bit form finds the candidates (a copy, or the head's own high bits);
    the k best per row are the exact 8-bit math."""
    rows, cols, k = 512, 256, 8
    data = random_blocks(ggml_type, rows, cols, seed=11)
    table = transcode(ggml_type, data, (rows, cols)).dequantize()
    checkpoint = BlocksOnly({"table": RawBlocks(ggml_type, data, (rows, cols))})
    matrices = {"table": {"roles": ["lm_head"], "nodes": ["/model/lm_head/Gemm"], "layout": "out_in"}}
    options = {"head_rescore_top_k": k, "head_scan_bits": 4, "head_scan": scan}
    model, record = quantize_proto(head_model(table), checkpoint, "int4", matrices, options)
    assert record["matrices"]["table"]["scan"]["bits"] == 4
    assert (record["matrices"]["table"]["scan"]["bytes"] == 0) == (scan == "nibbles")
    nbits = [n for n in model.graph.node if n.op_type == "MatMulNBits"]
    ranking = [n for n in model.graph.node if n.op_type == "GgufMatMul"]
    if scan == "nibbles":  # the head's own high 4 bits
        assert [next(a.i for a in n.attribute if a.name == "bits") for n in nbits] == [4] and not ranking
    else:  # a GGUF head's 4-bit copy: Q4_0 blocks (ggml_type 2) the kernels read
        assert not nbits and [next(a.i for a in n.attribute if a.name == "ggml_type") for n in ranking] == [2]
        assert record["matrices"]["table"]["scan"]["weight_format"] == "gguf Q4_0"
    gathers = [n for n in model.graph.node if n.op_type == "GatherBlockQuantized"]
    assert [next(a.i for a in n.attribute if a.name == "bits") for n in gathers] == gather_bits
    x = np.random.default_rng(4).standard_normal((6, cols)).astype(np.float32)
    session = inference_session(model.SerializeToString())
    got = session.run(None, {"x": x})[0]
    exact = x.astype(np.float64) @ table.T.astype(np.float64)
    scored = np.abs(got - exact) < 1e-5 * np.abs(exact).max()
    assert (scored.sum(1) >= k).all()  # the k candidates of every row hold exact values
    assert scored[np.arange(6), exact.argmax(1)].all() and (got.argmax(1) == exact.argmax(1)).all()
    with pytest.raises(QuantError, match="head_scan_bits"):
        QuantOptions(head_scan_bits=8)


def test_the_default_is_the_measured_int4_scheme():
    """int8 activations (level 0 is never free) except where the export measures that they add the
    most error, a GGUF's layer blocks kept for GgufMatMul, centred zero points, a head ranked by its
    own high 4 bits whose 256 best logits are re-scored exactly, a GGUF table that is a coarser
    twin of the head read from the head."""
    options = QuantOptions()
    assert options.center_zero_points and options.head_rescore_top_k == 256 and options.head_scan_bits == 4
    assert options.head_scan == "auto" and options.table_from_head
    assert options.accuracy_level is None and QuantOptions.for_precision("int4") == options
    for role, layer in (("mlp.down", 0), ("mlp.down", 29), ("attn.qkv", 29)):
        assert options.accuracy_for(4, False, role, layer, 30) == 4
    assert options.accuracy_for(8, True, "lm_head", None, 30) == 4
    assert options.describe("int4") == (
        "int4: GGUF blocks kept exactly where the source has them; 4-bit layers at accuracy level 4; "
        "those and the kernels' wider GGUF blocks at level 0 (fp32 compute) in models of at most 300M "
        "weights by whole layers and roles "
        "where int8 activations add the most measured error per byte "
        "(until the KL left is at most 0.0004); "
        "Q4_0 / Q4_1 kept at level 0 with 16-bit integer activations where the CPU has AVX-512 VNNI; "
        "GGUF layer matrices stored as the file's blocks, computed by ai.clika.GgufMatMul "
        "(MatMulNBits at load without the kernel library); "
        "zero points centred on each block's mean code; "
        "a token table that rounds the head's matrix coarser is read from the head's blocks; "
        "head's 256 best logits re-scored in fp32 (ranked by its own high 4 bits, or a 4-bit copy "
        "where its blocks are narrower)"
    )
    assert options.sensitivity_budget == 1.0 and options.sensitivity_target_kl == 0.0004
    assert options.gguf_matmul  # GgufMatMul by default; --matmulnbits asks for the transcoded form
    assert "ai.clika.GgufMatMul" not in QuantOptions(gguf_matmul=False).describe("int4")
    assert "within 20% of their bytes" in QuantOptions(sensitivity_budget=0.2).describe("int4")


def test_int8_differs_from_int4_only_in_where_4bit_blocks_are_computed():
    """--precision int8: a GGUF's 4-bit blocks in fp32 (exact), 8-bit weights still at level 4;
    fields given by the caller win over the precision's defaults."""
    int4, int8 = QuantOptions.for_precision("int4"), QuantOptions.for_precision("int8")
    assert {k: v for k, v in int8.to_dict().items() if int4.to_dict()[k] != v} == {
        "accuracy_level_4bit": 0,
        "sensitivity_budget": None,  # nothing at level 4 to measure
        "fp32_form": "fma",  # the float model's products exactly
    }
    assert (
        int8.accuracy_for(4, False, "mlp.down", 3, 30) == 0
        and int8.accuracy_for(8, False, "mlp.down", 3, 30) == 4
    )
    assert int8.accuracy_for(8, True, "lm_head", None, 30) == 4
    assert (
        QuantOptions.for_precision(
            "int8", {"accuracy_level_4bit": 4, "sensitivity_budget": 1.0, "fp32_form": "split16"}
        )
        == int4
    )
    assert QuantOptions.for_precision("int8", int4) is int4
    assert int8.describe("int8").startswith(
        "int8: GGUF blocks kept exactly where the source has them; 4-bit layers at accuracy level 0, 8-bit at 4;"
    )
    rows, cols = 64, 256
    blocks = {
        "q4": random_blocks("Q4_1", rows, cols, seed=9),
        "q8": random_blocks("Q8_0", rows, cols, seed=10),
    }
    a = np.random.default_rng(6).standard_normal((8, cols)).astype(np.float32)
    for kind, ggml_type in (("q4", "Q4_1"), ("q8", "Q8_0")):
        weight = transcode(ggml_type, blocks[kind], (rows, cols)).dequantize()
        checkpoint = BlocksOnly({"w": RawBlocks(ggml_type, blocks[kind], (rows, cols))})
        exact = a.astype(np.float64) @ weight.T.astype(np.float64)
        model, record = quantize_proto(matmul_model(weight.T.copy()), checkpoint, "int8")
        assert record["matrices"]["w"]["groups"][0]["accuracy_level"] == (0 if kind == "q4" else 4)
        session = inference_session(model.SerializeToString())
        error = np.linalg.norm(session.run(None, {"A": a})[0] - exact) / np.linalg.norm(exact)
        assert error < 1e-5 if kind == "q4" else 1e-5 < error < 0.02, (kind, error)


def test_the_record_says_plainly_what_is_stored_and_how_it_is_computed():
    from clika_quant.quantize import summarize

    group = {"bits": 4, "block_size": 32, "method": "gguf Q4_1 exact", "bytes": 2**20}
    matrices = {
        "a": {"roles": ["mlp.down"], "ops": ["MatMulNBits"], "groups": [{**group, "accuracy_level": 0}]},
        "b": {"roles": ["mlp.down"], "ops": ["MatMulNBits"], "groups": [{**group, "accuracy_level": 4}]},
    }
    plainly = summarize({"matrices": matrices})["summary"]["plainly"]
    assert plainly == "stored: 4-bit 2.0 MiB; matrix products: 1 in fp32, 1 with int8 activations"

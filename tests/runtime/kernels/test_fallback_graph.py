"""GgufMatMul rewritten at load into the exporter's MatMulNBits form: the same graph, the same bytes."""

from __future__ import annotations

import numpy as np
import onnx
import pytest
from gguf_blocks import FP16_FIELDS, gguf_values, random_blocks
from onnx import TensorProto, helper, numpy_helper
from quant_helpers import OPSETS, BlocksOnly, matmul_model

from clika_export.checkpoint import RawBlocks
from clika_quant.model_file import ExternalWeights, save_graph
from clika_quant.options import QuantError
from clika_quant.quantize import quantize_proto
from clika_runtime.contract.model_folder import open_session, session_options
from clika_runtime.kernels.fallback_graph import FallbackError, rewrite
from clika_runtime.kernels.gguf_matmul import DOMAIN, OP_TYPE
from clika_runtime.kernels.graph_loading import inference_session

TYPES = ["Q4_0", "Q4_1", "Q5_0", "Q5_1", "Q8_0", "Q4_K", "Q5_K", "Q6_K"]
ROWS, COLS = 48, 512


def _two_layers(ggml_type: str, seed: int = 1):
    """Two matrices reading one x (their block sums are shared) and a GGUF checkpoint of them."""
    data = {n: random_blocks(ggml_type, ROWS, COLS, seed=seed + i) for i, n in enumerate(("w0", "w1"))}
    graph = helper.make_graph(
        [helper.make_node("MatMul", ["A", n], [f"Y{n}"], name=f"/l{n[1]}/proj/MatMul") for n in data],
        "t",
        [helper.make_tensor_value_info("A", TensorProto.FLOAT, ["M", COLS])],
        [helper.make_tensor_value_info(f"Y{n}", TensorProto.FLOAT, ["M", ROWS]) for n in data],
        [numpy_helper.from_array(gguf_values(ggml_type, d, ROWS, COLS).T.copy(), n) for n, d in data.items()],
    )
    checkpoint = BlocksOnly({n: RawBlocks(ggml_type, d, (ROWS, COLS)) for n, d in data.items()})
    return helper.make_model(graph, opset_imports=OPSETS), checkpoint


def _both_forms(ggml_type: str, options=None):
    model, checkpoint = _two_layers(ggml_type)
    forms = {}
    for on in (True, False):
        copy = onnx.ModelProto()
        copy.CopyFrom(model)
        forms[on] = quantize_proto(copy, checkpoint, "int4", options={**(options or {}), "gguf_matmul": on})
    return forms


@pytest.mark.parametrize("ggml_type", TYPES)
def test_the_rewrite_is_the_exporters_matmulnbits_form(ggml_type):
    forms = _both_forms(ggml_type, {"accuracy_level_4bit_by_role": {"@0": 0}})
    (gguf, record), (nbits, _) = forms[True], forms[False]
    assert [n.op_type for n in gguf.graph.node] == [OP_TYPE, OP_TYPE]
    assert record["matrices"]["w0"]["groups"][0]["weight_format"] == f"gguf {ggml_type}"
    rewritten = rewrite(gguf.SerializeToString(), folder=None)
    got = onnx.ModelProto()
    got.ParseFromString(rewritten.model)
    assert rewritten.nodes == 2

    def described(node):
        attrs = {a.name: helper.get_attribute_value(a) for a in node.attribute}
        return node.op_type, node.domain, list(node.input), list(node.output), node.name, attrs

    assert [described(n) for n in got.graph.node] == [described(n) for n in nbits.graph.node]
    expected = {t.name: numpy_helper.to_array(t) for t in nbits.graph.initializer}
    values = {t.name: numpy_helper.to_array(t) for t in got.graph.initializer if t.data_location == 0}
    values |= rewritten.supplied
    assert values.keys() == expected.keys()  # the GGUF bytes no node reads are gone
    for name, array in expected.items():
        assert values[name].dtype == array.dtype and np.array_equal(values[name].reshape(array.shape), array)


@pytest.mark.parametrize("ggml_type", ["Q4_1", "Q4_K", "Q6_K"])
def test_ort_runs_the_rewrite_and_gets_the_matmulnbits_outputs(ggml_type, monkeypatch):
    monkeypatch.setenv("CLIKA_KERNELS", "off")
    forms = _both_forms(ggml_type)
    a = np.random.default_rng(0).standard_normal((5, COLS)).astype(np.float32)
    fallback = inference_session(forms[True][0].SerializeToString())
    nbits = inference_session(forms[False][0].SerializeToString())
    assert not fallback.kernel_path.kernels and "CLIKA_KERNELS=off" in fallback.kernel_path.detail
    assert nbits.kernel_path is None
    for got, want in zip(fallback.run(None, {"A": a}), nbits.run(None, {"A": a}), strict=True):
        assert np.array_equal(got, want)


def test_a_folder_graph_reads_its_gguf_bytes_from_the_data_file(tmp_path, monkeypatch):
    """Page-aligned in the data file, read back by the rewrite from there (no onnx at load)."""
    monkeypatch.setenv("CLIKA_KERNELS", "off")
    data = random_blocks("Q4_K", ROWS, COLS, seed=5)
    ref = gguf_values("Q4_K", data, ROWS, COLS)
    arrays: dict = {}
    model, _ = quantize_proto(
        matmul_model(ref.T.copy()),
        BlocksOnly({"w": RawBlocks("Q4_K", data, (ROWS, COLS))}),
        "int4",
        options={"accuracy_level": 0, "gguf_matmul": True},
        arrays=arrays,
    )
    save_graph(model, tmp_path / "model.onnx", "model.onnx.data", ExternalWeights(model, tmp_path), arrays)
    saved = onnx.load(str(tmp_path / "model.onnx"), load_external_data=False)
    (b,) = [t for t in saved.graph.initializer if t.name == "w.gguf"]
    offset = int({e.key: e.value for e in b.external_data}["offset"])
    assert offset % 4096 == 0 and tuple(b.dims) == data.shape
    stored = np.fromfile(tmp_path / "model.onnx.data", np.uint8, data.size, offset=offset)
    assert np.array_equal(stored.reshape(data.shape), data)  # the file's blocks, unchanged
    session = open_session(tmp_path / "model.onnx", session_options(1), ())
    a = np.random.default_rng(1).standard_normal((3, COLS)).astype(np.float32)
    got = session.run(None, {"A": a})[0]
    exact = a.astype(np.float64) @ ref.T.astype(np.float64)
    assert np.abs(got - exact).max() <= 1e-5 * np.abs(exact).max()


def _with_scale(ggml_type: str, value: np.float16, row: int) -> np.ndarray:
    data = random_blocks(ggml_type, ROWS, COLS, seed=7)
    start = FP16_FIELDS[ggml_type][0]  # the first block of the row's scale
    data[row, start : start + 2] = np.array([value], np.float16).view(np.uint8)
    return data


@pytest.mark.parametrize("value", [np.float16(np.nan), np.float16(np.inf)])
def test_nan_and_inf_scales_are_refused_naming_the_tensor(value):
    data = _with_scale("Q4_K", value, row=3)
    checkpoint = BlocksOnly({"w": RawBlocks("Q4_K", data, (ROWS, COLS))})
    with pytest.raises(QuantError, match=r"GGUF tensor w has a NaN or infinite scale in row 3"):
        quantize_proto(
            matmul_model(np.zeros((COLS, ROWS), np.float32)),
            checkpoint,
            "int4",
            options={"gguf_matmul": True},
        )


def test_subnormal_scales_are_kept(monkeypatch):
    monkeypatch.setenv("CLIKA_KERNELS", "off")
    tiny = np.float16(3e-6)  # below fp16's smallest normal, 6.1e-5
    data = _with_scale("Q4_0", tiny, row=0)
    ref = gguf_values("Q4_0", data, ROWS, COLS)
    assert ref[0, :32].any() and np.abs(ref[0, :32]).max() < 1e-4
    checkpoint = BlocksOnly({"w": RawBlocks("Q4_0", data, (ROWS, COLS))})
    options = {"accuracy_level": 0, "gguf_matmul": True}
    model, _ = quantize_proto(matmul_model(ref.T.copy()), checkpoint, "int4", options=options)
    assert any(n.op_type == OP_TYPE and n.domain == DOMAIN for n in model.graph.node)
    got = inference_session(model.SerializeToString()).run(None, {"A": np.eye(COLS, dtype=np.float32)})[0]
    assert np.array_equal(got.T, ref)


@pytest.mark.parametrize(
    ("n", "activation", "message"),
    [
        (37, "swiglu", r"node /mlp/gate_up/GgufMatMul: N=37 must be even for activation swiglu"),
        (8, "gelu", r"node /mlp/gate_up/GgufMatMul: activation 'gelu' is not one of none, swiglu"),
    ],
)
def test_an_activation_the_node_cannot_apply_is_refused_naming_the_node(n, activation, message):
    node = helper.make_node(
        OP_TYPE,
        ["A", "B"],
        ["Y"],
        "/mlp/gate_up/GgufMatMul",
        domain=DOMAIN,
        ggml_type=2,
        K=32,
        N=n,
        precision="fp32",
        activation=activation,
    )
    graph = helper.make_graph(
        [node],
        "t",
        [helper.make_tensor_value_info("A", TensorProto.FLOAT, ["M", 32])],
        [helper.make_tensor_value_info("Y", TensorProto.FLOAT, ["M", n // 2])],
        [numpy_helper.from_array(random_blocks("Q4_0", n, 32), "B")],
    )
    model = helper.make_model(graph, opset_imports=[*OPSETS, helper.make_opsetid(DOMAIN, 1)])
    with pytest.raises(FallbackError, match=message):
        rewrite(model.SerializeToString(), folder=None)

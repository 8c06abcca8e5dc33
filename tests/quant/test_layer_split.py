"""5- and 6-bit layer blocks stored as high 4 bits plus a 2-bit remainder: exact, and smaller."""

from __future__ import annotations

import numpy as np
import onnxruntime as ort
import pytest
from gguf_blocks import gguf_values, random_blocks
from quant_helpers import BlocksOnly, matmul_model, same_bits

from clika_export.checkpoint import RawBlocks
from clika_quant.nibbles import split_layer_blocks
from clika_quant.quantize import quantize_proto
from clika_runtime.kernels.transcode import transcode

SPLIT = {"split_layer_blocks": True}
# The 8-bit MatMulNBits form the split is measured against (not the GGUF blocks GgufMatMul reads).
EIGHT = {"gguf_matmul": False}


def run(model, feeds):
    sess = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"])
    return sess.run(None, feeds)[0]


def quantized(ggml_type, rows, cols, options, seed=2):
    data = random_blocks(ggml_type, rows, cols, seed=seed)
    ref = gguf_values(ggml_type, data, rows, cols)
    checkpoint = BlocksOnly({"w": RawBlocks(ggml_type, data, (rows, cols))})
    model, record = quantize_proto(matmul_model(ref.T.copy()), checkpoint, "int4", options=options)
    return model, record, ref


def test_only_narrow_codes_in_wide_blocks_are_split():
    rows, cols = 32, 256
    q5 = split_layer_blocks(transcode("Q5_0", random_blocks("Q5_0", rows, cols), (rows, cols)))
    assert q5 is not None and (q5.high.bits, q5.low.bits, q5.shift) == (4, 2, 1)
    # Q8_0 would split into 4 + 4 bits (no smaller); Q6_K's blocks of 16 meet ORT's slow 2-bit path.
    for ggml_type in ("Q8_0", "Q6_K", "Q4_0", "Q5_K"):
        matrix = transcode(ggml_type, random_blocks(ggml_type, rows, cols), (rows, cols))
        assert split_layer_blocks(matrix) is None, ggml_type


def test_split_weights_equal_gguf_bit_for_bit():
    """A = I_K makes the two ops return B^T: at accuracy level 0 their sum is every exact weight."""
    rows, cols = 40, 256
    model, record, ref = quantized("Q5_0", rows, cols, {**SPLIT, "accuracy_level": 0})
    ops = [n.op_type for n in model.graph.node]
    assert ops.count("MatMulNBits") == 2 and "MatMul" not in ops
    group = record["matrices"]["w"]["groups"][0]
    assert group["stored"] == "split: high 4 bits + low 2 bits"
    got = run(model, {"A": np.eye(cols, dtype=np.float32)})
    assert same_bits(got.T, ref)


def test_split_is_smaller_and_computes_what_the_8_bit_form_does():
    rows, cols = 64, 512
    split, split_record, _ = quantized("Q5_0", rows, cols, SPLIT, seed=3)
    eight, eight_record, _ = quantized("Q5_0", rows, cols, EIGHT, seed=3)
    split_bytes = split_record["matrices"]["w"]["groups"][0]["bytes"]
    eight_bytes = eight_record["matrices"]["w"]["groups"][0]["bytes"]
    stored = sum(t.ByteSize() for t in split.graph.initializer)
    assert split_bytes < 0.82 * eight_bytes and abs(stored - split_bytes) < 0.02 * split_bytes
    # int8 activations: both forms multiply the same integers, so they agree to float rounding.
    a = np.random.default_rng(0).standard_normal((8, cols)).astype(np.float32)
    got, want = run(split, {"A": a}), run(eight, {"A": a})
    assert np.abs(got - want).max() <= 1e-5 * np.abs(want).max()


@pytest.fixture(scope="module")
def tiny_exports(tmp_path_factory):
    from conftest import write_tiny_gguf

    from clika_export.api import export

    root = tmp_path_factory.mktemp("split")
    gguf = write_tiny_gguf(root / "tiny.gguf", weight_type="Q5_0", layers=2)
    return {
        name: export(gguf.path, root / name, precision="int4", progress=False, quant_options=options)
        for name, options in (("split", SPLIT), ("eight", EIGHT), ("exact", {"accuracy_level": 0}))
    }


def weight_bytes(folder) -> int:
    """The bytes of the layers' weights in the folder's data file (each is page-aligned there:
    tiny tensors' padding would hide the difference; the head is stored alike in both)."""
    import onnx

    model = onnx.load(str(folder / "model.onnx"), load_external_data=False)
    layers = [t for t in model.graph.initializer if t.name.startswith("model.layers.")]
    fields = [{e.key: e.value for e in t.external_data} for t in layers]
    return sum(int(f.get("length", 0)) for f in fields)


def test_a_split_export_is_smaller_and_decodes_the_same(tiny_exports):
    from clika_export.graph.kv_int8 import calibration_ids
    from clika_runtime.contract.manifest import Manifest

    sizes = {n: weight_bytes(tiny_exports[n]) for n in ("split", "eight")}
    assert sizes["split"] < 0.9 * sizes["eight"]
    record = Manifest.read(tiny_exports["split"]).precision
    stored = [g.get("stored") for e in record["matrices"].values() for g in e.get("groups", [])]
    assert stored.count("split: high 4 bits + low 2 bits") == 8  # 4 layer matrices in each of 2 layers
    tokens = calibration_ids(tiny_exports["split"])[:64]
    got, eight, exact = best_logits(tiny_exports, tokens)
    scale = np.abs(exact).max()
    # The split adds no error of its own: a 64-token prompt as close to the exact export.
    assert np.abs(got - exact).max() <= 1.25 * np.abs(eight - exact).max() + 1e-5 * scale
    # Decoding (a row or two a step) both forms take int8 activations, which round their inputs
    # alike. At more rows ORT's 2-bit MatMulNBits may compute otherwise than its 8-bit one on a
    # CPU without AVX-512 (seen on AVX2 from 4 rows), so equality is checked where they decode.
    got, eight, exact = best_logits(tiny_exports, tokens[:2])
    assert np.abs(got - eight).max() <= 0.01 * np.abs(exact).max()


def best_logits(exports, tokens) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """The split, 8-bit and exact exports' logits at the exact export's best 32 of each row: the
    head re-scores its best logits exactly; the rest are its 4-bit ranking form, where a logit
    near the cut may be either."""
    from clika_quant.quality import open_runner

    logits = {n: open_runner(f, threads=1).step(tokens, all_logits=True) for n, f in exports.items()}
    best = np.argsort(-logits["exact"], axis=-1)[:, :32]
    return tuple(np.take_along_axis(logits[n], best, -1) for n in ("split", "eight", "exact"))

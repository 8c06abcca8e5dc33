"""MatMulNBits packing checked against ORT itself, and the quantizers' error."""

from __future__ import annotations

import numpy as np
import pytest
from quant_helpers import run_matmul_nbits

from clika_quant.rtn import quantize_rtn
from clika_quant.search import quantize_search, weighted_error
from clika_runtime.kernels.blocks import BlockQuantized, pack_codes, unpack_codes


def random_matrix(
    bits: int, block: int, zero_point: str, n: int = 24, k: int = 96, seed: int = 0
) -> BlockQuantized:
    rng = np.random.default_rng(seed)
    blocks = -(-k // block)
    # Scales on a coarse grid keep every product exact in float32, so ORT and NumPy must agree bit for bit.
    scales = (rng.integers(-64, 64, (n, blocks)) / 256).astype(np.float32)
    zp = None
    if zero_point == "uint8":
        zp = rng.integers(0, 1 << bits, (n, blocks)).astype(np.uint8)
    elif zero_point == "float":
        zp = (rng.integers(-40, 200, (n, blocks)) / 8).astype(np.float32)
    codes = rng.integers(0, 1 << bits, (n, blocks * block)).astype(np.uint8)
    codes[:, k:] = 0
    return BlockQuantized(codes, scales, zp, bits, block, k)


@pytest.mark.parametrize("bits", [2, 4, 8])
def test_pack_unpack_round_trip(bits):
    codes = np.random.default_rng(0).integers(0, 1 << bits, (3, 5, 32)).astype(np.uint8)
    packed = pack_codes(codes, bits)
    assert packed.shape == (3, 5, 32 * bits // 8)
    np.testing.assert_array_equal(unpack_codes(packed, bits), codes)


def test_low_nibble_holds_the_even_element():
    """The layout MatMulNBits reads: element 2i in bits 0-3 of byte i, element 2i+1 in bits 4-7."""
    assert pack_codes(np.array([[1, 2, 3, 4]], np.uint8), 4).tolist() == [[0x21, 0x43]]


@pytest.mark.parametrize(
    "bits,block,zero_point",
    [(4, b, z) for b in (16, 32, 64, 128) for z in ("none", "uint8", "float")]
    + [(8, b, z) for b in (16, 32, 64) for z in ("none", "uint8")],
)
def test_ort_reads_our_packing_exactly(bits, block, zero_point):
    """Identity input: the op returns its dequantized weights, which must equal ours (K=96 pads partial blocks)."""
    matrix = random_matrix(bits, block, zero_point)
    got = run_matmul_nbits(matrix, np.eye(matrix.k, dtype=np.float32))
    np.testing.assert_array_equal(got.T, matrix.dequantize())


def test_accuracy_level_4_is_close_on_random_inputs():
    matrix = random_matrix(4, 32, "uint8", n=64, k=256)
    a = np.random.default_rng(1).standard_normal((5, 256)).astype(np.float32)
    exact = a.astype(np.float64) @ matrix.dequantize().T
    got = run_matmul_nbits(matrix, a, accuracy_level=4)
    assert np.linalg.norm(got - exact) / np.linalg.norm(exact) < 0.01


def test_float_zero_points_need_four_bits():
    m = random_matrix(8, 32, "none")
    with pytest.raises(ValueError, match="4 bits only"):
        BlockQuantized(m.codes, m.scales, np.zeros(m.scales.shape, np.float32), 8, 32, m.k)


def test_bad_block_size_is_refused():
    m = random_matrix(4, 32, "none")
    with pytest.raises(ValueError, match="power of two"):
        BlockQuantized(m.codes, m.scales, None, 4, 24, m.k)


def test_symmetric_rtn_keeps_each_block_extreme_exact():
    w = np.random.default_rng(2).standard_normal((16, 64)).astype(np.float32)
    deq = quantize_rtn(w, 4, 32, "none").dequantize().reshape(16, 2, 32)
    blocks = w.reshape(16, 2, 32)
    idx = np.abs(blocks).argmax(-1)[..., None]
    np.testing.assert_allclose(
        np.take_along_axis(deq, idx, -1), np.take_along_axis(blocks, idx, -1), rtol=1e-6
    )


def test_offset_rtn_keeps_min_and_max():
    w = np.random.default_rng(3).standard_normal((8, 32)).astype(np.float32)
    deq = quantize_rtn(w, 4, 32, "offset").dequantize()
    np.testing.assert_allclose(deq.min(1), w.min(1), rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(deq.max(1), w.max(1), rtol=1e-5, atol=1e-6)


def test_constant_block_is_exact_with_offsets():
    w = np.full((2, 32), 0.3, np.float32)
    np.testing.assert_allclose(quantize_rtn(w, 4, 32, "offset").dequantize(), w, rtol=1e-6)
    np.testing.assert_allclose(quantize_rtn(w, 4, 32, "float").dequantize(), w, rtol=1e-6)


MATRICES = {
    "gaussian": lambda rng: rng.standard_normal((256, 512)),
    "heavy-tailed": lambda rng: rng.standard_t(3, (256, 512)),
}


@pytest.mark.parametrize("kind", list(MATRICES))
@pytest.mark.parametrize("zero_point", ["none", "uint8", "offset"])
@pytest.mark.parametrize("block", [32, 128])
def test_search_beats_round_to_nearest(kind, zero_point, block):
    """The search lowers the relative weight error by at least 3% on every kind of matrix (5-10% typically)."""
    w = MATRICES[kind](np.random.default_rng(4)).astype(np.float32)
    rtn = weighted_error(w, quantize_rtn(w, 4, block, zero_point))
    searched = weighted_error(w, quantize_search(w, 4, block, zero_point))
    assert searched < 0.97 * rtn, (rtn, searched)


def test_importance_lowers_the_error_where_it_matters():
    rng = np.random.default_rng(5)
    w = rng.standard_normal((128, 256)).astype(np.float32)
    importance = np.where(np.arange(256) % 8 == 0, 50.0, 1.0)  # a few channels carry large activations
    plain = weighted_error(w, quantize_search(w, 4, 32, "offset"), importance)
    aware = weighted_error(w, quantize_search(w, 4, 32, "offset", importance=importance), importance)
    assert aware < 0.9 * plain, (plain, aware)


def test_search_output_runs_in_ort_as_computed():
    w = np.random.default_rng(6).standard_normal((32, 64)).astype(np.float32)
    matrix = quantize_search(w, 4, 32, "offset")
    got = run_matmul_nbits(matrix, np.eye(64, dtype=np.float32))
    # offsets are added by the graph pass, not by the op: compare the integer part
    integer_part = BlockQuantized(matrix.codes, matrix.scales, matrix.zero_points, 4, 32, 64).dequantize()
    np.testing.assert_array_equal(got.T, integer_part)

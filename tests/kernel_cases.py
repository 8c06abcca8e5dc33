"""Cases for the kernel tests: random and adversarial GGUF blocks, their float64 products,
and a runner that computes them under one forced ISA in a fresh process."""

from __future__ import annotations

import os
import pickle
import subprocess
import sys
import tempfile
from pathlib import Path

import numpy as np
import pytest
from gguf_blocks import FP16_FIELDS, gguf_values, random_blocks

from clika_runtime.kernels.gguf_layout import BLOCK_LAYOUT
from clika_runtime.kernels.library import kernel_status, kernels_enabled
from clika_runtime.kernels.op import PRECISIONS

FORMATS = tuple(BLOCK_LAYOUT)
ROW_COUNTS = (1, 2, 3, 5, 7, 8, 13, 64)
N_ODD = 37
X86_ISAS = ("scalar", "avx2", "avx512", "avx512_vnni", "avx512_bf16")
RUNNER = Path(__file__).resolve().parent / "kernel_isa_runner.py"


def require_library() -> None:
    """Skips where the library is not built or ``CLIKA_KERNELS=off`` turns it off."""
    status = kernel_status()
    if status.path is None or not kernels_enabled():
        pytest.skip(f"kernel library not in use: {status.reason}")


def forced_isa_fixture(computed):
    """A module fixture over X86_ISAS for tests whose ``computed(isa)`` runs their cases under a
    forced ISA (``run_under_isa``): it skips the ISAs this CPU does not run."""

    @pytest.fixture(scope="module", params=X86_ISAS)
    def isa(request) -> str:
        require_library()
        if not computed(request.param)["status"].available:
            pytest.skip(f"this CPU does not run {request.param}")
        return request.param

    return isa


def k_for(ggml_type: str) -> int:
    """Several blocks: 3 super-blocks for the K formats, 9 blocks for the others."""
    weights = BLOCK_LAYOUT[ggml_type][0]
    return weights * (3 if weights == 256 else 9)


def activations(k: int, seed: int) -> np.ndarray:
    return np.random.default_rng(seed).standard_normal((max(ROW_COUNTS), k)).astype(np.float32)


def subnormal_scales(blocks: np.ndarray, ggml_type: str, seed: int) -> np.ndarray:
    """Every fp16 scale field set to a random subnormal of either sign (raw bits 0x0001..0x03ff)."""
    rng = np.random.default_rng(seed)
    flat = blocks.reshape(-1, BLOCK_LAYOUT[ggml_type][1]).copy()
    for start in FP16_FIELDS[ggml_type]:
        bits = rng.integers(1, 0x400, len(flat), dtype=np.uint16) | (
            rng.integers(0, 2, len(flat)) << 15
        ).astype(np.uint16)
        flat[:, start : start + 2] = bits.view(np.uint8).reshape(-1, 2)
    return flat.reshape(blocks.shape)


def poison_rows(blocks: np.ndarray, ggml_type: str, rows: dict[int, float]) -> np.ndarray:
    """The first scale of the first block of each given row set to the given non-finite value."""
    out = blocks.copy()
    start = FP16_FIELDS[ggml_type][0]
    for row, value in rows.items():
        out[row, start : start + 2] = np.array([value], np.float16).view(np.uint8)
    return out


def make_case(ggml_type: str, precision: str, blocks: np.ndarray, k: int, seed: int) -> dict:
    return {
        "ggml_type": ggml_type,
        "k": k,
        "n": blocks.shape[0],
        "precision": precision,
        "a": activations(k, seed),
        "b": blocks,
        "ms": ROW_COUNTS,
    }


def reference(case: dict) -> np.ndarray:
    """gguf-py's dequantization times the activations, in float64."""
    with np.errstate(invalid="ignore", over="ignore"):
        weights = gguf_values(case["ggml_type"], case["b"], case["n"], case["k"]).astype(np.float64)
        return case["a"].astype(np.float64) @ weights.T


def run_under_isa(isa: str, cases: list, runner: Path = RUNNER) -> dict:
    """Computes ``cases`` in a subprocess with ``CLIKA_KERNEL_ISA=isa`` (``runner``: the script
    that computes them, GgufMatMul's by default); returns its status and results."""
    with tempfile.TemporaryDirectory() as folder:
        cases_path, out_path = Path(folder, "cases.pkl"), Path(folder, "out.pkl")
        cases_path.write_bytes(pickle.dumps(cases))
        env = {**os.environ, "CLIKA_KERNEL_ISA": isa}
        done = subprocess.run(
            [sys.executable, str(runner), str(cases_path), str(out_path)],
            env=env,
            capture_output=True,
            text=True,
        )
        assert done.returncode == 0, f"runner under {isa} failed:\n{done.stderr[-3000:]}"
        return pickle.loads(out_path.read_bytes())


def relative_error(y: np.ndarray, ref: np.ndarray) -> float:
    """max |y - ref| over max |ref|: the error relative to the output's scale."""
    return float(np.max(np.abs(y.astype(np.float64) - ref)) / np.max(np.abs(ref)))


FP32_FMA = 1e-6
# The BF16 split's activations carry up to 2^-18 of their value (x = hi + lo): 3.4e-6 measured.
BF16_SPLIT = 5e-6
# The VNNI split's activations are 16-bit integers of their block's largest magnitude, so a
# value carries up to 1/65278 of that magnitude: 2.9e-5 measured.
SPLIT16 = 5e-5
SPLIT16_FORMATS = ("Q4_0", "Q4_1")
INT8 = 2e-2
POISONED = {3: np.nan, 10: np.inf, 20: -np.inf}


def bound(
    precision: str, isa: str | None = None, ggml_type: str | None = None, fp32_form: str | None = None
) -> float:
    if precision == "int8":
        return INT8
    if isa == "avx512_bf16" and ggml_type in ("Q4_0", "Q4_1"):
        return BF16_SPLIT
    if isa == "avx512_vnni" and ggml_type in SPLIT16_FORMATS and fp32_form == "split16":
        return SPLIT16
    return FP32_FMA


def case_bound(case: dict, isa: str | None) -> float:
    return bound(case["precision"], isa, case["ggml_type"], case.get("fp32_form"))


# Longer rows of 32-weight blocks: SmolLM2's down matrix (48 blocks) and a row whose scales
# the AVX-512 fp32 engine reads in more than one piece of 64 blocks (65). Both, and the
# Q4_K row, are longer than the prefill panel's K piece of 1024 weights, so its tiles carry
# their accumulators from piece to piece.
LONG_ROW_KS = (32 * 48, 32 * 65)
LONG_Q4_K_ROW = 256 * 5


def all_cases() -> list[dict]:
    cases = []
    for i, ggml_type in enumerate(FORMATS):
        k = k_for(ggml_type)
        plain = random_blocks(ggml_type, N_ODD, k, seed=i)
        subnormal = subnormal_scales(plain, ggml_type, seed=i)
        poisoned = poison_rows(plain, ggml_type, POISONED)
        for precision in PRECISIONS:
            for kind, blocks in (("random", plain), ("subnormal", subnormal), ("nonfinite", poisoned)):
                cases.append({**make_case(ggml_type, precision, blocks, k, seed=100 + i), "kind": kind})
        # fp32 nodes that let the 16-bit split run (on avx512_vnni; fp32 FMA on the other paths
        # and for the other formats, which the Q8_0 cases show).
        if ggml_type in SPLIT16_FORMATS + ("Q8_0",):
            for kind, blocks in (("random", plain), ("subnormal", subnormal), ("nonfinite", poisoned)):
                case = make_case(ggml_type, "fp32", blocks, k, seed=100 + i)
                cases.append({**case, "kind": kind, "fp32_form": "split16"})
    for i, ggml_type in enumerate(("Q4_0", "Q4_1")):
        for j, k in enumerate(LONG_ROW_KS):
            blocks = random_blocks(ggml_type, N_ODD, k, seed=50 + 2 * i + j)
            for precision in PRECISIONS:
                cases.append({**make_case(ggml_type, precision, blocks, k, seed=150 + i), "kind": "random"})
            split = make_case(ggml_type, "fp32", blocks, k, seed=150 + i)
            cases.append({**split, "kind": "random", "fp32_form": "split16"})
    blocks = random_blocks("Q4_K", N_ODD, LONG_Q4_K_ROW, seed=60)
    for precision in PRECISIONS:
        cases.append({**make_case("Q4_K", precision, blocks, LONG_Q4_K_ROW, seed=160), "kind": "random"})
    return cases


def checked_columns(case: dict) -> np.ndarray:
    columns = np.ones(case["n"], bool)
    if case["kind"] == "nonfinite":
        columns[list(POISONED)] = False
    return columns

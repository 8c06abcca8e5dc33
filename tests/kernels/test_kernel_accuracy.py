"""Every format x precision x ISA path this CPU runs, against gguf-py in float64.

Each ISA runs in its own process (the library picks its ISA once per process). Bounds are
max |Y - ref| / max |ref|: FP32_FMA for the fp32 paths, INT8 for int8 activations
(llama.cpp's numerics, quantized per 32 weights).
"""

from __future__ import annotations

import functools

import numpy as np
import pytest
from gguf_blocks import random_blocks
from kernel_cases import (
    FORMATS,
    N_ODD,
    ROW_COUNTS,
    X86_ISAS,
    k_for,
    make_case,
    poison_rows,
    reference,
    relative_error,
    require_library,
    run_under_isa,
    subnormal_scales,
)

from clika_runtime.kernels.library import kernel_status
from clika_runtime.kernels.op import PRECISIONS

FP32_FMA = 1e-6
INT8 = 2e-2
POISONED = {3: np.nan, 10: np.inf, 20: -np.inf}


def bound(precision: str) -> float:
    return INT8 if precision == "int8" else FP32_FMA


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
    return cases


@functools.cache
def computed(isa: str) -> tuple[list[dict], dict]:
    cases = all_cases()
    return cases, run_under_isa(isa, cases)


@pytest.fixture(scope="module", params=X86_ISAS)
def isa(request) -> str:
    require_library()
    if not run_under_isa(request.param, [])["status"].available:
        pytest.skip(f"this CPU does not run {request.param}")
    return request.param


def checked_columns(case: dict) -> np.ndarray:
    columns = np.ones(case["n"], bool)
    if case["kind"] == "nonfinite":
        columns[list(POISONED)] = False
    return columns


def test_every_format_and_precision_matches_gguf_py(isa):
    cases, out = computed(isa)
    failures = []
    for case, result in zip(cases, out["results"], strict=True):
        ref = reference(case)
        keep = checked_columns(case)
        limit = bound(case["precision"])
        for m in ROW_COUNTS:
            y = result[m]
            assert y.shape == (m, case["n"])
            error = relative_error(y[:, keep], ref[:m, keep])
            if not error <= limit:
                failures.append(
                    f"{case['ggml_type']} {case['precision']} {case['kind']} M={m}: {error:.3g} > {limit}"
                )
    assert not failures, "\n".join(failures)


def test_nonfinite_scales_poison_only_their_own_rows(isa):
    cases, out = computed(isa)
    for case, result in zip(cases, out["results"], strict=True):
        if case["kind"] != "nonfinite":
            continue
        y = result[max(ROW_COUNTS)]
        assert not np.isfinite(y[:, list(POISONED)]).any(axis=0).any(), case["ggml_type"]
        assert np.isfinite(y[:, checked_columns(case)]).all(), (case["ggml_type"], case["precision"])


def test_a_row_alone_equals_that_row_in_any_batch(isa):
    cases, out = computed(isa)
    for case, result in zip(cases, out["results"], strict=True):
        full = result[max(ROW_COUNTS)].view(np.uint32)
        for m in ROW_COUNTS:
            assert np.array_equal(result[m].view(np.uint32), full[:m]), (
                case["ggml_type"],
                case["precision"],
                m,
            )


def test_simd_paths_equal_the_scalar_reference_within_bounds(isa):
    if isa == "scalar":
        pytest.skip("the scalar path is the reference")
    cases, out = computed(isa)
    _, scalar = computed("scalar")
    for case, result, expected in zip(cases, out["results"], scalar["results"], strict=True):
        keep = checked_columns(case)
        ref = reference(case)
        scale = np.max(np.abs(ref[:, keep]))
        limit = bound(case["precision"])
        for m in ROW_COUNTS:
            gap = np.max(np.abs(result[m][:, keep].astype(np.float64) - expected[m][:, keep])) / scale
            assert gap <= 2 * limit, (case["ggml_type"], case["precision"], case["kind"], m, gap)


def test_this_process_reports_its_isa():
    require_library()
    status = kernel_status()
    assert status.available, status.reason
    assert status.isa in X86_ISAS + ("neon",)

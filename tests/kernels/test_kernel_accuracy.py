"""Every format x precision x ISA path this CPU runs, against gguf-py in float64.

Each ISA runs in its own process (the library picks its ISA once per process). Bounds are
max |Y - ref| / max |ref|: FP32_FMA for the fp32 paths, BF16_SPLIT for the avx512_bf16 fp32
path's Q4_0/Q4_1 (activations split into two bf16 halves), SPLIT16 for the avx512_vnni path's
Q4_0/Q4_1 nodes with fp32_form "split16" (activations as 16-bit integers per 32 weights), INT8 for int8 activations
(llama.cpp's numerics, quantized per 32 weights).
"""

from __future__ import annotations

import functools

import numpy as np
import pytest
import split16_model
from kernel_cases import (
    SPLIT16_FORMATS,
    X86_ISAS,
    all_cases,
    checked_columns,
    forced_isa_fixture,
    require_library,
    run_under_isa,
)
from kernel_checks import (
    check_against_gguf_py,
    check_against_scalar,
    check_batch_independence,
    check_nonfinite_rows,
)

from clika_runtime.kernels.library import kernel_status


@functools.cache
def computed(isa: str) -> tuple[list[dict], dict]:
    cases = all_cases()
    return cases, run_under_isa(isa, cases)


isa = forced_isa_fixture(lambda isa: computed(isa)[1])


def test_every_format_and_precision_matches_gguf_py(isa):
    cases, out = computed(isa)
    check_against_gguf_py(cases, out["results"], isa)


def test_nonfinite_scales_poison_only_their_own_rows(isa):
    cases, out = computed(isa)
    check_nonfinite_rows(cases, out["results"])


def test_a_row_alone_equals_that_row_in_any_batch(isa):
    cases, out = computed(isa)
    check_batch_independence(cases, out["results"])


def test_simd_paths_equal_the_scalar_reference_within_bounds(isa):
    if isa == "scalar":
        pytest.skip("the scalar path is the reference")
    cases, out = computed(isa)
    _, scalar = computed("scalar")
    check_against_scalar(cases, out["results"], scalar["results"], isa)


def test_the_vnni_split_computes_its_stated_arithmetic_bit_for_bit():
    require_library()
    cases, out = computed("avx512_vnni")
    if not out["status"].available:
        pytest.skip("this CPU does not run avx512_vnni")
    checked = 0
    for case, result in zip(cases, out["results"], strict=True):
        if case.get("fp32_form") != "split16" or case["ggml_type"] not in SPLIT16_FORMATS:
            continue
        expected = split16_model.matmul(case["ggml_type"], case["a"], case["b"], case["k"])
        keep = checked_columns(case)
        y = result[max(result)]
        assert np.array_equal(y[:, keep].view(np.uint32), expected[:, keep].view(np.uint32)), (
            case["ggml_type"],
            case["kind"],
            case["k"],
        )
        checked += 1
    assert checked >= 8


def test_this_process_reports_its_isa():
    require_library()
    status = kernel_status()
    assert status.available, status.reason
    assert status.isa in X86_ISAS + ("neon", "neon_dotprod")

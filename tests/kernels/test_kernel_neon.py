"""The ARM NEON paths, cross-compiled for aarch64 and run under qemu: every format and
precision against gguf-py in float64, row independence, and against the scalar path,
on the same cases as the x86 paths (kernel_cases.all_cases); the swiglu activation bit
for bit the formula the x86 paths give (swiglu_cases)."""

from __future__ import annotations

import functools
from pathlib import Path

import numpy as np
import pytest
from attention_cases import LAYOUTS, STEPS, run_cases
from kernel_cases import all_cases, require_library
from kernel_checks import (
    check_against_gguf_py,
    check_against_scalar,
    check_batch_independence,
    check_nonfinite_rows,
)
from kernel_native import (
    ATTENTION_DRIVER,
    DRIVER,
    RESCORE_DRIVER,
    build_driver,
    run_native,
    run_native_attention,
    run_native_rescore,
    toolchain,
)
from rescore_cases import HEADS as RESCORE_HEADS
from rescore_cases import run_cases as run_rescore_cases
from swiglu_cases import cases as swiglu_cases
from swiglu_cases import pairs, swiglu_float32

ARM_ISAS = ("scalar", "neon", "neon_dotprod")
ATTENTION_CASES = [(layout, step) for layout in LAYOUTS for step in STEPS]


def arm_driver(tmp_path_factory, name: str, source: Path = DRIVER) -> tuple[str, Path, Path]:
    """(the emulator, ``source`` cross-compiled for aarch64, a folder for its files)."""
    compiler, emulator = toolchain("aarch64-linux-gnu-g++", ("qemu-aarch64-static", "qemu-aarch64"))
    folder = tmp_path_factory.mktemp(f"aarch64-{name}")
    return emulator, build_driver(compiler, folder / name, source), folder


@pytest.fixture(scope="module")
def arm(tmp_path_factory):
    emulator, driver, folder = arm_driver(tmp_path_factory, "native_driver")
    cases = all_cases()
    gated = swiglu_cases()

    (folder / "swiglu").mkdir()

    @functools.cache
    def computed(isa: str, which: str = "matmul"):
        if which == "swiglu":
            return run_native(emulator, driver, isa, gated, folder / "swiglu")
        return run_native(emulator, driver, isa, cases, folder)

    return cases, computed


@pytest.mark.parametrize("isa", ARM_ISAS)
def test_arm_paths_match_gguf_py_and_keep_rows_independent(arm, isa):
    cases, computed = arm
    lines, results = computed(isa)
    assert lines[0] == isa
    check_against_gguf_py(cases, results)
    check_nonfinite_rows(cases, results)
    check_batch_independence(cases, results)


@pytest.mark.parametrize("isa", ARM_ISAS[1:])
def test_neon_paths_equal_the_scalar_reference_within_bounds(arm, isa):
    cases, computed = arm
    check_against_scalar(cases, computed(isa)[1], computed("scalar")[1])


def test_the_dot_product_engine_is_the_one_that_runs(arm):
    _, computed = arm
    assert computed("neon_dotprod")[0][1:] == ["NEON fp32 FMA", "NEON int8 (sdot)"]
    assert computed("neon")[0][1:] == ["NEON fp32 FMA", "NEON int8 (widening multiply)"]


@pytest.mark.parametrize("isa", ARM_ISAS)
def test_arm_swiglu_is_the_scalar_formula_bit_for_bit(arm, isa):
    _, computed = arm
    lines, results = computed(isa, "swiglu")
    assert lines[0] == isa
    for plain, gated in pairs(results):
        for m, products in plain.items():
            assert np.array_equal(gated[m], swiglu_float32(products))
            assert np.array_equal(gated[m], gated[max(gated)][:m])


@pytest.fixture(scope="module")
def arm_attention(tmp_path_factory):
    emulator, driver, folder = arm_driver(tmp_path_factory, "native_attention_driver", ATTENTION_DRIVER)
    return lambda isa: run_native_attention(emulator, driver, isa, ATTENTION_CASES, folder)


@pytest.mark.parametrize("isa", ARM_ISAS)
def test_arm_step_attention_gives_the_x86_paths_bits(arm_attention, isa):
    """Every x86 ISA gives the scalar path's bits (test_step_attention); so does ARM."""
    require_library()
    ran, results = arm_attention(isa)
    assert ran == isa
    for (layout, step), got, want in zip(ATTENTION_CASES, results, run_cases(ATTENTION_CASES), strict=True):
        for g, w in zip(got, want, strict=True):
            assert np.array_equal(g, w), (isa, layout, step)


@pytest.fixture(scope="module")
def arm_rescore(tmp_path_factory):
    emulator, driver, folder = arm_driver(tmp_path_factory, "native_rescore_driver", RESCORE_DRIVER)
    return lambda isa: run_native_rescore(emulator, driver, isa, RESCORE_HEADS, folder)


@pytest.mark.parametrize("isa", ARM_ISAS)
def test_arm_head_rescore_gives_the_x86_paths_bits(arm_rescore, isa):
    """Every x86 ISA gives the scalar path's bits (test_head_rescore); so does ARM."""
    require_library()
    ran, results = arm_rescore(isa)
    assert ran == isa
    for head, got, want in zip(RESCORE_HEADS, results, run_rescore_cases(RESCORE_HEADS), strict=True):
        assert np.array_equal(got, want, equal_nan=True), (isa, head)

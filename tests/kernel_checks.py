"""What every kernel path must give on the shared cases (kernel_cases.all_cases), whatever
runs it: the library inside ONNX Runtime on this CPU, or the native driver under qemu.
Each check takes the cases and their results ({m: Y of a[:m]} per case) and asserts."""

from __future__ import annotations

import numpy as np
from kernel_cases import POISONED, ROW_COUNTS, case_bound, checked_columns, reference, relative_error


def check_against_gguf_py(cases: list[dict], results: list[dict], isa: str | None = None) -> None:
    failures = []
    for case, result in zip(cases, results, strict=True):
        ref = reference(case)
        keep = checked_columns(case)
        limit = case_bound(case, isa)
        for m in ROW_COUNTS:
            y = result[m]
            assert y.shape == (m, case["n"])
            error = relative_error(y[:, keep], ref[:m, keep])
            if not error <= limit:
                failures.append(
                    f"{case['ggml_type']} {case['precision']} {case['kind']} M={m}: {error:.3g} > {limit}"
                )
    assert not failures, "\n".join(failures)


def check_nonfinite_rows(cases: list[dict], results: list[dict]) -> None:
    """A NaN or inf scale poisons its own output column and no other."""
    for case, result in zip(cases, results, strict=True):
        if case["kind"] != "nonfinite":
            continue
        y = result[max(ROW_COUNTS)]
        assert not np.isfinite(y[:, list(POISONED)]).any(axis=0).any(), case["ggml_type"]
        assert np.isfinite(y[:, checked_columns(case)]).all(), (case["ggml_type"], case["precision"])


def check_batch_independence(cases: list[dict], results: list[dict]) -> None:
    """A row's result is bit for bit the same whatever rows are computed beside it."""
    for case, result in zip(cases, results, strict=True):
        full = result[max(ROW_COUNTS)].view(np.uint32)
        for m in ROW_COUNTS:
            assert np.array_equal(result[m].view(np.uint32), full[:m]), (
                case["ggml_type"],
                case["precision"],
                m,
            )


def check_against_scalar(
    cases: list[dict], results: list[dict], scalar: list[dict], isa: str | None = None
) -> None:
    """A SIMD path stays within twice its bound of the scalar reference path."""
    for case, result, expected in zip(cases, results, scalar, strict=True):
        keep = checked_columns(case)
        scale = np.max(np.abs(reference(case)[:, keep]))
        limit = case_bound(case, isa)
        for m in ROW_COUNTS:
            gap = np.max(np.abs(result[m][:, keep].astype(np.float64) - expected[m][:, keep])) / scale
            assert gap <= 2 * limit, (case["ggml_type"], case["precision"], case["kind"], m, gap)

"""Runs GgufMatMul cases in a fresh process, so ``CLIKA_KERNEL_ISA`` picks the ISA anew.

Usage: ``python kernel_isa_runner.py CASES.pkl OUT.pkl``. Each case is a dict with ``ggml_type``,
``k``, ``n``, ``precision``, ``a`` ([rows, k] float32), ``b`` (the blocks), ``ms`` (row
counts) and optionally ``activation`` and ``fp32_form``; the output is, per case, ``{m: Y of a[:m]}``.
"""

from __future__ import annotations

import pickle
import sys

from gguf_matmul_graph import gguf_matmul_model, gguf_matmul_session, run_gguf_matmul

from clika_runtime.kernels.library import kernel_status


def run_case(case: dict) -> dict:
    model = gguf_matmul_model(
        case["ggml_type"],
        case["k"],
        case["n"],
        case["precision"],
        case.get("activation"),
        case.get("fp32_form"),
    )
    session = gguf_matmul_session(model)
    return {m: run_gguf_matmul(session, case["a"][:m], case["b"]) for m in case["ms"]}


def main(cases_path: str, out_path: str) -> None:
    with open(cases_path, "rb") as f:
        cases = pickle.load(f)
    status = kernel_status()  # an ISA this CPU lacks computes nothing: the status says why
    outputs = {"status": status, "results": [run_case(case) for case in cases] if status.available else []}
    with open(out_path, "wb") as f:
        pickle.dump(outputs, f)


if __name__ == "__main__":
    main(sys.argv[1], sys.argv[2])

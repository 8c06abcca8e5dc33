"""The kernel library built for another architecture and run under an emulator: the
sources (less the ONNX Runtime op) and tests/kernels/native_driver.cpp cross-compiled into
one static program, fed the shared cases through a file (see the driver's comment)."""

from __future__ import annotations

import os
import shutil
import subprocess
from pathlib import Path

import numpy as np
import pytest

from clika_runtime.kernels.gguf_layout import BLOCK_LAYOUT
from clika_runtime.kernels.op import GGML_TYPE_IDS

ROOT = Path(__file__).resolve().parents[1]
SOURCES = ROOT / "kernels" / "src"
DRIVER = ROOT / "tests" / "kernels" / "native_driver.cpp"
FLAGS = ["-O2", "-std=c++17", "-fno-wrapv", "-ffp-contract=off", "-static"]


def toolchain(compiler: str, emulators: tuple[str, ...]) -> tuple[str, str]:
    """The cross compiler and emulator found on PATH; skips, naming what is missing."""
    found_compiler = shutil.which(compiler)
    found_emulator = next((e for e in map(shutil.which, emulators) if e), None)
    if found_compiler is None or found_emulator is None:
        missing = compiler if found_compiler is None else " or ".join(emulators)
        pytest.skip(f"{missing} not installed (Debian: g++-aarch64-linux-gnu, qemu-user-static)")
    return found_compiler, found_emulator


def build_driver(compiler: str, out: Path, driver: Path = DRIVER) -> Path:
    """``driver`` and the library's sources but the ONNX Runtime glue (``ort_*.cpp``), linked."""
    sources = [str(p) for p in sorted(SOURCES.glob("*.cpp")) if not p.name.startswith("ort_")]
    subprocess.run([compiler, *FLAGS, f"-I{SOURCES}", str(driver), *sources, "-o", str(out)], check=True)
    return out


def run_driver(emulator: str, driver: Path, isa: str, cases_path: Path, out_path: Path) -> str:
    """What the driver printed, run on ``cases_path`` under ``CLIKA_KERNEL_ISA=isa``."""
    env = {**os.environ, "CLIKA_KERNEL_ISA": isa}
    done = subprocess.run(
        [emulator, str(driver), str(cases_path), str(out_path)], env=env, capture_output=True, text=True
    )
    assert done.returncode == 0, f"{isa} under {emulator}: {done.stderr[-2000:]}"
    return done.stdout


def split_outputs(path: Path, shapes: list[tuple[int, ...]]) -> list[np.ndarray]:
    """The driver's float32 outputs, in order, as arrays of these shapes (all it wrote)."""
    flat, at, arrays = np.fromfile(path, np.float32), 0, []
    for shape in shapes:
        size = int(np.prod(shape))
        arrays.append(flat[at : at + size].reshape(shape))
        at += size
    assert at == flat.size, "the driver wrote more than the cases asked for"
    return arrays


def write_cases(cases: list[dict], path: Path) -> None:
    with path.open("wb") as f:
        for case in cases:
            head = [GGML_TYPE_IDS[case["ggml_type"]], case["k"], case["n"], len(case["a"])]
            head += [int(case["precision"] == "int8"), int(case.get("activation") == "swiglu")]
            head += [len(case["ms"]), *case["ms"]]
            f.write(np.array(head, np.int64).tobytes())
            f.write(np.ascontiguousarray(case["b"], np.uint8).tobytes())
            f.write(np.ascontiguousarray(case["a"], np.float32).tobytes())


def read_results(cases: list[dict], path: Path) -> list[dict]:
    """Per case, {m: Y of its first m rows}, in the order the driver wrote them."""
    widths = [case["n"] // 2 if case.get("activation") == "swiglu" else case["n"] for case in cases]
    arrays = iter(
        split_outputs(path, [(m, n) for case, n in zip(cases, widths, strict=True) for m in case["ms"]])
    )
    return [{m: next(arrays) for m in case["ms"]} for case in cases]


def run_native(
    emulator: str, driver: Path, isa: str, cases: list[dict], folder: Path
) -> tuple[list[str], list[dict]]:
    """(ISA and engine lines the driver printed, results) of ``cases`` under ``CLIKA_KERNEL_ISA=isa``."""
    for case in cases:  # the driver reads each case's blocks as [n, row bytes]
        assert (
            case["b"].size
            == case["n"]
            * case["k"]
            // BLOCK_LAYOUT[case["ggml_type"]][0]
            * BLOCK_LAYOUT[case["ggml_type"]][1]
        )
    cases_path, out_path = folder / f"{isa}.cases", folder / f"{isa}.out"
    write_cases(cases, cases_path)
    printed = run_driver(emulator, driver, isa, cases_path, out_path)
    return printed.splitlines(), read_results(cases, out_path)


ATTENTION_DRIVER = ROOT / "tests" / "kernels" / "native_attention_driver.cpp"


def run_native_attention(
    emulator: str, driver: Path, isa: str, cases: list, folder: Path
) -> tuple[str, list]:
    """(the ISA the driver ran, each case's [output, present_key, present_value]) under ``isa``."""
    from attention_cases import feeds, op_feeds

    cases_path, out_path = folder / f"attention-{isa}.cases", folder / f"attention-{isa}.out"
    shapes = []
    with cases_path.open("wb") as f:
        for layout, step in cases:
            x = op_feeds(feeds(layout, step))
            half = layout.rotary_half or 0
            rows, tokens = len(step.new), len(x["token_cell"])
            head = [layout.heads, layout.kv_heads, layout.head_dim, layout.capacity, half, layout.window or 0]
            head += [rows, tokens, len(x["cos"]) if half else 0]
            f.write(np.array(head, np.int64).tobytes())
            f.write(np.array([layout.scale or 0.0, layout.softcap], np.float32).tobytes())
            for name in ("qkv", "token_cell", "query_seqlens", "seqlens_k", "past_key", "past_value"):
                f.write(np.ascontiguousarray(x[name]).tobytes())
            if half:
                f.write(x["cos"].tobytes() + x["sin"].tobytes())
            shapes.append(
                [(tokens, layout.heads * layout.head_dim), x["past_key"].shape, x["past_value"].shape]
            )
    printed = run_driver(emulator, driver, isa, cases_path, out_path)
    arrays = iter(split_outputs(out_path, [shape for case_shapes in shapes for shape in case_shapes]))
    return printed.strip(), [[next(arrays) for _ in case_shapes] for case_shapes in shapes]


RESCORE_DRIVER = ROOT / "tests" / "kernels" / "native_rescore_driver.cpp"


def run_native_rescore(emulator: str, driver: Path, isa: str, heads: list, folder: Path) -> tuple[str, list]:
    """(the ISA the driver ran, each head's logits) under ``isa``."""
    from rescore_cases import feeds, weights

    cases_path, out_path = folder / f"rescore-{isa}.cases", folder / f"rescore-{isa}.out"
    with cases_path.open("wb") as f:
        for h in heads:
            x, w = feeds(h), weights(h)
            f.write(
                np.array([h.tokens, h.n, h.blocks, h.block, h.top_k, int(h.zero_points)], np.int64).tobytes()
            )
            for part in (
                x["approx"],
                x["x"],
                w["codes"],
                w["scales"],
                *([w["zero_points"]] if h.zero_points else []),
            ):
                f.write(np.ascontiguousarray(part).tobytes())
    printed = run_driver(emulator, driver, isa, cases_path, out_path)
    return printed.strip(), split_outputs(out_path, [(h.tokens, h.n) for h in heads])

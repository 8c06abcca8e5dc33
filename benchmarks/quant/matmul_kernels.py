"""Time the weight-MatMul kernels ORT offers on this CPU, at a model's shapes.

For each (K, N) weight shape, batch rows M and thread count, one small graph
holds R copies of the op (distinct random weights, so they do not all sit in
cache, as in a real model) and is timed through IO binding; the figure is the
median time of one op in microseconds and its ratio to fp32 MatMul. The
output's relative error against the float product is printed too.

    python benchmarks/quant/matmul_kernels.py --threads 1 2 --out kernels.json

Defaults are SmolLM2-135M's shapes (hidden 576, intermediate 1536, vocab 49152).
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import statistics
import time
from dataclasses import dataclass

import numpy as np
import onnx
import onnxruntime as ort
from onnx import TensorProto, helper, numpy_helper

from clika_quant.onnx_ops import MS_DOMAIN, dynamic_quantize_matmul, matmul_nbits
from clika_quant.rtn import quantize_rtn

SHAPES = {
    "qkv": (576, 960),
    "o_proj": (576, 576),
    "gate_up": (576, 3072),
    "down": (1536, 576),
    "head": (576, 49152),
}
ROWS = (1, 8, 64, 256)


@dataclass(frozen=True)
class Variant:
    name: str
    kind: str  # fp32 | nbits | dqmm | nbits_minsum
    bits: int = 4
    block: int = 32
    zero_point: str = "none"
    accuracy: int = 4

    @property
    def slow(self) -> bool:
        """Paths that dequantize to float on every call: timed at small M only (see --slow-rows)."""
        return (
            self.kind != "fp32" and self.kind != "dqmm" and (self.accuracy == 0 or self.zero_point == "float")
        )


def default_variants() -> list[Variant]:
    out = [Variant("fp32", "fp32")]
    for block in (32, 64, 128):
        for zp in ("none", "uint8", "float"):
            out.append(Variant(f"int4 b{block} {zp} acc4", "nbits", 4, block, zp, 4))
    out.append(Variant("int4 b32 none acc0", "nbits", 4, 32, "none", 0))
    out.append(Variant("int4 b32 float acc0", "nbits", 4, 32, "float", 0))
    out.append(Variant("int4 b32 none acc4 + min-sum", "nbits_minsum", 4, 32, "none", 4))
    out.append(Variant("int8 b32 none acc4", "nbits", 8, 32, "none", 4))
    out.append(Variant("int8 b16 none acc4", "nbits", 8, 16, "none", 4))
    out.append(Variant("int8 b32 none acc0", "nbits", 8, 32, "none", 0))
    out.append(Variant("DynamicQuantizeMatMul int8", "dqmm"))
    return out


def op_nodes(variant: Variant, weight_kn: np.ndarray, prefix: str, out: str):
    """Nodes and initializers computing ``A @ weight_kn`` with the variant's op."""
    k, n = weight_kn.shape
    if variant.kind == "fp32":
        w = numpy_helper.from_array(weight_kn, f"{prefix}.w")
        return [helper.make_node("MatMul", ["A", w.name], [out])], [w]
    if variant.kind == "dqmm":
        return dynamic_quantize_matmul(weight_kn, "A", out, prefix)
    matrix = quantize_rtn(weight_kn.T, variant.bits, variant.block, variant.zero_point)
    if variant.kind == "nbits":
        return matmul_nbits(matrix, "A", out, prefix, variant.accuracy)
    # Asymmetric weights as symmetric codes plus a per-block offset: A @ W = A @ Wsym + blocksum(A) @ offsets.
    nodes, inits = matmul_nbits(matrix, "A", f"{prefix}.main", prefix, variant.accuracy)
    blocks = k // variant.block
    offsets = np.random.default_rng(1).standard_normal((blocks, n)).astype(np.float32) * 0.01
    inits += [
        numpy_helper.from_array(np.array([0, blocks, variant.block], np.int64), f"{prefix}.shape"),
        numpy_helper.from_array(np.array([2], np.int64), f"{prefix}.axis"),
        numpy_helper.from_array(offsets, f"{prefix}.offsets"),
    ]
    nodes += [
        helper.make_node("Reshape", ["A", f"{prefix}.shape"], [f"{prefix}.blocked"]),
        helper.make_node(
            "ReduceSum", [f"{prefix}.blocked", f"{prefix}.axis"], [f"{prefix}.sums"], keepdims=0
        ),
        helper.make_node("MatMul", [f"{prefix}.sums", f"{prefix}.offsets"], [f"{prefix}.corr"]),
        helper.make_node("Add", [f"{prefix}.main", f"{prefix}.corr"], [out]),
    ]
    return nodes, inits


def build(variant: Variant, weights: list[np.ndarray]) -> bytes:
    k, n = weights[0].shape
    nodes, inits, outputs = [], [], []
    for i, w in enumerate(weights):
        got_nodes, got_inits = op_nodes(variant, w, f"w{i}", f"Y{i}")
        nodes += got_nodes
        inits += got_inits
        outputs.append(helper.make_tensor_value_info(f"Y{i}", TensorProto.FLOAT, ["M", n]))
    graph = helper.make_graph(
        nodes, "bench", [helper.make_tensor_value_info("A", TensorProto.FLOAT, ["M", k])], outputs, inits
    )
    model = helper.make_model(
        graph, opset_imports=[helper.make_opsetid("", 21), helper.make_opsetid(MS_DOMAIN, 1)]
    )
    return model.SerializeToString()


def session(model: bytes, threads: int) -> ort.InferenceSession:
    opts = ort.SessionOptions()
    opts.intra_op_num_threads = threads
    opts.inter_op_num_threads = 1
    opts.add_session_config_entry("session.intra_op.allow_spinning", "0")
    return ort.InferenceSession(model, opts, providers=["CPUExecutionProvider"])


def time_op(sess: ort.InferenceSession, a: np.ndarray, copies: int, budget_s: float) -> float:
    """Median microseconds per op over repeated bound runs."""
    binding = sess.io_binding()
    binding.bind_ortvalue_input("A", ort.OrtValue.ortvalue_from_numpy(a))
    for out in sess.get_outputs():
        binding.bind_output(out.name, "cpu")
    for _ in range(2):
        sess.run_with_iobinding(binding)
    times: list[float] = []
    start = time.perf_counter()
    while len(times) < 5 or (time.perf_counter() - start < budget_s and len(times) < 200):
        t0 = time.perf_counter()
        sess.run_with_iobinding(binding)
        times.append(time.perf_counter() - t0)
    return statistics.median(times) / copies * 1e6


def relative_error(sess: ort.InferenceSession, a: np.ndarray, weight_kn: np.ndarray) -> float:
    got = sess.run(["Y0"], {"A": a})[0]
    ref = a.astype(np.float64) @ weight_kn.astype(np.float64)
    return float(np.linalg.norm(got - ref) / np.linalg.norm(ref))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--threads", type=int, nargs="+", default=[1, 2])
    parser.add_argument("--shapes", nargs="+", default=list(SHAPES), choices=list(SHAPES))
    parser.add_argument("--rows", type=int, nargs="+", default=list(ROWS))
    parser.add_argument("--variants", nargs="*", help="substrings of variant names to keep")
    parser.add_argument("--slow-rows", type=int, nargs="+", default=[1, 8], help="rows for the slow paths")
    parser.add_argument("--budget", type=float, default=0.3, help="seconds of timing per cell")
    parser.add_argument("--out", help="write the figures as JSON here")
    args = parser.parse_args()

    variants = [v for v in default_variants() if not args.variants or any(s in v.name for s in args.variants)]
    rng = np.random.default_rng(0)
    results = []
    print(
        f"onnxruntime {ort.__version__} onnx {onnx.__version__} {platform.processor() or platform.machine()}"
    )
    print(f"cpus {os.cpu_count()} load {os.getloadavg()}")
    for shape_name in args.shapes:
        k, n = SHAPES[shape_name]
        copies = 1 if k * n > 4_000_000 else 8
        weights = [rng.standard_normal((k, n)).astype(np.float32) * 0.05 for _ in range(copies)]
        inputs = {m: rng.standard_normal((m, k)).astype(np.float32) for m in args.rows}
        for variant in variants:
            try:
                model = build(variant, weights)
            except Exception as exc:  # noqa: BLE001 - report and continue with the other variants
                print(f"{shape_name} {variant.name}: cannot build: {exc}")
                continue
            for threads in args.threads:
                sess = session(model, threads)
                err = relative_error(sess, inputs[args.rows[0]], weights[0])
                for m in args.rows:
                    if variant.slow and m not in args.slow_rows:
                        continue
                    us = time_op(sess, inputs[m], copies, args.budget)
                    row = dict(
                        shape=shape_name,
                        k=k,
                        n=n,
                        m=m,
                        threads=threads,
                        variant=variant.name,
                        us=us,
                        rel_err=err,
                    )
                    results.append(row)
                    print(
                        f"{shape_name:8s} K={k:5d} N={n:6d} M={m:4d} t={threads} {variant.name:32s} {us:10.1f} us  err {err:.4f}",
                        flush=True,
                    )
                del sess
    print_ratio_table(results)
    if args.out:
        with open(args.out, "w", encoding="utf-8") as fh:
            json.dump(dict(ort=ort.__version__, results=results), fh, indent=1)


def print_ratio_table(results: list[dict]) -> None:
    """Markdown: time of each variant as a ratio to fp32 MatMul for the same cell."""
    base = {(r["shape"], r["m"], r["threads"]): r["us"] for r in results if r["variant"] == "fp32"}
    cells = sorted(
        {(r["shape"], r["m"], r["threads"]) for r in results},
        key=lambda c: (c[2], list(SHAPES).index(c[0]), c[1]),
    )
    names = list(dict.fromkeys(r["variant"] for r in results))
    by = {(r["shape"], r["m"], r["threads"], r["variant"]): r["us"] for r in results}
    print("\n| variant | " + " | ".join(f"{s} M={m} t={t}" for s, m, t in cells) + " |")
    print("|---|" + "---|" * len(cells))
    for name in names:
        vals = []
        for cell in cells:
            us = by.get((*cell, name))
            ref = base.get(cell)
            vals.append(
                "-" if us is None else (f"{us:.0f}us" if name == "fp32" or not ref else f"{us / ref:.2f}")
            )
        print(f"| {name} | " + " | ".join(vals) + " |")


if __name__ == "__main__":
    main()

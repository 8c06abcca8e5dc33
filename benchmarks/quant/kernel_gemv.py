"""Per-matrix time of ai.clika::GgufMatMul (fp32 and int8) against ORT's MatMulNBits.

Every variant reads the same GGUF weights: our op the blocks as stored, MatMulNBits
their exact transcoded form (``gguf_transcode``) at accuracy level 0 and 4, plus the
offsets that form needs (``Reshape + ReduceSum`` block sums times ``offsets^T``, added
as a Gemm's C). Each graph holds R distinct matrices (together larger than L3) all
fed the same activations, so every matrix comes from DRAM; rounds alternate the
variants; the figure is per matrix, best and median of rounds. GB/s counts the
GGUF's bytes (the weights a token must read). A read-bandwidth probe (ORT ReduceSum
over 256 MiB, same threads) runs between rounds in the same process.

    python benchmarks/quant/kernel_gemv.py --shape Q4_K:1536:8960 --rows 1 16
"""

from __future__ import annotations

import argparse
import statistics
import time

import gguf
import numpy as np
import onnxruntime as ort
from gguf.quants import dequantize
from onnx import TensorProto, helper, numpy_helper
from read_probe import probe_input, probe_session, read_gbs

from clika_quant.onnx_ops import MS_DOMAIN, matmul_nbits
from clika_runtime.kernels.gguf_layout import BLOCK_LAYOUT
from clika_runtime.kernels.library import register_kernels
from clika_runtime.kernels.op import DOMAIN, OP_TYPE, OP_VERSION, SPLIT16_TYPES, op_attributes
from clika_runtime.kernels.transcode import transcode

TARGET_BYTES = 96 << 20  # > 3x the 32 MiB L3
# Byte offsets of each block's fp16 fields (d, and dmin/m where present).
FP16_FIELDS = {"Q4_0": (0,), "Q4_1": (0, 2), "Q5_0": (0,), "Q5_1": (0, 2), "Q8_0": (0,)}
FP16_FIELDS |= {"Q4_K": (0, 2), "Q5_K": (0, 2), "Q6_K": (208,)}


def random_gguf(ggml_type: str, k: int, n: int, seed: int) -> np.ndarray:
    """Random blocks with small finite fp16 scales (every fp16 field of the block)."""
    weights, nbytes = BLOCK_LAYOUT[ggml_type]
    rng = np.random.default_rng(seed)
    blocks = rng.integers(0, 256, (n * k // weights, nbytes), dtype=np.uint8)
    for start in FP16_FIELDS[ggml_type]:
        scales = (rng.standard_normal(len(blocks)) * 0.01).astype(np.float16)
        blocks[:, start : start + 2] = scales.view(np.uint8).reshape(-1, 2)
    return blocks.reshape(n, -1)


def ours_graph(
    mats: list[np.ndarray], ggml_type: str, k: int, n: int, precision: str, fp32_form: str = "fma"
):
    nodes, inits = [], []
    attrs = op_attributes(ggml_type, k, n, precision, fp32_form=fp32_form)
    for i, b in enumerate(mats):
        inits.append(numpy_helper.from_array(b, f"w{i}"))
        nodes.append(helper.make_node(OP_TYPE, ["A", f"w{i}"], [f"Y{i}"], domain=DOMAIN, **attrs))
    return nodes, inits, [helper.make_opsetid(DOMAIN, OP_VERSION)]


def nbits_graph(mats: list[np.ndarray], ggml_type: str, k: int, n: int, level: int):
    nodes, inits = [], []
    for i, b in enumerate(mats):
        matrix = transcode(ggml_type, b, (n, k))
        if matrix.offsets is None:
            node, tensors = matmul_nbits(matrix, "A", f"Y{i}", f"w{i}", level)
            nodes += node
            inits += tensors
            continue
        node, tensors = matmul_nbits(matrix, "A", f"q{i}", f"w{i}", level)
        nodes += node
        inits += tensors
        sub = k // matrix.offsets.shape[1]
        inits.append(numpy_helper.from_array(np.ascontiguousarray(matrix.offsets.T), f"off{i}"))
        nodes.append(helper.make_node("Gemm", ["blocksum", f"off{i}", f"q{i}"], [f"Y{i}"]))
    if any(n.op_type == "Gemm" for n in nodes):
        inits.append(numpy_helper.from_array(np.array([-1, k // sub, sub], np.int64), "blocks_shape"))
        inits.append(numpy_helper.from_array(np.array([-1], np.int64), "last_axis"))
        nodes[:0] = [
            helper.make_node("Reshape", ["A", "blocks_shape"], ["A_blocks"]),
            helper.make_node("ReduceSum", ["A_blocks", "last_axis"], ["blocksum"], keepdims=0),
        ]
    return nodes, inits, [helper.make_opsetid(MS_DOMAIN, 1)]


def session(built, k: int, n: int, r: int, threads: int) -> ort.InferenceSession:
    nodes, inits, opsets = built
    graph = helper.make_graph(
        nodes,
        "bench",
        [helper.make_tensor_value_info("A", TensorProto.FLOAT, ["M", k])],
        [helper.make_tensor_value_info(f"Y{i}", TensorProto.FLOAT, ["M", n]) for i in range(r)],
        inits,
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17), *opsets], ir_version=8)
    options = ort.SessionOptions()
    options.intra_op_num_threads = threads
    options.inter_op_num_threads = 1
    options.add_session_config_entry("session.intra_op.allow_spinning", "0")  # shared machines
    register_kernels(options)
    return ort.InferenceSession(model.SerializeToString(), options, providers=["CPUExecutionProvider"])


def timed(sess: ort.InferenceSession, feeds: dict) -> float:
    start = time.perf_counter()
    sess.run(None, feeds)
    return time.perf_counter() - start


def bench_shape(spec: str, rows: list[int], rounds: int, threads: int) -> None:
    ggml_type, k, n = spec.split(":")[0], int(spec.split(":")[1]), int(spec.split(":")[2])
    gguf_bytes = n * k // BLOCK_LAYOUT[ggml_type][0] * BLOCK_LAYOUT[ggml_type][1]
    r = max(2, -(-TARGET_BYTES // gguf_bytes))
    mats = [random_gguf(ggml_type, k, n, seed) for seed in range(r)]
    variants = {
        "ours fp32": ours_graph(mats, ggml_type, k, n, "fp32"),
        # fp32_form "split16": the 16-bit split where the ISA has it (avx512_vnni), else fp32 FMA again
        **(
            {"ours split": ours_graph(mats, ggml_type, k, n, "fp32", "split16")}
            if ggml_type in SPLIT16_TYPES
            else {}
        ),
        "ours int8": ours_graph(mats, ggml_type, k, n, "int8"),
        "nbits L0": nbits_graph(mats, ggml_type, k, n, 0),
        "nbits L4": nbits_graph(mats, ggml_type, k, n, 4),
    }
    sessions = {name: session(built, k, n, r, threads) for name, built in variants.items()}
    probe = probe_session(threads)
    probe_x = probe_input()
    ref_w = dequantize(mats[0], gguf.GGMLQuantizationType[ggml_type]).reshape(n, k).astype(np.float64)
    print(
        f"\n{ggml_type} K={k} N={n}: {gguf_bytes / 2**20:.2f} MiB per matrix, {r} matrices, {threads} threads"
    )
    for m in rows:
        a = np.random.default_rng(m).standard_normal((m, k)).astype(np.float32)
        ref = a.astype(np.float64) @ ref_w.T
        errors = {}
        for name, sess in sessions.items():
            y = sess.run(["Y0"], {"A": a})[0]
            errors[name] = float(np.max(np.abs(y - ref)) / np.max(np.abs(ref)))
        times = {name: [] for name in sessions}
        probe_gbs = []
        for _ in range(rounds):
            for name, sess in sessions.items():
                times[name].append(timed(sess, {"A": a}) / r)
            probe_gbs.append(read_gbs(probe, probe_x))
        print(
            f"  M={m}: read probe best {max(probe_gbs):.1f} GB/s, median {statistics.median(probe_gbs):.1f} GB/s"
        )
        for name, ts in times.items():
            best, med = min(ts), statistics.median(ts)
            print(
                f"    {name:10s} best {best * 1e6:8.1f} us ({gguf_bytes / best / 1e9:5.1f} GB/s)"
                f"  median {med * 1e6:8.1f} us ({gguf_bytes / med / 1e9:5.1f} GB/s)  rel.err {errors[name]:.1e}"
            )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--shape", nargs="+", default=["Q4_K:1536:8960", "Q4_K:8960:1536", "Q6_K:8960:1536"])
    parser.add_argument("--rows", nargs="+", type=int, default=[1, 16])
    parser.add_argument("--rounds", type=int, default=7)
    parser.add_argument("--threads", type=int, default=2)
    args = parser.parse_args()
    for spec in args.shape:
        bench_shape(spec, args.rows, args.rounds, args.threads)


if __name__ == "__main__":
    main()

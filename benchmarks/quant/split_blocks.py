"""Time 5- and 6-bit GGUF blocks stored as 8-bit codes against the 4 + 2-bit split.

A Q5_0 or Q6_K matrix is exact as 8-bit MatMulNBits codes (8 bits a weight plus fp32
scales). Split into its high 4 bits and a 2-bit remainder (``clika_quant.nibbles``) it
takes 6 bits a weight plus the same scales, read by two MatMulNBits whose outputs are
summed. This times one op of each form at a model's shapes (the weights of ``copies``
distinct matrices stream from memory, as in a model), in alternating rounds, and prints
the bytes each reads; a 4-bit requantized copy (RTN, not exact) is the floor.

    python benchmarks/quant/split_blocks.py --threads 2 --rounds 5

Shapes: Qwen2.5-Coder-0.5B's Q5_0 gate+up (896 -> 9728, blocks of 32) and Q6_K down
(4864 -> 896, blocks of 16); Qwen2.5-Coder-1.5B's Q6_K down (8960 -> 1536).
"""

from __future__ import annotations

import argparse
import statistics

import numpy as np
import onnxruntime as ort
from onnx import TensorProto, helper

from clika_quant.graph_pass import Rewriter
from clika_quant.nibbles import split_nibbles
from clika_quant.onnx_ops import MS_DOMAIN
from clika_quant.rtn import quantize_rtn
from clika_runtime.kernels.blocks import BlockQuantized

SHAPES = {
    "q5_0 gate_up 0.5B": (896, 9728, 5, 32),
    "q6_k down 0.5B": (4864, 896, 6, 16),
    "q6_k down 1.5B": (8960, 1536, 6, 16),
}
FORMS = ("8-bit", "split 4+2", "4-bit requantized")


def gguf_like(k: int, n: int, width: int, block: int, seed: int) -> BlockQuantized:
    """A ``width``-bit symmetric block matrix as the transcoder writes it (8-bit codes)."""
    rng = np.random.default_rng(seed)
    half = 1 << (width - 1)
    codes = (rng.integers(-half, half, (n, k)) + 128).astype(np.uint8)
    scales = (rng.random((n, k // block)).astype(np.float16) * np.float16(0.01)).astype(np.float32)
    return BlockQuantized(codes, scales, None, 8, block, k)


def form_nodes(form: str, matrix: BlockQuantized, prefix: str, out: str):
    graph = helper.make_graph([], "g", [], [])
    rewriter = Rewriter(graph)
    if form == "8-bit":
        nodes = rewriter._nbits("A", out, matrix, prefix, prefix, 4)
    elif form == "split 4+2":
        nodes = rewriter.split_matmul("A", out, split_nibbles(matrix), prefix, prefix, 4)
    else:
        requant = quantize_rtn(matrix.dequantize(), 4, 32, "uint8")
        nodes = rewriter._nbits("A", out, requant, prefix, prefix, 4)
    return nodes, rewriter.new_initializers


def build(form: str, matrices: list[BlockQuantized]) -> bytes:
    nodes, inits, outputs = [], [], []
    for i, matrix in enumerate(matrices):
        got, got_inits = form_nodes(form, matrix, f"w{i}", f"Y{i}")
        nodes += got
        inits += got_inits
        outputs.append(helper.make_tensor_value_info(f"Y{i}", TensorProto.FLOAT, ["M", matrix.n]))
    k = matrices[0].k
    graph = helper.make_graph(
        nodes, "bench", [helper.make_tensor_value_info("A", TensorProto.FLOAT, ["M", k])], outputs, inits
    )
    model = helper.make_model(
        graph, opset_imports=[helper.make_opsetid("", 21), helper.make_opsetid(MS_DOMAIN, 1)]
    )
    return model.SerializeToString()


def weight_bytes(model: bytes) -> int:
    import onnx

    proto = onnx.load_from_string(model)
    return sum(
        np.prod(t.dims, dtype=np.int64) * (1 if t.data_type == 2 else 4) for t in proto.graph.initializer
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--copies", type=int, default=4)
    parser.add_argument("--runs", type=int, default=30, help="timed runs per round")
    args = parser.parse_args()
    opts = ort.SessionOptions()
    opts.intra_op_num_threads = args.threads
    opts.inter_op_num_threads = 1
    opts.add_session_config_entry("session.intra_op.allow_spinning", "0")
    for shape, (k, n, width, block) in SHAPES.items():
        matrices = [gguf_like(k, n, width, block, seed) for seed in range(args.copies)]
        a = np.random.default_rng(9).standard_normal((1, k)).astype(np.float32)
        sessions, sizes = {}, {}
        for form in FORMS:
            model = build(form, matrices)
            sizes[form] = weight_bytes(model) / args.copies
            sessions[form] = ort.InferenceSession(model, opts, providers=["CPUExecutionProvider"])
        reference = sessions["8-bit"].run(None, {"A": a})
        times: dict[str, list[float]] = {form: [] for form in FORMS}
        bindings = {}
        for form, sess in sessions.items():
            binding = sess.io_binding()
            binding.bind_ortvalue_input("A", ort.OrtValue.ortvalue_from_numpy(a))
            for out in sess.get_outputs():
                binding.bind_output(out.name, "cpu")
            sess.run_with_iobinding(binding)
            bindings[form] = binding
        import time

        for _ in range(args.rounds):
            for form, sess in sessions.items():
                start = time.perf_counter()
                for _ in range(args.runs):
                    sess.run_with_iobinding(bindings[form])
                times[form].append((time.perf_counter() - start) / args.runs / args.copies * 1e6)
        base = statistics.median(times["8-bit"])
        print(f"\n{shape}: K={k} N={n}, {width}-bit codes, blocks of {block}, M=1, {args.threads} threads")
        print("| form | MB per matrix | us per op (median) | x 8-bit time | max |out - 8-bit out| / |out| |")
        print("|---|---:|---:|---:|---:|")
        for form in FORMS:
            got = sessions[form].run(None, {"A": a})
            err = max(
                float(np.abs(g - r).max() / np.abs(r).max()) for g, r in zip(got, reference, strict=True)
            )
            med = statistics.median(times[form])
            print(f"| {form} | {sizes[form] / 1e6:.2f} | {med:.1f} | {med / base:.2f} | {err:.2e} |")


if __name__ == "__main__":
    main()

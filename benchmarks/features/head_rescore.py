"""The output head's re-score: the kernel library's HeadRescore against the chain it replaces
(TopK -> GatherBlockQuantized -> Reshape * Unsqueeze -> ReduceSum -> ScatterElements), in
alternating rounds, one process.

Both graphs take the same approximate logits and activations and read the same 8-bit rows
(random codes and scales; the rows picked differ per token, as a real head's do). Shapes:
SmolLM2-135M's tied head (49152 x 576, 32-weight blocks) and Qwen2.5-Coder's (151936 x 1536,
16-weight groups), 256 re-scored a token.

    python benchmarks/features/head_rescore.py --tokens 1 8 --rounds 5
"""

from __future__ import annotations

import argparse
import statistics
import time

import numpy as np
import onnx
import onnxruntime as ort
from onnx import TensorProto, helper, numpy_helper

from clika_export.graph.head_rescore import replace_rescore
from clika_runtime.kernels.library import kernel_status, register_kernels
from clika_runtime.kernels.op import DOMAIN, OP_VERSION

HEADS = {"smollm2": (49152, 576, 32), "qwen2.5": (151936, 1536, 16)}


def chain(n: int, k: int, block: int, top_k: int) -> onnx.ModelProto:
    rng = np.random.default_rng(0)
    inits = [
        numpy_helper.from_array(rng.integers(0, 256, (n, k // block, block)).astype(np.uint8), "codes"),
        numpy_helper.from_array((rng.random((n, k // block, 1)) * 0.02).astype(np.float32), "scales"),
    ]
    for name, value in {"k": [top_k], "shape": [0, 0, k], "axis1": [1], "axis2": [2]}.items():
        inits.append(numpy_helper.from_array(np.array(value, np.int64), name))
    nodes = [
        helper.make_node("TopK", ["approx", "k"], ["top", "ids"], axis=-1),
        helper.make_node("GatherBlockQuantized", ["codes", "ids", "scales"], ["rows"], domain="com.microsoft",
                         bits=8, block_size=block, gather_axis=0, quantize_axis=2),
        helper.make_node("Reshape", ["rows", "shape"], ["rows3"]),
        helper.make_node("Unsqueeze", ["x", "axis1"], ["x3"]),
        helper.make_node("Mul", ["rows3", "x3"], ["products"]),
        helper.make_node("ReduceSum", ["products", "axis2"], ["sums"], keepdims=0),
        helper.make_node("ScatterElements", ["approx", "ids", "sums"], ["logits"], axis=1),
    ]  # fmt: skip
    f = TensorProto.FLOAT
    graph = helper.make_graph(
        nodes,
        "head",
        [
            helper.make_tensor_value_info("approx", f, [None, n]),
            helper.make_tensor_value_info("x", f, [None, k]),
        ],
        [helper.make_tensor_value_info("logits", f, [None, n])],
        inits,
    )
    return helper.make_model(
        graph, opset_imports=[helper.make_opsetid("", 17), helper.make_opsetid("com.microsoft", 1)]
    )


def fused(model: onnx.ModelProto) -> onnx.ModelProto:
    model = onnx.ModelProto.FromString(model.SerializeToString())
    assert replace_rescore(model.graph) == 1
    model.opset_import.append(helper.make_opsetid(DOMAIN, OP_VERSION))
    return model


def session(model: onnx.ModelProto, threads: int) -> ort.InferenceSession:
    options = ort.SessionOptions()
    options.intra_op_num_threads = threads
    register_kernels(options)
    return ort.InferenceSession(model.SerializeToString(), options, providers=["CPUExecutionProvider"])


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--heads", nargs="+", default=list(HEADS), choices=list(HEADS))
    ap.add_argument("--tokens", nargs="+", type=int, default=[1, 8])
    ap.add_argument("--top-k", type=int, default=256)
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--runs", type=int, default=20, help="runs of each graph a round")
    ap.add_argument("--threads", type=int, default=2)
    args = ap.parse_args()
    status = kernel_status()
    if not status.available:
        raise SystemExit(f"the kernel library is not usable here: {status.reason}")
    print(f"kernels: {status.describe()}; {args.threads} threads; best / median of rounds, us a call")
    for head in args.heads:
        n, k, block = HEADS[head]
        base = chain(n, k, block, args.top_k)
        sessions = {"HeadRescore": session(fused(base), args.threads), "chain": session(base, args.threads)}
        for tokens in args.tokens:
            rng = np.random.default_rng(tokens)
            feeds = {
                "approx": rng.standard_normal((tokens, n)).astype(np.float32),
                "x": rng.standard_normal((tokens, k)).astype(np.float32),
            }
            times: dict[str, list[float]] = {name: [] for name in sessions}
            for _ in range(args.rounds):
                for name, s in sessions.items():
                    s.run(None, feeds)
                    start = time.perf_counter()
                    for _ in range(args.runs):
                        s.run(None, feeds)
                    times[name].append((time.perf_counter() - start) / args.runs * 1e6)
            line = ", ".join(f"{name} {min(t):.0f} / {statistics.median(t):.0f}" for name, t in times.items())
            print(f"{head} {n}x{k}, {tokens} token(s): {line}")


if __name__ == "__main__":
    main()

"""One layer's attention: the kernel library's StepAttention against the step it replaces
(grid Gather -> GroupQueryAttention -> ungrid GatherND), in alternating rounds, one process.

Both graphs take the same packed qkv, cache and step tables; the caches are bound as input
and output, as the engine binds them, so neither copies its cache. Shapes default to
SmolLM2-135M's (9 heads, 3 KV heads, head_dim 64).

    python benchmarks/features/step_attention.py --past 200 1000 --rows 1 8 --rounds 5
    python benchmarks/features/step_attention.py --prompt 511 --rounds 3
"""

from __future__ import annotations

import argparse
import statistics
import time

import numpy as np
import onnxruntime as ort
from onnx import TensorProto, helper

from clika_runtime.kernels.attention_op import ATTENTION_OP, MS_DOMAIN
from clika_runtime.kernels.library import kernel_status, register_kernels
from clika_runtime.kernels.op import DOMAIN

POSITIONS = 4096


def graphs(heads: int, kv_heads: int, head_dim: int, capacity: int) -> dict[str, bytes]:
    f, i32, i64 = TensorProto.FLOAT, TensorProto.INT32, TensorProto.INT64
    width, cache = (heads + 2 * kv_heads) * head_dim, ["B", kv_heads, capacity, head_dim]
    common = [
        helper.make_tensor_value_info("qkv", f, ["T", width]),
        helper.make_tensor_value_info("token_cell", i64, ["T", 2]),
        helper.make_tensor_value_info("query_seqlens", i32, ["B"]),
        helper.make_tensor_value_info("seqlens_k", i32, ["B"]),
        helper.make_tensor_value_info("past_key", f, cache),
        helper.make_tensor_value_info("past_value", f, cache),
        helper.make_tensor_value_info("cos", f, [POSITIONS, head_dim // 2]),
        helper.make_tensor_value_info("sin", f, [POSITIONS, head_dim // 2]),
    ]
    grid = [
        helper.make_tensor_value_info("grid_index", i64, ["B", "S"]),
        helper.make_tensor_value_info("total_sequence_length", i32, []),
    ]
    outputs = [
        helper.make_tensor_value_info("out", f, ["T", heads * head_dim]),
        helper.make_tensor_value_info("present_key", f, cache),
        helper.make_tensor_value_info("present_value", f, cache),
    ]
    heads_attrs = {"num_heads": heads, "kv_num_heads": kv_heads}
    ours = helper.make_node(
        ATTENTION_OP,
        ["qkv", "token_cell", "query_seqlens", "seqlens_k", "past_key", "past_value", "cos", "sin"],
        ["out", "present_key", "present_value"],
        domain=DOMAIN,
        **heads_attrs,
    )
    gqa_inputs = [
        "grid",
        "",
        "",
        "past_key",
        "past_value",
        "seqlens_k",
        "total_sequence_length",
        "cos",
        "sin",
    ]
    theirs = [
        helper.make_node("Gather", ["qkv", "grid_index"], ["grid"], axis=0),
        helper.make_node(
            "GroupQueryAttention",
            [*gqa_inputs, *[""] * 7, "query_seqlens"],
            ["context", "present_key", "present_value"],
            domain=MS_DOMAIN,
            do_rotary=1,
            rotary_interleaved=0,
            **heads_attrs,
        ),
        helper.make_node("GatherND", ["context", "token_cell"], ["out"], batch_dims=0),
    ]

    def model(nodes, inputs, domain):
        graph = helper.make_graph(nodes, "attention", inputs, outputs)
        opsets = [helper.make_opsetid("", 17), helper.make_opsetid(domain, 1)]
        return helper.make_model(graph, opset_imports=opsets).SerializeToString()

    return {
        "StepAttention": model([ours], common, DOMAIN),
        "GQA + grid": model(theirs, common + grid, MS_DOMAIN),
    }


def feeds(rows: int, new: int, past: int, heads: int, kv_heads: int, head_dim: int, capacity: int) -> dict:
    rng = np.random.default_rng(0)
    tokens = rows * new
    half = head_dim // 2
    angles = np.arange(POSITIONS)[:, None] * (10000.0 ** (-np.arange(half) / half))[None]
    return {
        "qkv": rng.standard_normal((tokens, (heads + 2 * kv_heads) * head_dim)).astype(np.float32),
        "token_cell": np.array([(r, c) for r in range(rows) for c in range(new)], np.int64),
        "query_seqlens": np.full(rows, new, np.int32),
        "seqlens_k": np.full(rows, past + new - 1, np.int32),
        "past_key": rng.standard_normal((rows, kv_heads, capacity, head_dim)).astype(np.float32),
        "past_value": rng.standard_normal((rows, kv_heads, capacity, head_dim)).astype(np.float32),
        "cos": np.cos(angles).astype(np.float32),
        "sin": np.sin(angles).astype(np.float32),
        "grid_index": np.arange(tokens, dtype=np.int64).reshape(rows, new),
        "total_sequence_length": np.array(past + new, np.int32),
    }


def bound_run(session: ort.InferenceSession, f: dict) -> ort.IOBinding:
    binding = session.io_binding()
    names = {i.name for i in session.get_inputs()}
    for name in names - {"past_key", "past_value"}:
        binding.bind_cpu_input(name, f[name])
    for past, present in (("past_key", "present_key"), ("past_value", "present_value")):
        value = ort.OrtValue.ortvalue_from_numpy(f[past].copy())
        binding.bind_ortvalue_input(past, value)
        binding.bind_ortvalue_output(present, value)
    binding.bind_output("out")
    return binding


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument(
        "--past", type=int, nargs="+", default=[200, 1000], help="cached tokens a decode row has"
    )
    parser.add_argument("--rows", type=int, nargs="+", default=[1, 8], help="decode rows a step")
    parser.add_argument("--prompt", type=int, nargs="*", default=[], help="also a prompt of this many tokens")
    parser.add_argument(
        "--heads", type=int, nargs=3, default=[9, 3, 64], metavar=("HEADS", "KV_HEADS", "DIM")
    )
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--runs", type=int, default=200, help="runs a round (a prompt: a tenth)")
    args = parser.parse_args()
    status = kernel_status()
    if not status.available:
        raise SystemExit(f"the kernel library is not usable: {status.reason}")
    heads, kv_heads, head_dim = args.heads
    shapes = [(rows, 1, past) for past in args.past for rows in args.rows] + [(1, n, 0) for n in args.prompt]
    print(
        f"{heads} heads, {kv_heads} KV heads, head_dim {head_dim}, {args.threads} threads, {status.describe()}"
    )
    for rows, new, past in shapes:
        capacity = past + new + 16
        models = graphs(heads, kv_heads, head_dim, capacity)
        options = ort.SessionOptions()
        options.intra_op_num_threads = args.threads
        register_kernels(options)
        sessions = {
            name: ort.InferenceSession(m, options, providers=["CPUExecutionProvider"])
            for name, m in models.items()
        }
        f = feeds(rows, new, past, heads, kv_heads, head_dim, capacity)
        bindings = {name: bound_run(s, f) for name, s in sessions.items()}
        runs = max(3, args.runs // 10) if new > 1 else args.runs
        times: dict[str, list[float]] = {name: [] for name in sessions}
        for _ in range(args.rounds):
            for name, session in sessions.items():
                session.run_with_iobinding(bindings[name])
                start = time.perf_counter()
                for _ in range(runs):
                    session.run_with_iobinding(bindings[name])
                times[name].append((time.perf_counter() - start) / runs * 1e6)
        label = f"{rows} row(s) x {new} token(s) after {past}"
        cells = "  ".join(f"{n} {min(t):,.0f} / {statistics.median(t):,.0f} us" for n, t in times.items())
        ratio = statistics.median(times["GQA + grid"]) / statistics.median(times["StepAttention"])
        print(f"  {label:34} {cells}   (best / median; GQA over ours {ratio:.2f}x)")


if __name__ == "__main__":
    main()

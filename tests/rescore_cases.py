"""Head re-score cases: the quantizer's TopK .. ScatterElements chain on random heads, that
chain made one HeadRescore by the exporter's pass, and their float64 reference."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import onnx
import onnxruntime as ort
from onnx import TensorProto, helper, numpy_helper

from clika_export.graph.head_rescore import replace_rescore
from clika_runtime.kernels.library import register_kernels
from clika_runtime.kernels.op import DOMAIN


@dataclass(frozen=True)
class Head:
    n: int  # vocabulary
    blocks: int
    block: int
    top_k: int
    tokens: int
    zero_points: bool = False
    seed: int = 0
    ties: bool = False  # approx logits in a few distinct values: the k-th best is a tie
    nans: bool = False  # some approx logits NaN

    @property
    def k(self) -> int:
        return self.blocks * self.block


HEADS = [
    Head(n=1000, blocks=9, block=32, top_k=16, tokens=1),
    Head(n=1000, blocks=9, block=32, top_k=16, tokens=8, seed=1),
    Head(n=4099, blocks=12, block=16, top_k=256, tokens=3, seed=2),  # Q6_K's 16-weight groups
    Head(n=300, blocks=4, block=32, top_k=256, tokens=2, zero_points=True, seed=3),  # few spans
    Head(n=50, blocks=2, block=16, top_k=64, tokens=2, seed=4),  # top_k > n: every logit
    Head(n=2000, blocks=3, block=64, top_k=40, tokens=4, ties=True, seed=5),
    Head(n=2000, blocks=3, block=32, top_k=40, tokens=2, nans=True, seed=6),
]


def weights(h: Head) -> dict[str, np.ndarray]:
    rng = np.random.default_rng(h.seed)
    out = {
        "codes": rng.integers(0, 256, (h.n, h.blocks, h.block)).astype(np.uint8),
        "scales": (rng.random((h.n, h.blocks, 1)) * 0.02 + 1e-4).astype(np.float32),
    }
    if h.zero_points:
        out["zero_points"] = rng.integers(100, 156, (h.n, h.blocks, 1)).astype(np.uint8)
    return out


def feeds(h: Head) -> dict[str, np.ndarray]:
    rng = np.random.default_rng(h.seed + 100)
    approx = rng.standard_normal((h.tokens, h.n)).astype(np.float32)
    if h.ties:
        approx = np.round(approx * 2).astype(np.float32)  # a handful of values, many equal
    if h.nans:
        approx[:, ::7] = np.nan
    return {"approx": approx, "x": rng.standard_normal((h.tokens, h.k)).astype(np.float32)}


def chain_model(h: Head) -> onnx.ModelProto:
    """The quantizer's re-score chain (clika_quant.graph_pass._rescore) on ``h``'s head."""
    w = weights(h)
    inits = [numpy_helper.from_array(v, name) for name, v in w.items()]
    consts = {"k": [min(h.top_k, h.n)], "shape": [0, 0, h.k], "axis1": [1], "axis2": [2]}
    inits += [numpy_helper.from_array(np.array(v, np.int64), name) for name, v in consts.items()]
    gather_inputs = ["codes", "ids", "scales"] + (["zero_points"] if h.zero_points else [])
    nodes = [
        helper.make_node("TopK", ["approx", "k"], ["top", "ids"], name="/model/lm_head/Rescore/TopK", axis=-1),
        helper.make_node(
            "GatherBlockQuantized", gather_inputs, ["rows"], name="/model/lm_head/Rescore/GatherBlockQuantized",
            domain="com.microsoft", bits=8, block_size=h.block, gather_axis=0, quantize_axis=2,
        ),
        helper.make_node("Reshape", ["rows", "shape"], ["rows3"], name="/model/lm_head/Rescore/Reshape"),
        helper.make_node("Unsqueeze", ["x", "axis1"], ["x3"], name="/model/lm_head/Rescore/Unsqueeze"),
        helper.make_node("Mul", ["rows3", "x3"], ["products"], name="/model/lm_head/Rescore/Mul"),
        helper.make_node("ReduceSum", ["products", "axis2"], ["sums"], name="/model/lm_head/Rescore/ReduceSum",
                         keepdims=0),
        helper.make_node("ScatterElements", ["approx", "ids", "sums"], ["logits"],
                         name="/model/lm_head/Rescore/Scatter", axis=1),
    ]  # fmt: skip
    graph = helper.make_graph(
        nodes,
        "head",
        [
            helper.make_tensor_value_info("approx", TensorProto.FLOAT, [None, h.n]),
            helper.make_tensor_value_info("x", TensorProto.FLOAT, [None, h.k]),
        ],
        [helper.make_tensor_value_info("logits", TensorProto.FLOAT, [None, h.n])],
        inits,
    )
    opsets = [helper.make_opsetid("", 17), helper.make_opsetid("com.microsoft", 1)]
    return helper.make_model(graph, opset_imports=opsets)


def rescore_model(h: Head) -> onnx.ModelProto:
    """``chain_model`` with the exporter's pass applied: one HeadRescore."""
    model = chain_model(h)
    assert replace_rescore(model.graph) == 1
    model.opset_import.append(helper.make_opsetid(DOMAIN, 1))
    return model


def session(model: onnx.ModelProto, threads: int = 2) -> ort.InferenceSession:
    options = ort.SessionOptions()
    options.intra_op_num_threads = threads
    register_kernels(options)
    return ort.InferenceSession(model.SerializeToString(), options, providers=["CPUExecutionProvider"])


def best_ids(approx_row: np.ndarray, count: int) -> np.ndarray:
    """The ``count`` best of a row as the op ranks them: larger first, a NaN lowest, ties to the lower index."""
    keys = np.where(np.isnan(approx_row), -np.inf, approx_row)
    order = np.lexsort((np.arange(keys.size), -keys))
    return np.sort(order[:count])


def reference(h: Head, f: dict[str, np.ndarray]) -> list[tuple[np.ndarray, np.ndarray]]:
    """Per token: the re-scored ids and their logits in float64."""
    w = weights(h)
    zero = w["zero_points"].astype(np.float64) if h.zero_points else 128.0
    dequant = ((w["codes"].astype(np.float64) - zero) * w["scales"].astype(np.float64)).reshape(h.n, h.k)
    out = []
    for t in range(h.tokens):
        ids = best_ids(f["approx"][t], min(h.top_k, h.n))
        out.append((ids, dequant[ids] @ f["x"][t].astype(np.float64)))
    return out


def run_cases(heads: list[Head]) -> list[np.ndarray]:
    """Each head's HeadRescore output on its feeds (in this process's ISA)."""
    return [session(rescore_model(h)).run(None, feeds(h))[0] for h in heads]

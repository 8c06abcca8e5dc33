"""ONNX building blocks shared by the vision towers (ViT / SigLIP style).

Weights are checkpoint ``[out, in]`` matrices, stored transposed (``[in, out]``)
for MatMul, as the text graphs store theirs.
"""

from __future__ import annotations

from collections.abc import Callable

import numpy as np

from clika_export.graph.builder import GraphBuilder

Weights = Callable[[str], np.ndarray]


def linear(g: GraphBuilder, x: str, weights: Weights, name: str, *, bias: bool = True) -> str:
    """``x @ W.T + b`` for the checkpoint's ``{name}.weight`` / ``{name}.bias``."""
    matrix = np.ascontiguousarray(weights(f"{name}.weight").T)
    out = g.op("MatMul", [x, g.weight(f"{name}.weight", matrix)], label=f"{_leaf(name)}/MatMul")
    if bias:
        out = g.op(
            "Add", [out, g.weight(f"{name}.bias", weights(f"{name}.bias"))], label=f"{_leaf(name)}/Add"
        )
    return out


def layer_norm(g: GraphBuilder, x: str, weights: Weights, name: str, eps: float) -> str:
    scale, shift = (g.weight(f"{name}.{p}", weights(f"{name}.{p}")) for p in ("weight", "bias"))
    return g.op(
        "LayerNormalization", [x, scale, shift], label=f"{_leaf(name)}/LayerNorm", axis=-1, epsilon=eps
    )


def activation(g: GraphBuilder, x: str, kind: str, label: str) -> str:
    """The checkpoint's ``hidden_act`` (the ones SigLIP and Qwen2-VL towers use)."""
    if kind in ("gelu_pytorch_tanh", "gelu_new", "gelu_fast"):
        return g.op("Gelu", [x], label=f"{label}/Gelu", approximate="tanh")
    if kind == "gelu":
        return g.op("Gelu", [x], label=f"{label}/Gelu")
    if kind == "quick_gelu":
        gate = g.op(
            "Mul",
            [x, g.constant(g.node_name(f"{label}/quick_gelu_scale"), np.float32(1.702))],
            label=f"{label}/Scale",
        )
        return g.op("Mul", [x, g.op("Sigmoid", [gate], label=f"{label}/Sigmoid")], label=f"{label}/Mul")
    raise ValueError(f"vision activation {kind!r} is not supported")


def split_heads(g: GraphBuilder, x: str, heads: int, head_dim: int, label: str) -> str:
    """[B, L, heads * head_dim] -> [B, heads, L, head_dim]."""
    shaped = g.op(
        "Reshape",
        [x, g.constant(g.node_name(f"{label}/heads_shape"), [0, 0, heads, head_dim])],
        label=f"{label}/Reshape",
    )
    return g.op("Transpose", [shaped], label=f"{label}/Transpose", perm=[0, 2, 1, 3])


def attention(g: GraphBuilder, q: str, k: str, v: str, head_dim: int, bias: str | None, label: str) -> str:
    """Softmax attention over [B, heads, L, head_dim]; ``bias`` [L, L] is added to the scores."""
    scale = g.constant(g.node_name(f"{label}/scale"), np.float32(head_dim**-0.5))
    kt = g.op("Transpose", [k], label=f"{label}/KT", perm=[0, 1, 3, 2])
    scores = g.op("Mul", [g.op("MatMul", [q, kt], label=f"{label}/QK"), scale], label=f"{label}/Scale")
    if bias is not None:
        scores = g.op("Add", [scores, bias], label=f"{label}/Bias")
    probs = g.op("Softmax", [scores], label=f"{label}/Softmax", axis=-1)
    context = g.op("MatMul", [probs, v], label=f"{label}/PV")
    merged = g.op("Transpose", [context], label=f"{label}/Merge", perm=[0, 2, 1, 3])
    return g.op(
        "Reshape",
        [merged, g.constant(g.node_name(f"{label}/merged_shape"), [0, 0, -1])],
        label=f"{label}/Flatten",
    )


def _leaf(name: str) -> str:
    return name.rsplit(".", 1)[-1]

"""The contract of the kernel library's head op, ``ai.clika::HeadRescore`` (since version 1).

It is the output head's re-score chain in one node: the approximate logits with each
token's ``top_k`` best recomputed in fp32 from the head's 8-bit rows (the bytes the token
table's GatherBlockQuantized reads)::

    HeadRescore(approx [T, N], x [T, K], codes uint8 [N, blocks, block],
                scales [N, blocks, 1][, zero_points uint8 [N, blocks, 1]]) -> logits [T, N]

Attributes ``top_k`` and ``block_size`` (the codes' last dimension, a multiple of 16).

The chain it replaces gathered the best rows dequantized (``T * top_k * K`` floats written
and read back) and scattered their dots into a copy of the logits; the op reads the 8-bit
rows in place. A tie at the k-th best goes to the lower index, as TopK gives it. Where the
kernel library is not loaded, each node becomes the chain again (``chain_form``).
"""

from __future__ import annotations

import numpy as np

from clika_runtime.kernels import proto_wire as w
from clika_runtime.kernels.node_expansion import MS_DOMAIN, expand_nodes, model_expanded
from clika_runtime.kernels.onnx_wire import Node, decode_node, inline_tensor
from clika_runtime.kernels.op import DOMAIN

RESCORE_OP = "HeadRescore"
# The chain's constants, one set per node (named after it): TopK's k, the gathered rows'
# shape [T, k, K] (-1: K = blocks * block), and the axes of the activations' broadcast and sum.
_CONSTANTS = ("k", "rows_shape", "x_axis", "sum_axis")


def chain_form(node: Node) -> tuple[list[Node], list[bytes]]:
    """The TopK .. ScatterElements nodes that compute ``node``, and their constant initializers."""
    approx, x, codes, scales, *zero_points = node.inputs
    scope = node.name.rsplit("/", 1)[0] if "/" in node.name else node.name
    const = {c: f"{scope}/Rescore/{c}" for c in _CONSTANTS}
    values = {
        "k": np.array([int(node.attributes["top_k"])], np.int64),
        "rows_shape": np.array([0, 0, -1], np.int64),
        "x_axis": np.array([1], np.int64),
        "sum_axis": np.array([2], np.int64),
    }
    out = {
        s: f"{scope}/Rescore/{s}/output_0"
        for s in ("TopK", "Rows", "Reshape", "Unsqueeze", "Mul", "ReduceSum")
    }
    ids = f"{scope}/Rescore/TopK/output_1"
    gather_inputs = [codes, ids, scales, *[z for z in zero_points if z]]
    nodes = [
        Node("TopK", [approx, const["k"]], [out["TopK"], ids], f"{scope}/Rescore/TopK", "", {"axis": -1}),
        Node(
            "GatherBlockQuantized", gather_inputs, [out["Rows"]], f"{scope}/Rescore/GatherBlockQuantized", MS_DOMAIN,
            {"bits": 8, "gather_axis": 0, "quantize_axis": 2, "block_size": int(node.attributes["block_size"])},
        ),
        Node("Reshape", [out["Rows"], const["rows_shape"]], [out["Reshape"]], f"{scope}/Rescore/Reshape"),
        Node("Unsqueeze", [x, const["x_axis"]], [out["Unsqueeze"]], f"{scope}/Rescore/Unsqueeze"),
        Node("Mul", [out["Reshape"], out["Unsqueeze"]], [out["Mul"]], f"{scope}/Rescore/Mul"),
        Node(
            "ReduceSum", [out["Mul"], const["sum_axis"]], [out["ReduceSum"]], f"{scope}/Rescore/ReduceSum", "",
            {"keepdims": 0},
        ),
        Node(
            "ScatterElements", [approx, ids, out["ReduceSum"]], [node.outputs[0]], f"{scope}/Rescore/Scatter", "",
            {"axis": 1},
        ),
    ]  # fmt: skip
    return nodes, [inline_tensor(const[c], values[c]) for c in _CONSTANTS]


def is_head_rescore(payload: bytes) -> Node | None:
    """The node a graph's node field holds, where it is a HeadRescore (a byte search first)."""
    if RESCORE_OP.encode() not in payload:
        return None
    node = decode_node(payload)
    return node if node.op_type == RESCORE_OP and node.domain == DOMAIN else None


def rescore_to_chain(graph_fields: list[w.Field]) -> tuple[list[w.Field], int]:
    """A graph's fields with every HeadRescore node in its chain form, and how many."""
    return expand_nodes(graph_fields, is_head_rescore, chain_form)


def model_with_chain(model_bytes: bytes) -> bytes:
    """A serialized model with its HeadRescore nodes in chain form (the library's other ops kept)."""
    return model_expanded(model_bytes, rescore_to_chain)

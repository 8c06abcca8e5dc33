"""A gated MLP's activation folded into the GgufMatMul that computes its gate and up rows.

The float graph computes ``silu(gate) * up`` after one matrix of both::

    x -> GgufMatMul(W_gate_up)[T, 2I] -> Split -> gate, up;  gate * Sigmoid(gate) * up -> [T, I]

Each of those four nodes is a pass over the products and a dispatch in every layer's step
(0.5 ms of a 6 ms SmolLM2-135M decode step profiled; the step's median moved 1-5% unprofiled,
kernels/README.md "The swiglu activation"). With ``activation="swiglu"`` the op
writes ``silu(gate) * up`` itself while both halves are in cache (``clika_runtime.kernels.op``).
Where the kernel library is not loaded the runtime writes the four nodes back
(``clika_runtime.kernels.fallback_graph``).
"""

from __future__ import annotations

from dataclasses import dataclass

import onnx
from onnx import helper, numpy_helper

from clika_runtime.kernels.gguf_matmul import DOMAIN, OP_TYPE


@dataclass(frozen=True)
class _Gated:
    matmul: onnx.NodeProto
    removed: tuple[onnx.NodeProto, ...]  # Split, Sigmoid, the silu Mul, the gating Mul
    out: str


def fuse_swiglu(graph: onnx.GraphProto) -> list[str]:
    """Fold every ``GgufMatMul -> Split -> x * Sigmoid(x) * up`` chain of ``graph`` (in place);
    returns the names of the GgufMatMul nodes that now apply the activation."""
    consumers: dict[str, list[onnx.NodeProto]] = {}
    for node in graph.node:
        for name in node.input:
            consumers.setdefault(name, []).append(node)
    kept_names = {o.name for o in graph.output}
    # Split sizes given as an input: only the int64 initializers can be one (read when asked).
    sizes = {t.name: t for t in graph.initializer if t.data_type == onnx.TensorProto.INT64}
    chains = [
        chain
        for node in graph.node
        if node.op_type == OP_TYPE and node.domain == DOMAIN
        for chain in [_gated_chain(node, consumers, kept_names, sizes)]
        if chain is not None
    ]
    removed = {id(n) for chain in chains for n in chain.removed}
    for chain in chains:
        chain.matmul.output[0] = chain.out
        chain.matmul.attribute.append(helper.make_attribute("activation", "swiglu"))
    kept = [n for n in graph.node if id(n) not in removed]
    del graph.node[:]
    graph.node.extend(kept)
    return [chain.matmul.name for chain in chains]


def _only(nodes: list[onnx.NodeProto], op_type: str) -> onnx.NodeProto | None:
    return nodes[0] if len(nodes) == 1 and nodes[0].op_type == op_type and not nodes[0].domain else None


def _attrs(node: onnx.NodeProto) -> dict:
    return {a.name: helper.get_attribute_value(a) for a in node.attribute}


def _gated_chain(matmul, consumers, kept_names, sizes) -> _Gated | None:
    """The chain after ``matmul`` when it is exactly the gated activation, else None."""
    attrs = _attrs(matmul)
    products = matmul.output[0]
    if attrs.get("activation", b"none") not in (b"none", "none") or products in kept_names:
        return None
    split = _only(consumers.get(products, []), "Split")
    if split is None or len(split.output) != 2 or not _even_last_axis_split(split, int(attrs["N"]), sizes):
        return None
    gate, up = split.output
    if gate in kept_names or up in kept_names:
        return None
    gate_users = consumers.get(gate, [])
    sigmoid = next((n for n in gate_users if n.op_type == "Sigmoid" and not n.domain), None)
    if sigmoid is None or len(gate_users) != 2:
        return None
    silu = next(
        (n for n in gate_users if n.op_type == "Mul" and set(n.input) == {gate, sigmoid.output[0]}), None
    )
    if silu is None:
        return None
    if _only(consumers.get(sigmoid.output[0], []), "Mul") is not silu or silu.output[0] in kept_names:
        return None
    gating = _only(consumers.get(silu.output[0], []), "Mul")
    if gating is None or set(gating.input) != {silu.output[0], up} or consumers.get(up, []) != [gating]:
        return None
    return _Gated(matmul, (split, sigmoid, silu, gating), gating.output[0])


def _even_last_axis_split(split: onnx.NodeProto, n: int, sizes: dict) -> bool:
    attrs = _attrs(split)
    if attrs.get("axis", 0) != -1:
        return False
    if len(split.input) > 1 and split.input[1]:
        given = sizes.get(split.input[1])
        return given is not None and numpy_helper.to_array(given).tolist() == [n // 2, n // 2]
    return attrs.get("num_outputs") == 2 and n % 2 == 0

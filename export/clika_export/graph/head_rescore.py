"""The output head's re-score chain as the kernel library's ``HeadRescore`` node.

The quantizer writes the head as a cheap scan whose best ``k`` logits per token are
recomputed in fp32 (``clika_quant.graph_pass``)::

    approx -> TopK(k) -> ids -> GatherBlockQuantized(codes, ids, scales[, zero points])
    Reshape * Unsqueeze(x) -> ReduceSum -> ScatterElements(approx, ids) -> logits

That gathers ``T * k * K`` floats and reads them back; the op (``clika_runtime.kernels.rescore_op``)
takes the same inputs and reads the 8-bit rows in place. Measured on SmolLM2-135M's default
(``benchmarks/peers/decode_profile.py --profile``): the chain's nodes took 1.55 ms of a
batch-of-8 step. Only the plain 8-bit form is replaced (not a head stored as split codes or
with float offsets, whose rows need more nodes); where the library does not run, the
runtime puts the chain back at load.
"""

from __future__ import annotations

from pathlib import Path

import onnx
from onnx import helper, numpy_helper

from clika_export.graph.kernel_nodes import edit_continuous_in_place, swap_nodes
from clika_runtime.kernels.op import DOMAIN
from clika_runtime.kernels.rescore_op import RESCORE_OP


def add_head_rescore_in_place(folder: Path) -> int:
    """Give the folder's continuous graph a HeadRescore where its head re-scores in the
    plain form; returns how many (0 or 1)."""
    return edit_continuous_in_place(folder, lambda graph, _: replace_rescore(graph))


class _Graph:
    """Producers, consumers and constants of a graph, by tensor name."""

    def __init__(self, graph: onnx.GraphProto) -> None:
        self.producer = {out: n for n in graph.node for out in n.output}
        self.uses: dict[str, int] = {}
        for n in graph.node:
            for name in n.input:
                self.uses[name] = self.uses.get(name, 0) + 1
        for out in graph.output:
            self.uses[out.name] = self.uses.get(out.name, 0) + 1
        self.initializers = {i.name: i for i in graph.initializer}

    def made_by(self, tensor: str, op_type: str, domain: str = "") -> onnx.NodeProto | None:
        node = self.producer.get(tensor)
        return node if node is not None and node.op_type == op_type and node.domain == domain else None

    def dims(self, name: str, data_type: int) -> list[int] | None:
        """An initializer's shape, where it is one of ``data_type``."""
        init = self.initializers.get(name)
        return list(init.dims) if init is not None and init.data_type == data_type else None

    def constant(self, name: str) -> list[int] | None:
        init = self.initializers.get(name)
        return None if init is None else numpy_helper.to_array(init).reshape(-1).tolist()


def _attrs(node: onnx.NodeProto) -> dict:
    return {a.name: helper.get_attribute_value(a) for a in node.attribute}


def _match(g: _Graph, scatter: onnx.NodeProto) -> tuple[onnx.NodeProto, list[onnx.NodeProto]] | None:
    """The HeadRescore that computes ``scatter`` and the chain's nodes, where it is the plain form."""
    if len(scatter.input) != 3 or _attrs(scatter).get("axis") != 1:
        return None
    approx, ids, sums = scatter.input
    top = g.made_by(ids, "TopK")
    reduce = g.made_by(sums, "ReduceSum")
    mul = g.made_by(reduce.input[0], "Mul") if reduce is not None else None
    if top is None or mul is None or top.input[0] != approx or top.output[1] != ids:
        return None
    reshape, unsqueeze = (g.producer.get(t) for t in mul.input)
    if (
        reshape is None
        or unsqueeze is None
        or reshape.op_type != "Reshape"
        or unsqueeze.op_type != "Unsqueeze"
    ):
        return None
    gather = g.made_by(reshape.input[0], "GatherBlockQuantized", "com.microsoft")
    if gather is None or gather.input[1] != ids:
        return None
    a = _attrs(gather)
    block = a.get("block_size", 0)
    plain = (
        a.get("bits") == 8 and a.get("gather_axis") == 0 and a.get("quantize_axis") == 2 and block % 16 == 0
    )
    # The op reads uint8 codes [N, blocks, block] and the rows reshaped to [T, k, K].
    codes = g.dims(gather.input[0], onnx.TensorProto.UINT8)
    plain = plain and codes is not None and len(codes) == 3 and codes[2] == block
    rows_k = codes[1] * codes[2] if plain else None
    plain = plain and g.constant(reshape.input[1]) in ([0, 0, rows_k], [0, 0, -1])
    k = g.constant(top.input[1])
    topk = _attrs(top)
    sorted_largest = topk.get("largest", 1) == 1 and topk.get("axis", -1) in (-1, 1)
    constants_ok = g.constant(unsqueeze.input[1]) == [1] and g.constant(reduce.input[1]) == [2]
    constants_ok = constants_ok and _attrs(reduce).get("keepdims", 1) == 0 and k is not None and len(k) == 1
    chain = [top, gather, reshape, unsqueeze, mul, reduce, scatter]
    private = all(g.uses.get(t, 0) == 1 for n in chain[1:-1] for t in n.output) and not g.uses.get(
        top.output[0]
    )
    private = private and g.uses.get(ids, 0) == 2  # the gather and the scatter
    if not (plain and sorted_largest and constants_ok and private) or block <= 0:
        return None
    node = helper.make_node(
        RESCORE_OP,
        [approx, unsqueeze.input[0], *gather.input[:1], *gather.input[2:]],
        [scatter.output[0]],
        name=top.name.replace("/Rescore/TopK", "/HeadRescore"),
        domain=DOMAIN,
        top_k=int(k[0]),
        block_size=int(block),
    )
    return node, chain


def replace_rescore(graph: onnx.GraphProto) -> int:
    """Replace each plain re-score chain of ``graph`` in place; returns how many."""
    g = _Graph(graph)
    replacements: dict[str, onnx.NodeProto] = {}  # the scatter's output -> its HeadRescore
    removed: set[str] = set()  # the chain's nodes, by first output
    constants: set[str] = set()
    for scatter in [n for n in graph.node if n.op_type == "ScatterElements"]:
        found = _match(g, scatter)
        if found is None:
            continue
        node, chain = found
        replacements[scatter.output[0]] = node
        removed |= {n.output[0] for n in chain}
        constants |= {n.input[1] for n in chain if n.op_type in ("TopK", "Reshape", "Unsqueeze", "ReduceSum")}
    if not replacements:
        return 0
    swap_nodes(graph, replacements, removed)
    still_read = {name for n in graph.node for name in n.input}
    unread = [i for i in graph.initializer if i.name in constants and i.name not in still_read]
    for init in unread:
        graph.initializer.remove(init)
    return len(replacements)

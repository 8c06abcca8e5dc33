"""Kernel library nodes expanded, on the protobuf wire, into the ONNX nodes that compute
them: the step both the load-time fallback and the exporter's readers take
(``attention_op.gqa_form``, ``rescore_op.chain_form`` supply the nodes)."""

from __future__ import annotations

from collections.abc import Callable

from clika_runtime.kernels import proto_wire as w
from clika_runtime.kernels.onnx_wire import Node, opset_domains, opset_import

MS_DOMAIN = "com.microsoft"  # where GroupQueryAttention and GatherBlockQuantized live

GraphExpansion = Callable[[list[w.Field]], tuple[list[w.Field], int]]


def expand_nodes(
    graph_fields: list[w.Field],
    pick: Callable[[bytes], Node | None],
    expand: Callable[[Node], tuple[list[Node], list[bytes]]],
) -> tuple[list[w.Field], int]:
    """A graph's fields with every node ``pick`` finds (its decoded Node, else None) replaced
    by the nodes ``expand`` gives, the initializers it gives appended; and how many."""
    out: list[w.Field] = []
    constants: list[w.Field] = []
    count = 0
    for f in graph_fields:
        node = pick(f.value) if f.number == w.GRAPH_NODE else None
        if node is None:
            out.append(f)
            continue
        nodes, tensors = expand(node)
        out += [w.Field(w.GRAPH_NODE, w.LENGTH, n.encode()) for n in nodes]
        constants += [w.Field(w.GRAPH_INITIALIZER, w.LENGTH, t) for t in tensors]
        count += 1
    return out + constants, count


def model_expanded(model_bytes: bytes, expansion: GraphExpansion) -> bytes:
    """A serialized model with ``expansion`` applied to its graph (other kernel nodes kept)."""
    model = w.decode(model_bytes)
    for i, f in enumerate(model):
        if f.number == w.MODEL_GRAPH:
            fields, _ = expansion(w.decode(f.value))
            model[i] = w.message(w.MODEL_GRAPH, fields)
    return w.encode(with_ms_opset(model))


def with_ms_opset(model: list[w.Field]) -> list[w.Field]:
    """A model's fields importing the com.microsoft domain the expanded nodes live in."""
    if MS_DOMAIN in opset_domains(model):
        return model
    return [*model, w.Field(w.MODEL_OPSET_IMPORT, w.LENGTH, opset_import(MS_DOMAIN, 1))]

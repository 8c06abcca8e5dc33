"""What an optimum graph takes and gives, checked against what the runtime's past-KV runner drives.

The contract is ``clika_runtime.contract.past_kv_graph``'s (the runtime's runner feeds
exactly that); a graph that wants anything else (an encoder's states, another
cache layout) is refused by name. Also here: which initializers the weight pass quantizes.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Any

import onnx
from onnx import helper

from clika_runtime.contract.past_kv_graph import (
    ATTENTION_MASK,
    INPUT_IDS,
    LOGITS,
    PAST_KEY,
    PAST_VALUE,
    POSITION_IDS,
    PRESENT_KEY,
    PRESENT_VALUE,
)

_PAST = re.compile(r"past_key_values\.(\d+)\.(key|value)")


class PastKVGraphError(ValueError):
    """An optimum graph the runtime cannot drive (the message names what it wants)."""


@dataclass(frozen=True)
class PastKVGraph:
    inputs: tuple[str, ...]
    outputs: tuple[str, ...]
    num_layers: int
    num_kv_heads: int
    head_dim: int
    vocab_size: int


def describe(model: onnx.ModelProto, model_type: str) -> PastKVGraph:
    """The graph's IO and KV shape (PastKVGraphError when it is not the layout the runner drives)."""
    inputs = {i.name: i for i in model.graph.input}
    outputs = {o.name: o for o in model.graph.output}
    layers = sorted({int(m.group(1)) for name in inputs if (m := _PAST.fullmatch(name))})
    if not layers or layers != list(range(len(layers))):
        raise PastKVGraphError(f"optimum's {model_type} graph has no past_key_values.N inputs")
    expected_in = {INPUT_IDS, ATTENTION_MASK} | {
        name.format(layer=i) for i in layers for name in (PAST_KEY, PAST_VALUE)
    }
    unexpected = set(inputs) - expected_in - {POSITION_IDS}
    missing = expected_in - set(inputs)
    expected_out = {LOGITS} | {name.format(layer=i) for i in layers for name in (PRESENT_KEY, PRESENT_VALUE)}
    if unexpected or missing or set(outputs) != expected_out:
        raise PastKVGraphError(
            f"optimum's {model_type} graph takes {sorted(inputs)} and gives {sorted(outputs)}; the "
            f"runtime drives input_ids, attention_mask, position_ids and past_key_values.N.key/value only"
        )
    key = _dims(inputs[PAST_KEY.format(layer=0)])
    value = _dims(inputs[PAST_VALUE.format(layer=0)])
    logits = _dims(outputs[LOGITS])
    if len(key) != 4 or key != value or not all(isinstance(d, int) for d in (key[1], key[3])):
        raise PastKVGraphError(
            f"optimum's {model_type} graph lays its KV cache out as {key} / {value}; the runtime "
            f"drives [batch, kv_heads, past, head_dim]"
        )
    if len(logits) != 3 or not isinstance(logits[2], int):
        raise PastKVGraphError(f"optimum's {model_type} graph gives logits of shape {logits}")
    return PastKVGraph(
        inputs=tuple(i.name for i in model.graph.input),
        outputs=tuple(o.name for o in model.graph.output),
        num_layers=len(layers),
        num_kv_heads=key[1],
        head_dim=key[3],
        vocab_size=logits[2],
    )


def _dims(value: onnx.ValueInfoProto) -> list[Any]:
    shape = value.type.tensor_type.shape
    return [d.dim_value if d.HasField("dim_value") else d.dim_param for d in shape.dim]


def split_gemm_bias(model: onnx.ModelProto) -> int:
    """Rewrite each ``Gemm(x, W, b)`` of a weight ``W`` as ``MatMul(x, W) + b`` (or ``Gemm(x, W,
    transB=1) + b``), the forms the weight pass rewrites; returns how many were rewritten.

    GPT-2's Conv1D layers export as Gemm with a bias and ``W`` stored ``[in, out]``.
    """
    weights = {t.name for t in model.graph.initializer if len(t.dims) == 2}
    nodes, count = [], 0
    for node in model.graph.node:
        attrs = {a.name: helper.get_attribute_value(a) for a in node.attribute}
        plain = (
            attrs.get("transA", 0) == 0 and attrs.get("alpha", 1.0) == 1.0 and attrs.get("beta", 1.0) == 1.0
        )
        if node.op_type != "Gemm" or len(node.input) < 2 or node.input[1] not in weights or not plain:
            nodes.append(node)
            continue
        x, w, bias = node.input[0], node.input[1], node.input[2] if len(node.input) > 2 else ""
        product = f"{node.output[0]}/product" if bias else node.output[0]
        if attrs.get("transB", 0):
            nodes.append(helper.make_node("Gemm", [x, w], [product], name=node.name, transB=1))
        else:
            nodes.append(helper.make_node("MatMul", [x, w], [product], name=node.name))
        if bias:
            nodes.append(
                helper.make_node("Add", [product, bias], [node.output[0]], name=f"{node.name}/AddBias")
            )
        count += 1
    del model.graph.node[:]
    model.graph.node.extend(nodes)
    return count


def weight_matrices(model: onnx.ModelProto) -> dict[str, dict[str, Any]]:
    """The matrices the weight pass rewrites: every 2-D float initializer a MatMul (or a bias-free
    ``Gemm(transB=1)``) reads as B (the one that makes the logits marked as the head).

    Tables read by Gather (the token table, position embeddings, rotary caches) stay float: the
    pass's GatherBlockQuantized flattens the ids to one axis, and optimum's graphs keep a batch axis.
    """
    inits = {
        t.name for t in model.graph.initializer if len(t.dims) == 2 and t.data_type == onnx.TensorProto.FLOAT
    }
    found: dict[str, dict[str, Any]] = {}
    mixed: set[str] = set()  # tables: left float

    def add(name: str, node: onnx.NodeProto, role: str, layout: str) -> None:
        entry = found.setdefault(
            name, {"roles": [], "nodes": [], "layout": layout, "sources": [name], "layer": None}
        )
        entry["roles"].append(role)
        entry["nodes"].append(node.name)

    for node in model.graph.node:
        role = "lm_head" if LOGITS in node.output else "linear"
        if node.op_type == "MatMul" and node.input[1] in inits:
            add(node.input[1], node, role, "in_out")
        elif node.op_type == "Gemm" and len(node.input) == 2 and node.input[1] in inits:
            add(node.input[1], node, role, "out_in")  # transB=1 (split_gemm_bias leaves no other)
        elif node.op_type == "Gather" and node.input[0] in inits:
            mixed.add(node.input[0])  # a table a MatMul also reads (tied): stays float for both
    return {name: entry for name, entry in found.items() if name not in mixed}

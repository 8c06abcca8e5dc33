"""The contract of the kernel library's attention op, ``ai.clika::StepAttention`` (since version 1).

It is the step graph's ``grid Gather -> GroupQueryAttention -> ungrid GatherND`` in one
node over the packed tokens: the same cache layout and in-place write, rotary inside,
the same results to within float rounding (``tests/kernels/test_step_attention.py``)::

    StepAttention(qkv, token_cell, query_seqlens, seqlens_k, past_key, past_value[, cos, sin])
        -> output [T, heads * head_dim], present_key, present_value

Attributes: ``num_heads``, ``kv_num_heads`` and, where the layer has them, GroupQueryAttention's
``scale``, ``softcap`` and ``local_window_size``. Where the kernel library is not loaded, each
node becomes the three nodes it replaced (``gqa_form``), on the graph's own ``grid_index`` and
``total_sequence_length`` inputs, which the graph keeps for that.
"""

from __future__ import annotations

from clika_runtime.contract.step_graph import GRID_INDEX, TOTAL_SEQUENCE_LENGTH
from clika_runtime.kernels import proto_wire as w
from clika_runtime.kernels.node_expansion import MS_DOMAIN, expand_nodes, model_expanded
from clika_runtime.kernels.onnx_wire import Node, decode_node
from clika_runtime.kernels.op import DOMAIN

ATTENTION_OP = "StepAttention"
# GroupQueryAttention attributes the op carries over unchanged (the rest are refused at export).
CARRIED_ATTRIBUTES = ("num_heads", "kv_num_heads", "scale", "softcap", "local_window_size")
# GroupQueryAttention's 17 inputs as the step graph fills them, by position.
_GQA_PAST_KEY, _GQA_PAST_VALUE, _GQA_SEQLENS_K, _GQA_TOTAL, _GQA_COS, _GQA_SIN, _GQA_QUERY_SEQLENS = (
    3,
    4,
    5,
    6,
    7,
    8,
    16,
)


def step_attention_inputs(qkv: str, token_cell: str, gqa_inputs: list[str]) -> list[str]:
    """The op's inputs for a GroupQueryAttention node's (its grid input gathered from ``qkv``)."""
    inputs = [
        qkv,
        token_cell,
        gqa_inputs[_GQA_QUERY_SEQLENS],
        gqa_inputs[_GQA_SEQLENS_K],
        gqa_inputs[_GQA_PAST_KEY],
        gqa_inputs[_GQA_PAST_VALUE],
    ]
    cos, sin = gqa_inputs[_GQA_COS], gqa_inputs[_GQA_SIN]
    return inputs + [cos, sin] if cos else inputs


def gqa_form(node: Node) -> list[Node]:
    """The grid Gather, GroupQueryAttention and ungrid GatherND that compute ``node``."""
    qkv, cells, query_seqlens, seqlens_k, past_key, past_value, *tables = node.inputs
    cos, sin = (tables + ["", ""])[:2]
    scope = node.name.rsplit("/", 1)[0] if "/" in node.name else node.name
    grid, context = f"{scope}/grid/output_0", f"{scope}/gqa/output_0"
    gqa_inputs = [grid, "", "", past_key, past_value, seqlens_k, TOTAL_SEQUENCE_LENGTH, cos, sin]
    gqa_inputs += [""] * 7 + [query_seqlens]
    attributes = {k: v for k, v in node.attributes.items() if k in CARRIED_ATTRIBUTES}
    attributes |= {"do_rotary": int(bool(cos)), "rotary_interleaved": 0}
    return [
        Node("Gather", [qkv, GRID_INDEX], [grid], f"{scope}/grid/Gather", "", {"axis": 0}),
        Node(
            "GroupQueryAttention", gqa_inputs, [context, *node.outputs[1:]], f"{scope}/gqa/GroupQueryAttention",
            MS_DOMAIN, attributes,
        ),
        Node("GatherND", [context, cells], [node.outputs[0]], f"{scope}/ungrid/GatherND", "", {"batch_dims": 0}),
    ]  # fmt: skip


def is_step_attention(payload: bytes) -> Node | None:
    """The node a graph's node field holds, where it is a StepAttention (a byte search first)."""
    if ATTENTION_OP.encode() not in payload:
        return None
    node = decode_node(payload)
    return node if node.op_type == ATTENTION_OP and node.domain == DOMAIN else None


def attention_to_gqa(graph_fields: list[w.Field]) -> tuple[list[w.Field], int]:
    """A graph's fields with every StepAttention node in its GroupQueryAttention form, and how many."""
    return expand_nodes(graph_fields, is_step_attention, lambda node: (gqa_form(node), []))


def model_with_gqa(model_bytes: bytes) -> bytes:
    """A serialized model with its StepAttention nodes in GroupQueryAttention form (the exporter's
    derivations read the continuous graph this way)."""
    return model_expanded(model_bytes, attention_to_gqa)

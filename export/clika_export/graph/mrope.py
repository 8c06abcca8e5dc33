"""M-RoPE (Qwen2-VL) in the step graph: three position rows per token, rotation before the grid.

GroupQueryAttention rotates token ``col`` of a row by one position, ``past_len + col``.
M-RoPE rotates each frequency by one of three positions (temporal, height, width; which
one ``mrope_section`` says, in order), and an image's tokens and everything after them
sit at positions other than their KV index. So the graph rotates q and k itself, on the
packed tokens, and GroupQueryAttention runs with ``do_rotary=0``::

    token_cell, seqlens_k, query_seqlens -> past_len[row] + col -> [T, 1] -> three rows [T, 3]
      -> ScatterND(mrope_rows, mrope_positions) -> Gather(section of each frequency) [T, F]
      -> * inv_freq -> cos, sin [T, 1, F]                                   (once per graph)
    per layer: qkv[T, D] -> Split -> qk [T, nh + kv, hd] -> x1 * cos - x2 * sin | x2 * cos + x1 * sin
      -> Concat(qk, v) -> qkv[T, D]

A token not named by ``mrope_rows`` rotates by its KV index in all three rows, the
plain rope (``clika_runtime.contract.step_graph.MROPE_INPUTS``; a text run feeds them empty).
The cos/sin are computed from the positions in the graph, not read from a stored table.
"""

from __future__ import annotations

import numpy as np

from clika_export.graph.builder import GraphBuilder
from clika_export.graph.decoder_spec import GLOBAL_ROPE, DecoderSpec
from clika_export.graph.rope import inverse_frequencies
from clika_runtime.contract import step_graph as io

MROPE_ROWS_DIM = "mrope_rows"
# [T, 1] int64: each packed token's KV index. The paged derivation replaces the node that
# computes it by its own ``position_ids`` (``clika_export.graph.paged_graph``).
KV_INDEX = "model.mrope.kv_index"


def declare_inputs(g: GraphBuilder) -> None:
    """The two M-RoPE inputs (a text run feeds them empty: ``step_graph.text_only_media``)."""
    g.input(io.MROPE_ROWS, np.int64, [MROPE_ROWS_DIM])
    g.input(io.MROPE_POSITIONS, np.int64, [MROPE_ROWS_DIM, 3])


def cos_sin(g: GraphBuilder, spec: DecoderSpec) -> tuple[str, str]:
    """``cos``, ``sin`` ``[T, 1, rotary_dim / 2]`` of every packed token, from its three positions."""
    assert spec.mrope_section is not None
    rope = spec.ropes[GLOBAL_ROPE]
    inv_freq, factor = inverse_frequencies(rope.rotary_dim, rope.theta, rope.scaling, spec.context_window)
    section = np.repeat(np.arange(3, dtype=np.int64), spec.mrope_section)
    with g.scope("mrope"):
        one = g.constant("model.mrope.one", np.array(1, dtype=np.int32))
        started = g.op("Sub", [io.SEQLENS_K, io.QUERY_SEQLENS], label="PastMinusOne")
        past = g.op("Cast", [g.op("Add", [started, one], label="Past")], to=7)  # int64 past_len per row
        row, col = g.op(
            "Split", [io.TOKEN_CELL], outputs=2, axis=1, num_outputs=2, label="RowCol"
        )  # [T, 1] each
        index = g.op(
            "Add",
            [g.op("Gather", [past, row], axis=0, label="RowPast"), col],
            outputs=[KV_INDEX],
            label="KVIndex",
        )
        three = g.op("Concat", [index, index, index], axis=1, label="Three")  # [T, 3]
        axes = g.constant("model.mrope.last_axis", np.array([-1], dtype=np.int64))
        rows = g.op("Unsqueeze", [io.MROPE_ROWS, axes], label="Rows")
        positions = g.op("ScatterND", [three, rows, io.MROPE_POSITIONS], label="Positions")
        per_freq = g.op(
            "Gather", [positions, g.constant("model.mrope.section", section)], axis=1, label="Sections"
        )
        angles = g.op(
            "Mul",
            [g.op("Cast", [per_freq], to=1, label="Float"), g.constant("model.mrope.inv_freq", inv_freq)],
            label="Angles",
        )
        heads = g.constant("model.mrope.heads_axis", np.array([1], dtype=np.int64))
        cos, sin = g.op("Cos", [angles]), g.op("Sin", [angles])
        if factor != 1.0:
            scale = g.constant("model.mrope.factor", np.float32(factor))
            cos, sin = (
                g.op("Mul", [cos, scale], label="CosScale"),
                g.op("Mul", [sin, scale], label="SinScale"),
            )
        return g.op("Unsqueeze", [cos, heads], label="CosHeads"), g.op(
            "Unsqueeze", [sin, heads], label="SinHeads"
        )


def rotate_qk(g: GraphBuilder, spec: DecoderSpec, layer: int, qkv: str, cos: str, sin: str) -> str:
    """``qkv`` ``[T, D]`` with its q and k heads rotated (rotate_half layout), v unchanged."""
    a = spec.arch
    heads = a.num_heads + a.num_kv_heads
    with g.scope("mrope"):
        split = g.constant(
            f"model.layers.{layer}.mrope.qk_v", np.array([heads * a.head_dim, a.num_kv_heads * a.head_dim])
        )
        qk, v = g.op("Split", [qkv, split], outputs=2, axis=-1, label="QkV")
        shape = g.constant(f"model.layers.{layer}.mrope.heads", np.array([0, heads, a.head_dim]))
        x1, x2 = g.op(
            "Split",
            [g.op("Reshape", [qk, shape], label="Heads")],
            outputs=2,
            axis=-1,
            num_outputs=2,
            label="Halves",
        )
        first = g.op(
            "Sub",
            [g.op("Mul", [x1, cos], label="X1Cos"), g.op("Mul", [x2, sin], label="X2Sin")],
            label="First",
        )
        second = g.op(
            "Add",
            [g.op("Mul", [x2, cos], label="X2Cos"), g.op("Mul", [x1, sin], label="X1Sin")],
            label="Second",
        )
        rotated = g.op("Concat", [first, second], axis=-1, label="Rotated")
        flat = g.constant(f"model.layers.{layer}.mrope.flat", np.array([0, heads * a.head_dim]))
        return g.op("Concat", [g.op("Reshape", [rotated, flat], label="Flat"), v], axis=-1, label="Qkv")

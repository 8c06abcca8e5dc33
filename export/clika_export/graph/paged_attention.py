"""The paged step graph: the continuous step graph with attention reading KV through block tables.

ONNX Runtime has no paged attention kernel on CPU (``PagedAttention`` is
CUDA-only), so attention is built from standard ops over a pool of fixed-size
blocks per layer, head-major ``[kv_heads, num_blocks, block_size, head_dim]``,
owned by the runtime (NumPy) and bound as both ``past_*`` input and
``present_*`` output: ``ScatterND`` writes each new token's K/V into its pool
slot in place (its cost does not grow with the pool), then attention gathers
each row's blocks. Head-major, a row's gathered blocks ``[kv_heads, rows,
blocks, block_size, head_dim]`` are one contiguous sequence per head, so
attention is plain ``q @ K^T``, softmax, ``@ V`` with no transpose of the
gathered cache.

``clika_export.graph.paged_graph`` rewrites a finished continuous graph
(float or quantized) with this attention in place of every
``GroupQueryAttention``; the weights stay where they are.

Rows come in two groups: **decode rows** (one new token) and **wide rows**
(prompt chunks, on their own padded ``[rows, width]`` grid), so a decode row
never pays a prompt chunk's width. Each layer runs only the group(s) a step
has (``If`` on the group sizes, about 1 us each): a decode-only step skips
the wide ops and the unpacking gather altogether.

Measured on SmolLM2-135M int4 (one thread, busy 2-core machine, whole decode
step as a ratio to the continuous graph's in-place GQA): 0.94 at batch 1 /
context 256, 0.99 at 1 / 1024, 0.87 at 8 / 256, 0.97 at 8 / 1024; prompt
chunks of 256 tokens 0.96-1.04. The alternatives measured first: blocks-major
pools multiplied block by block (softmax across two axes by hand) 1.00-1.09,
and gathering then transposing into one sequence 1.5-1.8x per layer.

Inputs beyond the continuous graph's ``input_ids`` and ``logits_index``
(``clika_runtime.contract.paged_step_graph.pack_paged_step`` builds them):

=========================  ==================  ==================================================
name                       dtype, shape        meaning
=========================  ==================  ==================================================
``position_ids``           int64 ``[T]``       absolute position of each packed token (rotary, mask)
``slot_mapping``           int64 ``[T]``       pool slot ``block * block_size + offset`` of its K/V
``decode_query_index``     int64 ``[Bd, 1]``   the packed token of each decode row
``decode_block_tables``    int64 ``[Bd, Md]``  each decode row's blocks (``Md >= 1``; padding: any)
``wide_query_index``       int64 ``[Bw, Sw]``  packed token of each wide grid cell (padding repeats)
``wide_block_tables``      int64 ``[Bw, Mw]``  each wide row's blocks (``Mw >= 1``)
``token_index``            int64 ``[T]``       where token ``t``'s attention output sits in the
                                               concatenation of decode rows and the wide grid
=========================  ==================  ==================================================

A key position ``j`` of a row is visible to a query at position ``p`` when
``j <= p``; block table padding and stale pool content beyond a row's length
are masked that way (the pool must hold finite values: the runtime zeroes it).
A layer with a local window of ``w`` keys (GroupQueryAttention's
``local_window_size``) also hides ``j <= p - w``: its mask is made once per
step for each window the layers use. Soft-capped scores (``softcap``) are
``cap * tanh(s / cap)`` before the mask, as GroupQueryAttention does; a
partial rotary table (``rotary_dim < head_dim``) rotates the leading dims only.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import numpy as np
import onnx
from onnx import helper

from clika_export.graph.builder import MS_DOMAIN, GraphBuilder
from clika_runtime.contract import paged_step_graph as io
from clika_runtime.contract.manifest import Architecture
from clika_runtime.contract.step_graph import PAST_KEY, PAST_VALUE, PRESENT_KEY, PRESENT_VALUE

# The per-layer names of the KV inputs and outputs: past key, past value, present key, present value.
KVNames = tuple[str, str, str, str]
STEP_KV_NAMES: KVNames = (PAST_KEY, PAST_VALUE, PRESENT_KEY, PRESENT_VALUE)


@dataclass(frozen=True)
class AttentionSite:
    """One layer's attention in the continuous graph: what it reads and what it feeds."""

    layer: int
    qkv: str  # packed [T, (heads + 2 kv_heads) * head_dim]
    output: str  # packed [T, heads * head_dim], read by o_proj
    cos: str
    sin: str
    removed: tuple[onnx.NodeProto, ...]  # grid Gather, GQA, ungrid GatherND (older: with Reshapes)
    rotary: bool
    interleaved: bool
    scale: float
    window: int | None = None  # keys a query sees, itself included (None: all before it)
    softcap: float = 0.0
    rotary_dim: int = 0  # 0: the whole head
    # An int8 cache: the continuous graph's per-channel scales ``[1, kv_heads, 1, head_dim]``.
    k_scale: str | None = None
    v_scale: str | None = None


class PagedAttentionEmitter:
    """Emits the step-wide tables once and each layer's paged attention."""

    def __init__(self, g: GraphBuilder, arch: Architecture, block_size: int, *, int8: bool = False) -> None:
        self.g = g
        self.a = arch
        self.bs = block_size
        self.int8 = int8  # pools hold int8 on per-channel scales (the continuous graph's int8 cache)
        self.group = arch.num_heads // arch.num_kv_heads
        self.q_width = arch.num_heads * arch.head_dim
        self.kv_width = arch.num_kv_heads * arch.head_dim
        self._consts: set[str] = set()

    def const(self, name: str, values: object, dtype: type = np.int64) -> str:
        """A small initializer, made once per name (branches that emit the same ops share it)."""
        full = f"model.paged.{name}"
        if full not in self._consts:
            self._consts.add(self.g.constant(full, np.asarray(values, dtype=dtype)))
        return full

    def step_tables(self, windows: tuple[int, ...] = ()) -> list[onnx.NodeProto]:
        """Write indices, attention masks (one more pair per local window) and which groups have rows.

        ::

            slot_mapping[T] -> (head, slot // bs, slot % bs) -> write_index[T, kv_heads, 3]
            position_ids -Gather(decode_query_index)-> [Bd]     <= key positions -> decode_bias[1, Bd, 1, Md*bs]
            position_ids -Gather(wide_query_index)->   [Bw, Sw] <= key positions -> wide_bias[1, Bw, 1, Sw, Mw*bs]
            Shape(decode_query_index)[0] > 0 -> has_decode;  Shape(wide_query_index)[0] > 0 -> has_wide
        """
        g = self.g
        start = len(g.nodes)
        self.visible = self.const("bias_visible", 0.0, np.float32)
        self.hidden = self.const("bias_hidden", -np.inf, np.float32)
        self.zero = self.const("zero", 0)
        with g.scope("model"), g.scope("paged"):
            with g.scope("write_index"):
                self.write_index = self._write_index()
            with g.scope("decode_mask"):
                queries = g.op(
                    "Gather", [io.POSITION_IDS, io.DECODE_QUERY_INDEX], label="QueryPositions", axis=0
                )
                queries = g.op(
                    "Reshape", [queries, self.const("decode_query_shape", [1, -1, 1, 1])], label="Rows"
                )
                self.decode_bias = self._bias(io.DECODE_BLOCK_TABLES, queries, "decode")
                self.decode_window_bias = {
                    w: self._bias(io.DECODE_BLOCK_TABLES, queries, f"decode.window{w}", w) for w in windows
                }
                self.has_decode = self._has_rows(io.DECODE_QUERY_INDEX)
            with g.scope("wide_mask"):
                queries = g.op(
                    "Gather", [io.POSITION_IDS, io.WIDE_QUERY_INDEX], label="QueryPositions", axis=0
                )
                queries = g.op("Unsqueeze", [queries, self.const("wide_query_axes", [0, 2, 4])], label="Rows")
                self.wide_bias = self._bias(io.WIDE_BLOCK_TABLES, queries, "wide")
                self.wide_window_bias = {
                    w: self._bias(io.WIDE_BLOCK_TABLES, queries, f"wide.window{w}", w) for w in windows
                }
                self.has_wide = self._has_rows(io.WIDE_QUERY_INDEX)
            with g.scope("rotary"):
                self.positions = g.op("Unsqueeze", [io.POSITION_IDS, self.const("axis0", [0])])
        return g.nodes[start:]

    def _write_index(self) -> str:
        g, a = self.g, self.a
        bs = self.const("block_size", self.bs)
        axes = self.const("write_axes", [1, 2])
        shape = g.op(
            "Concat",
            [g.op("Shape", [io.SLOT_MAPPING]), self.const("write_tail", [a.num_kv_heads, 1])],
            axis=0,
        )
        block = g.op("Unsqueeze", [g.op("Div", [io.SLOT_MAPPING, bs]), axes], label="Block")
        offset = g.op("Unsqueeze", [g.op("Mod", [io.SLOT_MAPPING, bs]), axes], label="Offset")
        heads = self.const("heads", np.arange(a.num_kv_heads).reshape(1, -1, 1))
        parts = [
            g.op("Expand", [heads, shape], label="ExpandHead"),
            g.op("Expand", [block, shape], label="ExpandBlock"),
            g.op("Expand", [offset, shape], label="ExpandOffset"),
        ]
        return g.op("Concat", parts, label="Index", axis=2)

    def _bias(self, tables: str, queries: str, prefix: str, window: int | None = None) -> str:
        """0 where key position ``j <= `` the query's position ``p`` (and ``j > p - window``), -inf elsewhere."""
        g = self.g
        with g.scope(f"window{window}" if window else "causal"):
            table_shape = g.op("Shape", [tables], label="TableShape")
            blocks = g.op(
                "Gather", [table_shape, self.const(f"{prefix}.block_dim", 1)], label="Blocks", axis=0
            )
            length = g.op("Mul", [blocks, self.const(f"{prefix}.block_size", self.bs)])
            keys = g.op("Range", [self.zero, length, self.const(f"{prefix}.key_step", 1)])
            visible = g.op("LessOrEqual", [keys, queries])
            if window:
                first = g.op("Sub", [queries, self.const(f"{prefix}.window_left", window - 1)], label="First")
                visible = g.op("And", [visible, g.op("GreaterOrEqual", [keys, first])], label="InWindow")
            return g.op("Where", [visible, self.visible, self.hidden])

    def _has_rows(self, query_index: str) -> str:
        g = self.g
        index_shape = g.op("Shape", [query_index], label="IndexShape")
        rows = g.op("Gather", [index_shape, self.zero], label="RowCount", axis=0)
        return g.op("Greater", [rows, self.zero], label="HasRows")

    def layer(self, site: AttentionSite, kv_names: KVNames) -> list[onnx.NodeProto]:
        """One layer: split and rotate, write K/V into the pools, attend per group, back to packed order.

        ::

            qkv[T,D] -> [1,T,D] -> Split -> qk, v -> RotaryEmbedding(qk, heads + kv_heads) -> Split -> q, k
            k, v -> ScatterND(pool, write_index) -> present (the pool itself, in place)
            If has_wide:   If has_decode: Concat(decode(q), wide(q)) -> Gather(token_index)
                           else:          wide(q) -> Gather(token_index)
            else:          decode(q)      (decode rows only: already in packed order)
        """
        g, a = self.g, self.a
        start = len(g.nodes)
        past_k, past_v, present_k, present_v = (n.format(layer=site.layer) for n in kv_names)
        n = f"layer{site.layer}"
        with g.scope("model"), g.scope(f"layers.{site.layer}"), g.scope("attn"), g.scope("paged"):
            qkv = g.op("Unsqueeze", [site.qkv, self.const(f"{n}.batch_axis", [0])], label="Batch")
            split = self.const(f"{n}.split_v", [self.q_width + self.kv_width, self.kv_width])
            qk, v = g.op("Split", [qkv, split], label="SplitV", outputs=2, axis=2)
            if site.rotary:
                partial = {"rotary_embedding_dim": site.rotary_dim} if site.rotary_dim else {}
                qk = g.op(
                    "RotaryEmbedding",
                    [qk, self.positions, site.cos, site.sin],
                    domain=MS_DOMAIN,
                    interleaved=int(site.interleaved),
                    num_heads=a.num_heads + a.num_kv_heads,
                    **partial,
                )
            split = self.const(f"{n}.split_qk", [self.q_width, self.kv_width])
            q, k = g.op("Split", [qk, split], label="SplitQK", outputs=2, axis=2)
            kv_shape = self.const(f"{n}.kv_shape", [-1, a.num_kv_heads, a.head_dim])
            k = g.op("Reshape", [k, kv_shape], label="ReshapeK")
            v = g.op("Reshape", [v, kv_shape], label="ReshapeV")
            if site.k_scale is not None:
                k, v = self._quantized(k, site.k_scale, n, "K"), self._quantized(v, site.v_scale, n, "V")
                q = self._scaled(q, site.k_scale, n)
            keys = g.op("ScatterND", [past_k, self.write_index, k], outputs=[present_k], label="WriteK")
            values = g.op("ScatterND", [past_v, self.write_index, v], outputs=[present_v], label="WriteV")
            pools = (keys, values)

            def with_wide_rows() -> str:
                mixed = self._branch(n, "mixed", lambda: self._mixed(q, pools, site))
                wide = self._branch(
                    n, "wide_only", lambda: self._unpack(self._wide(q, pools, site), "WideOnly")
                )
                return g.op("If", [self.has_decode], label="IfDecode", then_branch=mixed, else_branch=wide)

            wide_branch = self._branch(n, "has_wide", with_wide_rows)
            decode_branch = self._branch(n, "decode_only", lambda: self._decode(q, pools, site, packed=True))
            g.op(
                "If",
                [self.has_wide],
                outputs=[site.output],
                label="IfWide",
                then_branch=wide_branch,
                else_branch=decode_branch,
            )
        return g.nodes[start:]

    def _quantized(self, x: str, scale: str | None, n: str, kind: str) -> str:
        """``x [T, kvh, hd]`` as int8 on the cache's per-channel grid (rounded, saturated)."""
        g, a = self.g, self.a
        flat = self.const(f"{n}.kv_flat", [-1, self.kv_width])
        per_channel = g.op(
            "Reshape", [scale, self.const(f"{n}.channels", [self.kv_width])], label=f"Scale{kind}"
        )
        zero = self.const(f"{n}.int8_zero", np.zeros(self.kv_width), np.int8)
        x = g.op("Reshape", [x, flat], label=f"Flat{kind}")
        x = g.op("QuantizeLinear", [x, per_channel, zero], label=f"Quantize{kind}", axis=1)
        return g.op(
            "Reshape",
            [x, self.const(f"{n}.kv_shape", [-1, a.num_kv_heads, a.head_dim])],
            label=f"Heads{kind}",
        )

    def _scaled(self, q: str, k_scale: str, n: str) -> str:
        """``q [1, T, nh*hd]`` times each query head's key scales: ``q . (s * k8) = (q * s) . k8``."""
        a = self.a
        head_scale = self.g.op(
            "Reshape",
            [k_scale, self.const(f"{n}.k_scale_row", [a.num_kv_heads, 1, a.head_dim])],
            label="KeyScaleRow",
        )
        tiled = self.g.op(
            "Tile", [head_scale, self.const(f"{n}.group_tiles", [1, self.group, 1])], label="KeyScaleHeads"
        )
        row = self.g.op(
            "Reshape", [tiled, self.const(f"{n}.q_row", [1, 1, self.q_width])], label="KeyScaleQuery"
        )
        return self.g.op("Mul", [q, row], label="ScaleQuery")

    def _branch(self, layer: str, name: str, build: Callable[[], str]) -> onnx.GraphProto:
        """The nodes ``build`` emits (in scope ``name``), taken out of the graph as an If branch."""
        start = len(self.g.nodes)
        with self.g.scope(name):
            result = build()
        nodes = self.g.nodes[start:]
        del self.g.nodes[start:]
        output = helper.make_tensor_value_info(result, onnx.TensorProto.FLOAT, None)
        return helper.make_graph(nodes, f"{layer}_{name}", [], [output])

    def _mixed(self, q: str, pools: tuple[str, str], site: AttentionSite) -> str:
        rows = self.g.op(
            "Concat", [self._decode(q, pools, site, packed=False), self._wide(q, pools, site)], axis=0
        )
        return self._unpack(rows, "Mixed")

    def _unpack(self, rows: str, label: str) -> str:
        return self.g.op("Gather", [rows, io.TOKEN_INDEX], label=f"Unpack{label}", axis=0)

    def _sequences(self, pools: tuple[str, str], tables: str, shape: str, label: str) -> tuple[str, str]:
        """Each row's blocks gathered from the head-major pools: one contiguous sequence per head."""
        g = self.g
        out = []
        for kind, pool in zip("KV", pools, strict=True):
            blocks = g.op("Gather", [pool, tables], label=f"{label}Gather{kind}", axis=1)
            if self.int8:  # scales are applied to the query (K) and the mixed context (V)
                blocks = g.op("Cast", [blocks], label=f"{label}Float{kind}", to=onnx.TensorProto.FLOAT)
            out.append(g.op("Reshape", [blocks, shape], label=f"{label}Sequence{kind}"))
        return out[0], out[1]

    def _value_scaled(self, context: str, site: AttentionSite, rank: int, label: str) -> str:
        """``context [kvh, ..., hd]`` (``rank`` dims) times the value scales: ``w @ (s * v8) = s * (w @ v8)``."""
        if site.v_scale is None:
            return context
        a = self.a
        shape = [a.num_kv_heads, *([1] * (rank - 2)), a.head_dim]
        scale = self.g.op(
            "Reshape",
            [site.v_scale, self.const(f"layer{site.layer}.v_scale_{rank}", shape)],
            label=f"{label}ValueScale",
        )
        return self.g.op("Mul", [context, scale], label=f"{label}ScaleValues")

    def _capped(self, scores: str, site: AttentionSite, label: str) -> str:
        """``cap * tanh(scores / cap)`` for a soft-capped layer (Gemma 2), else the scores."""
        if site.softcap <= 0:
            return scores
        cap = self.const(f"softcap{site.softcap}", site.softcap, np.float32)
        capped = self.g.op(
            "Tanh", [self.g.op("Div", [scores, cap], label=f"{label}CapIn")], label=f"{label}Cap"
        )
        return self.g.op("Mul", [capped, cap], label=f"{label}CapOut")

    def _decode(self, q: str, pools: tuple[str, str], site: AttentionSite, *, packed: bool) -> str:
        """Decode rows: ``[kvh, Bd, group, hd] @ [kvh, Bd, Md*bs, hd]^T``, softmax, ``@ V`` -> ``[Bd, nh*hd]``.

        ``packed``: every token is a decode row (the step has no wide rows), so ``q`` is already in row order.
        """
        g, a, n = self.g, self.a, f"layer{site.layer}.decode"
        label = "Decode" if packed else "MixedDecode"
        if not packed:
            q = g.op("Gather", [q, io.DECODE_QUERY_INDEX], label=f"{label}Query", axis=1)  # [1, Bd, 1, nh*hd]
        heads = g.op(
            "Reshape",
            [q, self.const(f"{n}.{label}.q_shape", [-1, a.num_kv_heads, self.group, a.head_dim])],
            label=f"{label}Heads",
        )
        heads = g.op(
            "Transpose", [heads], label=f"{label}HeadMajor", perm=[1, 0, 2, 3]
        )  # [kvh, Bd, group, hd]
        shape = self.const(f"{n}.{label}.seq_shape", [a.num_kv_heads, 0, -1, a.head_dim])
        keys, values = self._sequences(pools, io.DECODE_BLOCK_TABLES, shape, label)
        scores = g.op(
            "FusedMatMul", [heads, keys], label=f"{label}Scores", domain=MS_DOMAIN, transB=1, alpha=site.scale
        )
        scores = self._capped(scores, site, label)
        bias = self.decode_window_bias[site.window] if site.window else self.decode_bias
        scores = g.op("Add", [scores, bias], label=f"{label}Mask")
        weights = g.op("Softmax", [scores], label=f"{label}Softmax", axis=-1)
        context = g.op("MatMul", [weights, values], label=f"{label}Mix")  # [kvh, Bd, group, hd]
        context = self._value_scaled(context, site, 4, label)
        context = g.op("Transpose", [context], label=f"{label}RowMajor", perm=[1, 0, 2, 3])
        return g.op(
            "Reshape",
            [context, self.const(f"{n}.{label}.out_shape", [-1, self.q_width])],
            label=f"{label}Flatten",
        )

    def _wide(self, q: str, pools: tuple[str, str], site: AttentionSite) -> str:
        """Wide rows: queries ``[kvh, Bw, group, Sw, hd]`` against ``[kvh, Bw, 1, Mw*bs, hd]`` -> ``[Bw*Sw, nh*hd]``."""
        g, a, n = self.g, self.a, f"layer{site.layer}.wide"
        cells = g.op("Gather", [q, io.WIDE_QUERY_INDEX], label="WideQuery", axis=1)  # [1, Bw, Sw, nh*hd]
        cells = g.op("Squeeze", [cells, self.const(f"{n}.batch_axis", [0])], label="WideUnbatch")
        cells = g.op(
            "Reshape",
            [cells, self.const(f"{n}.q_shape", [0, 0, a.num_kv_heads, self.group, a.head_dim])],
            label="WideHeads",
        )
        queries = g.op(
            "Transpose", [cells], label="WideHeadMajor", perm=[2, 0, 3, 1, 4]
        )  # [kvh, Bw, group, Sw, hd]
        shape = self.const(f"{n}.seq_shape", [a.num_kv_heads, 0, 1, -1, a.head_dim])
        keys, values = self._sequences(pools, io.WIDE_BLOCK_TABLES, shape, "Wide")
        scores = g.op(
            "FusedMatMul", [queries, keys], label="WideScores", domain=MS_DOMAIN, transB=1, alpha=site.scale
        )
        scores = self._capped(scores, site, "Wide")
        bias = self.wide_window_bias[site.window] if site.window else self.wide_bias
        scores = g.op("Add", [scores, bias], label="WideMask")  # [kvh, Bw, group, Sw, L]
        weights = g.op("Softmax", [scores], label="WideSoftmax", axis=-1)
        context = g.op("MatMul", [weights, values], label="WideMix")  # [kvh, Bw, group, Sw, hd]
        context = self._value_scaled(context, site, 5, "Wide")
        context = g.op("Transpose", [context], label="WideRowMajor", perm=[1, 3, 0, 2, 4])
        return g.op(
            "Reshape", [context, self.const(f"{n}.out_shape", [-1, self.q_width])], label="WideFlatten"
        )

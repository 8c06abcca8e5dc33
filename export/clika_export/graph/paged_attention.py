"""The paged step graph: the continuous step graph with attention reading KV through block tables.

ONNX Runtime has no paged attention kernel on CPU (``PagedAttention`` is
CUDA-only), so attention is built from standard ops over a pool of fixed-size
blocks per layer, ``[num_blocks, kv_heads, block_size, head_dim]``, owned by
the runtime (NumPy) and bound as both ``past_*`` input and ``present_*``
output: ``ScatterND`` writes each new token's K/V into its pool slot in place,
then attention gathers each row's blocks.

``derive_paged_graph`` rewrites a finished continuous graph (float or
quantized) instead of building a second one: every ``GroupQueryAttention``
and the grid ops around it become the paged attention below, everything else
(weights included, by reference into the same external data file) is kept.

Rows come in two groups, because the fastest form differs (measured on
SmolLM2-135M shapes, one layer, as a ratio to in-place GQA):

* **decode rows** (one new token): the query is multiplied block by block,
  ``q @ K_block^T`` over ``[rows, blocks, kv_heads, group, block_size]``,
  softmax across (blocks, block_size) by hand: no transpose of the gathered
  cache (1.05-1.34x);
* **wide rows** (prompt chunks): the gathered blocks are transposed into one
  ``[rows, kv_heads, blocks * block_size, head_dim]`` sequence and attention
  runs on the padded ``[rows, width]`` grid with a fused softmax (0.96x at
  64 new tokens; the block-by-block form is 1.65x there).

Keeping the groups apart also keeps decode rows off a prompt chunk's padded
grid, which would cost them the chunk's width in attention each.

Inputs beyond the continuous graph's ``input_ids`` and ``logits_index``
(``clika_runtime.engine.paged_cache.pack_paged_step`` builds them):

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
"""

from __future__ import annotations

import dataclasses
import os
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import onnx
from onnx import helper

from clika_export.graph.builder import MS_DOMAIN, GraphBuilder, save_model
from clika_runtime.engine import paged_inputs as io
from clika_runtime.engine.step_inputs import PAST_KEY, PAST_VALUE, PRESENT_KEY, PRESENT_VALUE
from clika_runtime.manifest import MANIFEST_FILE, Architecture, GraphSpec, Manifest

PAGED_MODEL_FILE = "model_paged.onnx"
DEFAULT_BLOCK_SIZE = 64

# The per-layer names of the KV inputs and outputs: past key, past value, present key, present value.
KVNames = tuple[str, str, str, str]
STEP_KV_NAMES: KVNames = (PAST_KEY, PAST_VALUE, PRESENT_KEY, PRESENT_VALUE)

# Symbolic dimension names of the paged graph's inputs.
TOKENS, BLOCKS = "tokens", "pool_blocks"


class PagedGraphError(ValueError):
    """A continuous graph this rewrite does not understand (the message names the node)."""


@dataclass(frozen=True)
class AttentionSite:
    """One layer's attention in the continuous graph: what it reads and what it feeds."""

    layer: int
    qkv: str  # packed [T, (heads + 2 kv_heads) * head_dim]
    output: str  # packed [T, heads * head_dim], read by o_proj
    cos: str
    sin: str
    removed: tuple[onnx.NodeProto, ...]  # grid gather, reshape, GQA, ungrid reshape, ungrid gather
    rotary: bool
    interleaved: bool
    scale: float


@dataclass(frozen=True)
class PagedGraph:
    """The written paged graph: its file and IO names."""

    model_file: str
    inputs: tuple[str, ...]
    outputs: tuple[str, ...]
    block_size: int


def derive_paged_graph(
    continuous: Path,
    folder: Path,
    arch: Architecture,
    *,
    block_size: int = DEFAULT_BLOCK_SIZE,
    kv_names: KVNames = STEP_KV_NAMES,
    model_file: str = PAGED_MODEL_FILE,
) -> PagedGraph:
    """Write ``folder/model_file``: ``continuous`` with paged attention (sharing its weights file)."""
    if block_size < 1:
        raise PagedGraphError(f"block_size must be >= 1, got {block_size}")
    model = onnx.load(str(continuous), load_external_data=False)
    graph = model.graph
    sites = [
        _site(graph, node, arch, kv_names) for node in graph.node if node.op_type == "GroupQueryAttention"
    ]
    if len(sites) != arch.num_layers:
        raise PagedGraphError(
            f"{continuous.name} has {len(sites)} GroupQueryAttention nodes, the architecture {arch.num_layers} layers"
        )
    g = GraphBuilder("clika_paged_step", None)  # type: ignore[arg-type]  # small constants only
    emitter = _PagedEmitter(g, arch, block_size)
    step_nodes = emitter.step_tables()
    layer_nodes = {site.layer: emitter.layer(site, kv_names) for site in sites}
    _splice(graph, sites, step_nodes, layer_nodes)
    graph.initializer.extend(g.initializers)
    _replace_io(graph, arch, block_size, kv_names)
    _drop_dead(graph)
    model.doc_string = "clika paged step graph: packed tokens, KV in a block pool read through block tables"
    # Written beside and renamed into place: a reader never opens half a graph.
    partial = Path(folder) / f".{model_file}.{os.getpid()}.partial"
    save_model(model, partial)
    os.replace(partial, Path(folder) / model_file)
    return PagedGraph(
        model_file=model_file,
        inputs=tuple(v.name for v in graph.input),
        outputs=tuple(v.name for v in graph.output),
        block_size=block_size,
    )


def add_paged_graph(folder: Path, *, block_size: int = DEFAULT_BLOCK_SIZE) -> Manifest:
    """Give a model folder its ``paged`` graph (derived from its ``continuous`` one); returns the manifest.

    Both graphs read the same weights file. The manifest is replaced in one
    rename, so a reader sees the folder before or after, never half-written.
    """
    folder = Path(folder)
    manifest = Manifest.read(folder)
    continuous = manifest.graphs["continuous"]
    kv = continuous.kv
    names = (kv.past_key, kv.past_value, kv.present_key, kv.present_value)
    paged = derive_paged_graph(
        folder / continuous.file, folder, manifest.architecture, block_size=block_size, kv_names=names
    )
    spec = GraphSpec(
        file=paged.model_file,
        inputs=paged.inputs,
        outputs=paged.outputs,
        kv=dataclasses.replace(kv, block_size=block_size),
        logits_output=continuous.logits_output,
    )
    manifest = dataclasses.replace(manifest, graphs={**manifest.graphs, "paged": spec})
    partial = folder / f".{MANIFEST_FILE}.{os.getpid()}.partial"
    partial.write_text(manifest.to_json() + "\n", encoding="utf-8")
    os.replace(partial, folder / MANIFEST_FILE)
    return manifest


# -- finding the continuous attention ----------------------------------------------


def _site(
    graph: onnx.GraphProto, gqa: onnx.NodeProto, arch: Architecture, kv_names: KVNames
) -> AttentionSite:
    producers = {out: node for node in graph.node for out in node.output}
    consumers: dict[str, list[onnx.NodeProto]] = {}
    for node in graph.node:
        for name in node.input:
            consumers.setdefault(name, []).append(node)
    layers = {kv_names[0].format(layer=i): i for i in range(arch.num_layers)}
    layer = layers.get(gqa.input[3])
    grid = producers.get(gqa.input[0])
    cells = producers.get(grid.input[0]) if grid is not None else None
    ungrid = _only(consumers.get(gqa.output[0], []))
    picked = _only(consumers.get(ungrid.output[0], [])) if ungrid is not None else None
    chain = (cells, grid, ungrid, picked)
    kinds = ("Gather", "Reshape", "Reshape", "Gather")
    if layer is None or any(n is None or n.op_type != k for n, k in zip(chain, kinds, strict=True)):
        raise PagedGraphError(
            f"{gqa.name}: not the grid -> GroupQueryAttention -> ungrid pattern of the step graph"
        )
    attrs = {a.name: helper.get_attribute_value(a) for a in gqa.attribute}
    for name, neutral in (("local_window_size", -1), ("softcap", 0.0), ("smooth_softmax", 0)):
        if attrs.get(name, neutral) != neutral:
            raise PagedGraphError(f"{gqa.name}: attribute {name}={attrs[name]} has no paged form yet")
    if attrs.get("num_heads") != arch.num_heads or attrs.get("kv_num_heads") != arch.num_kv_heads:
        raise PagedGraphError(f"{gqa.name}: head counts differ from the architecture")
    return AttentionSite(
        layer=layer,
        qkv=cells.input[0],  # type: ignore[union-attr]
        output=picked.output[0],  # type: ignore[union-attr]
        cos=gqa.input[7],
        sin=gqa.input[8],
        removed=(cells, grid, gqa, ungrid, picked),  # type: ignore[arg-type]
        rotary=bool(attrs.get("do_rotary", 0)),
        interleaved=bool(attrs.get("rotary_interleaved", 0)),
        scale=float(attrs.get("scale", 0.0)) or 1.0 / float(np.sqrt(arch.head_dim)),
    )


def _only(nodes: list[onnx.NodeProto]) -> onnx.NodeProto | None:
    return nodes[0] if len(nodes) == 1 else None


# -- emitting the paged attention ------------------------------------------------------


class _PagedEmitter:
    """Emits the step-wide tables once and each layer's paged attention."""

    def __init__(self, g: GraphBuilder, arch: Architecture, block_size: int) -> None:
        self.g = g
        self.a = arch
        self.bs = block_size
        self.group = arch.num_heads // arch.num_kv_heads
        self.q_width = arch.num_heads * arch.head_dim
        self.kv_width = arch.num_kv_heads * arch.head_dim

    def const(self, name: str, values: object, dtype: type = np.int64) -> str:
        return self.g.constant(f"model.paged.{name}", np.asarray(values, dtype=dtype))

    def step_tables(self) -> list[onnx.NodeProto]:
        """Write indices and attention masks, shared by every layer.

        ::

            slot_mapping[T] -> (slot // bs, head, slot % bs) -> write_index[T, kv_heads, 3]
            position_ids[T] -Gather(decode_query_index)-> [Bd,1]  vs key positions -> decode_bias[Bd,Md,1,1,bs]
            position_ids[T] -Gather(wide_query_index)->   [Bw,Sw] vs key positions -> wide_bias[Bw,1,1,Sw,Mw*bs]
        """
        g, a = self.g, self.a
        start = len(g.nodes)
        self.visible = self.const("bias_visible", 0.0, np.float32)
        self.hidden = self.const("bias_hidden", -np.inf, np.float32)
        with g.scope("model"), g.scope("paged"):
            with g.scope("write_index"):
                bs = self.const("block_size", self.bs)
                block = g.op("Div", [io.SLOT_MAPPING, bs])
                offset = g.op("Mod", [io.SLOT_MAPPING, bs])
                axes = self.const("write_axes", [1, 2])
                tokens = g.op("Shape", [io.SLOT_MAPPING])
                shape = g.op(
                    "Concat", [tokens, self.const("write_tail", [a.num_kv_heads, 1])], label="Shape3", axis=0
                )
                parts = [
                    g.op(
                        "Expand",
                        [g.op("Unsqueeze", [block, axes], label="UnsqueezeBlock"), shape],
                        label="ExpandBlock",
                    ),
                    g.op(
                        "Expand",
                        [self.const("heads", np.arange(a.num_kv_heads).reshape(1, -1, 1)), shape],
                        label="ExpandHead",
                    ),
                    g.op(
                        "Expand",
                        [g.op("Unsqueeze", [offset, axes], label="UnsqueezeOffset"), shape],
                        label="ExpandOffset",
                    ),
                ]
                self.write_index = g.op("Concat", parts, axis=2)
            with g.scope("decode_mask"):
                self.decode_bias = self._decode_bias()
            with g.scope("wide_mask"):
                self.wide_bias, self.wide_keys = self._wide_bias()
            with g.scope("rotary"):
                self.positions = g.op("Unsqueeze", [io.POSITION_IDS, self.const("axis0", [0])])
        return g.nodes[start:]

    def _key_positions(self, tables: str, prefix: str) -> tuple[str, str]:
        """``(Range(0, blocks * bs), blocks * bs as a 1-D tensor)`` for a block table."""
        g = self.g
        shape = g.op("Shape", [tables])
        blocks = g.op("Gather", [shape, self.const(f"{prefix}.block_dim", 1)], label="BlockCount", axis=0)
        length = g.op("Mul", [blocks, self.const(f"{prefix}.block_size", self.bs)])
        keys = g.op(
            "Range", [self.const(f"{prefix}.first_key", 0), length, self.const(f"{prefix}.key_step", 1)]
        )
        return keys, g.op("Unsqueeze", [length, self.const(f"{prefix}.length_axis", [0])], label="Length")

    def _bias(self, keys: str, queries: str) -> str:
        visible = self.g.op("LessOrEqual", [keys, queries])
        return self.g.op("Where", [visible, self.visible, self.hidden])

    def _decode_bias(self) -> str:
        g = self.g
        keys, _ = self._key_positions(io.DECODE_BLOCK_TABLES, "decode")
        keys = g.op(
            "Reshape", [keys, self.const("decode_key_shape", [1, -1, 1, 1, self.bs])], label="KeyShape"
        )
        queries = g.op("Gather", [io.POSITION_IDS, io.DECODE_QUERY_INDEX], label="QueryPositions", axis=0)
        queries = g.op(
            "Reshape", [queries, self.const("decode_query_shape", [-1, 1, 1, 1, 1])], label="QueryShape"
        )
        return self._bias(keys, queries)  # [Bd, Md, 1, 1, bs]

    def _wide_bias(self) -> tuple[str, str]:
        g = self.g
        keys, length = self._key_positions(io.WIDE_BLOCK_TABLES, "wide")
        queries = g.op("Gather", [io.POSITION_IDS, io.WIDE_QUERY_INDEX], label="QueryPositions", axis=0)
        queries = g.op("Unsqueeze", [queries, self.const("wide_query_axes", [1, 2, 4])], label="QueryShape")
        return self._bias(keys, queries), length  # [Bw, 1, 1, Sw, L], L

    def layer(self, site: AttentionSite, kv_names: KVNames) -> list[onnx.NodeProto]:
        """One layer: split and rotate, write K/V into the pools, attend per group, back to packed order.

        ::

            qkv[T,D] -> Split -> q, k, v -> RotaryEmbedding(q), RotaryEmbedding(k)
            k, v -> ScatterND(pool, write_index) -> present (the pool itself, in place)
            q -> decode rows: block-by-block attention -> [Bd, nh*hd]
            q -> wide rows:   gathered sequence attention -> [Bw*Sw, nh*hd]
            Concat -> Gather(token_index) -> [T, nh*hd]
        """
        g, a = self.g, self.a
        start = len(g.nodes)
        past_k, past_v, present_k, present_v = (n.format(layer=site.layer) for n in kv_names)
        with g.scope("model"), g.scope(f"layers.{site.layer}"), g.scope("attn"), g.scope("paged"):
            split = self.const(f"layer{site.layer}.split", [self.q_width, self.kv_width, self.kv_width])
            q, k, v = g.op("Split", [site.qkv, split], outputs=3, axis=1)
            if site.rotary:
                q = self._rotate(q, a.num_heads, site, "q")
                k = self._rotate(k, a.num_kv_heads, site, "k")
            kv_shape = self.const(f"layer{site.layer}.kv_shape", [-1, a.num_kv_heads, a.head_dim])
            k = g.op("Reshape", [k, kv_shape], label="ReshapeK")
            v = g.op("Reshape", [v, kv_shape], label="ReshapeV")
            keys = g.op("ScatterND", [past_k, self.write_index, k], outputs=[present_k], label="WriteK")
            values = g.op("ScatterND", [past_v, self.write_index, v], outputs=[present_v], label="WriteV")
            with g.scope("decode"):
                narrow = self._decode_attention(q, keys, values, site)
            with g.scope("wide"):
                wide = self._wide_attention(q, keys, values, site)
            rows = g.op("Concat", [narrow, wide], axis=0)
            g.op("Gather", [rows, io.TOKEN_INDEX], outputs=[site.output], label="Unpack", axis=0)
        return g.nodes[start:]

    def _rotate(self, x: str, heads: int, site: AttentionSite, label: str) -> str:
        g = self.g
        batched = g.op(
            "Unsqueeze",
            [x, self.const(f"layer{site.layer}.{label}_axis0", [0])],
            label=f"Batch{label.upper()}",
        )
        rotated = g.op(
            "RotaryEmbedding",
            [batched, self.positions, site.cos, site.sin],
            label=f"Rotary{label.upper()}",
            domain=MS_DOMAIN,
            interleaved=int(site.interleaved),
            num_heads=heads,
        )
        return g.op(
            "Squeeze",
            [rotated, f"model.paged.layer{site.layer}.{label}_axis0"],
            label=f"Unbatch{label.upper()}",
        )

    def _decode_attention(self, q: str, keys: str, values: str, site: AttentionSite) -> str:
        """``[Bd, 1, kvh, group, hd] @ [Bd, Md, kvh, bs, hd]^T`` -> softmax over (Md, bs) -> ``@ V`` -> sum over Md."""
        g, a, n = self.g, self.a, f"layer{site.layer}.decode"
        rows = g.op("Gather", [q, io.DECODE_QUERY_INDEX], label="GatherQuery", axis=0)  # [Bd, 1, nh*hd]
        rows = g.op(
            "Reshape",
            [rows, self.const(f"{n}.q_shape", [0, 1, a.num_kv_heads, self.group, a.head_dim])],
            label="SplitHeads",
        )
        k_blocks = g.op(
            "Gather", [keys, io.DECODE_BLOCK_TABLES], label="GatherK", axis=0
        )  # [Bd, Md, kvh, bs, hd]
        v_blocks = g.op("Gather", [values, io.DECODE_BLOCK_TABLES], label="GatherV", axis=0)
        scores = g.op("FusedMatMul", [rows, k_blocks], domain=MS_DOMAIN, transB=1, alpha=site.scale)
        scores = g.op("Add", [scores, self.decode_bias], label="Mask")  # [Bd, Md, kvh, group, bs]
        axes = self.const(f"{n}.softmax_axes", [1, 4])
        peak = g.op("ReduceMax", [scores, axes], keepdims=1)
        weights = g.op("Exp", [g.op("Sub", [scores, peak])])
        total = g.op("ReduceSum", [weights, axes], label="Total", keepdims=1)  # [Bd, 1, kvh, group, 1]
        mixed = g.op("MatMul", [weights, v_blocks])  # [Bd, Md, kvh, group, hd]
        mixed = g.op("ReduceSum", [mixed, self.const(f"{n}.block_axis", [1])], label="SumBlocks", keepdims=0)
        total = g.op("Squeeze", [total, f"model.paged.{n}.block_axis"])  # [Bd, kvh, group, 1]
        context = g.op("Div", [mixed, total])
        return g.op("Reshape", [context, self.const(f"{n}.out_shape", [-1, self.q_width])], label="Flatten")

    def _wide_attention(self, q: str, keys: str, values: str, site: AttentionSite) -> str:
        """Gathered blocks as one sequence ``[Bw, kvh, 1, L, hd]``; queries ``[Bw, kvh, group, Sw, hd]``."""
        g, a, n = self.g, self.a, f"layer{site.layer}.wide"
        cells = g.op("Gather", [q, io.WIDE_QUERY_INDEX], label="GatherQuery", axis=0)  # [Bw, Sw, nh*hd]
        cells = g.op(
            "Reshape",
            [cells, self.const(f"{n}.q_shape", [0, 0, a.num_kv_heads, self.group, a.head_dim])],
            label="SplitHeads",
        )
        queries = g.op("Transpose", [cells], label="TransposeQuery", perm=[0, 2, 3, 1, 4])
        seq_shape = g.op(
            "Concat",
            [
                self.const(f"{n}.seq_head", [-1, a.num_kv_heads, 1]),
                self.wide_keys,
                self.const(f"{n}.seq_tail", [a.head_dim]),
            ],
            label="SequenceShape",
            axis=0,
        )
        sequences = []
        for label, pool in (("K", keys), ("V", values)):
            blocks = g.op("Gather", [pool, io.WIDE_BLOCK_TABLES], label=f"Gather{label}", axis=0)
            blocks = g.op("Transpose", [blocks], label=f"Transpose{label}", perm=[0, 2, 1, 3, 4])
            sequences.append(g.op("Reshape", [blocks, seq_shape], label=f"Sequence{label}"))
        scores = g.op("FusedMatMul", [queries, sequences[0]], domain=MS_DOMAIN, transB=1, alpha=site.scale)
        scores = g.op("Add", [scores, self.wide_bias], label="Mask")  # [Bw, kvh, group, Sw, L]
        weights = g.op("Softmax", [scores], axis=-1)
        context = g.op("MatMul", [weights, sequences[1]])  # [Bw, kvh, group, Sw, hd]
        context = g.op("Transpose", [context], label="TransposeOut", perm=[0, 3, 1, 2, 4])
        return g.op("Reshape", [context, self.const(f"{n}.out_shape", [-1, self.q_width])], label="Flatten")


# -- rewriting the graph --------------------------------------------------------------


def _splice(
    graph: onnx.GraphProto,
    sites: list[AttentionSite],
    step_nodes: list[onnx.NodeProto],
    layer_nodes: dict[int, list[onnx.NodeProto]],
) -> None:
    """Replace each site's nodes by its paged nodes, in place of its GQA (keeps topological order)."""
    removed = {id(node) for site in sites for node in site.removed}
    at_gqa = {id(site.removed[2]): site.layer for site in sites}
    nodes: list[onnx.NodeProto] = list(step_nodes)
    for node in graph.node:
        if id(node) in at_gqa:
            nodes.extend(layer_nodes[at_gqa[id(node)]])
        elif id(node) not in removed:
            nodes.append(node)
    del graph.node[:]
    graph.node.extend(nodes)


def _replace_io(graph: onnx.GraphProto, arch: Architecture, block_size: int, kv_names: KVNames) -> None:
    kept = [v for v in graph.input if v.name in (io.INPUT_IDS, io.LOGITS_INDEX)]
    new_inputs = [
        helper.make_tensor_value_info(io.POSITION_IDS, onnx.TensorProto.INT64, [TOKENS]),
        helper.make_tensor_value_info(io.SLOT_MAPPING, onnx.TensorProto.INT64, [TOKENS]),
        helper.make_tensor_value_info(io.DECODE_QUERY_INDEX, onnx.TensorProto.INT64, ["decode_rows", 1]),
        helper.make_tensor_value_info(
            io.DECODE_BLOCK_TABLES, onnx.TensorProto.INT64, ["decode_rows", "decode_blocks"]
        ),
        helper.make_tensor_value_info(
            io.WIDE_QUERY_INDEX, onnx.TensorProto.INT64, ["wide_rows", "wide_width"]
        ),
        helper.make_tensor_value_info(
            io.WIDE_BLOCK_TABLES, onnx.TensorProto.INT64, ["wide_rows", "wide_blocks"]
        ),
        helper.make_tensor_value_info(io.TOKEN_INDEX, onnx.TensorProto.INT64, [TOKENS]),
    ]
    pool = [BLOCKS, arch.num_kv_heads, block_size, arch.head_dim]
    pools = []
    for layer in range(arch.num_layers):
        for name in kv_names[:2]:
            pools.append(
                helper.make_tensor_value_info(name.format(layer=layer), onnx.TensorProto.FLOAT, pool)
            )
    del graph.input[:]
    graph.input.extend([*kept, *new_inputs, *pools])
    present = {name.format(layer=layer) for layer in range(arch.num_layers) for name in kv_names[2:]}
    outputs = []
    for value in graph.output:
        if value.name in present:
            value = helper.make_tensor_value_info(value.name, onnx.TensorProto.FLOAT, pool)
        outputs.append(value)
    del graph.output[:]
    graph.output.extend(outputs)


def _drop_dead(graph: onnx.GraphProto) -> None:
    """Remove nodes nothing reads (the continuous grid's shape ops) and initializers no node reads."""
    needed = {v.name for v in graph.output}
    live: list[onnx.NodeProto] = []
    for node in reversed(graph.node):
        if any(out in needed for out in node.output):
            live.append(node)
            needed.update(name for name in node.input if name)
    live.reverse()
    del graph.node[:]
    graph.node.extend(live)
    initializers = [t for t in graph.initializer if t.name in needed]
    del graph.initializer[:]
    graph.initializer.extend(initializers)

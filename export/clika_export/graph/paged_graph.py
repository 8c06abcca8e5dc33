"""Derive the paged step graph from a model folder's continuous one (same weights file).

Every ``GroupQueryAttention`` of the continuous graph, with the grid gather
before it and the ungrid GatherND after it (graphs exported before: a Reshape
after the gather, a Reshape and a Gather after the attention), is replaced by
the paged attention of ``clika_export.graph.paged_attention``; the inputs
become the paged ones (``clika_runtime.contract.paged_step_graph``; an M-RoPE graph keeps
its ``mrope_*`` inputs and reads each token's KV index from ``position_ids``); nodes and
initializers left unread are dropped. Everything else, the weights included
(by reference into the same external data file), is kept, so a quantized
graph gets a paged twin without quantizing again.
"""

from __future__ import annotations

import dataclasses
import os
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import onnx
from onnx import helper, numpy_helper

from clika_export.graph import mrope
from clika_export.graph.builder import GraphBuilder, save_model
from clika_export.graph.gqa_form import read_continuous
from clika_export.graph.paged_attention import STEP_KV_NAMES, AttentionSite, KVNames, PagedAttentionEmitter
from clika_runtime.contract import paged_step_graph as io
from clika_runtime.contract.manifest import MANIFEST_FILE, Architecture, GraphSpec, Manifest, graph_key
from clika_runtime.contract.step_graph import MROPE_INPUTS

PAGED_MODEL_FILE = "model_paged.onnx"
DEFAULT_BLOCK_SIZE = 64

# Symbolic dimension names of the paged graph's inputs.
TOKENS, BLOCKS = "tokens", "pool_blocks"


class PagedGraphError(ValueError):
    """A continuous graph this rewrite does not understand (the message names the node)."""


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
    model = read_continuous(continuous)
    graph = model.graph
    sites = [
        attention_site(graph, node, arch, kv_names)
        for node in graph.node
        if node.op_type == "GroupQueryAttention"
    ]
    if len(sites) != arch.num_layers:
        raise PagedGraphError(
            f"{continuous.name} has {len(sites)} GroupQueryAttention nodes, the architecture {arch.num_layers} layers"
        )
    g = GraphBuilder("clika_paged_step", None)  # type: ignore[arg-type]  # small constants only
    int8 = any(site.k_scale is not None for site in sites)
    emitter = PagedAttentionEmitter(g, arch, block_size, int8=int8)
    step_nodes = emitter.step_tables(tuple(sorted({site.window for site in sites if site.window})))
    layer_nodes = {site.layer: emitter.layer(site, kv_names) for site in sites}
    _splice(graph, sites, step_nodes, layer_nodes)
    graph.initializer.extend(g.initializers)
    _mrope_index_from_positions(graph)
    _replace_io(graph, arch, block_size, kv_names, onnx.TensorProto.INT8 if int8 else onnx.TensorProto.FLOAT)
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


def ensure_paged_graph(folder: Path) -> Manifest:
    """The folder's manifest, after deriving its ``paged`` graph if it has none or one of an older layout."""
    manifest = Manifest.read(folder)
    paged = manifest.graphs.get("paged")
    if paged is not None and paged.kv.layout == io.PAGED_LAYOUT and paged.kv.block_size:
        return manifest
    return add_paged_graph(folder, block_size=(paged.kv.block_size if paged else None) or DEFAULT_BLOCK_SIZE)


def add_paged_graph(
    folder: Path, *, block_size: int = DEFAULT_BLOCK_SIZE, kv_dtype: str = "float32"
) -> Manifest:
    """Give a model folder its ``paged`` graph (derived from its ``continuous`` one); returns the manifest.

    ``kv_dtype`` "int8": the paged twin of the int8 KV cache's continuous graph
    (``paged:int8``, its pools int8 on the same scales). All the graphs read the
    same weights file. The manifest is replaced in one rename, so a reader sees
    the folder before or after, never half-written.
    """
    folder = Path(folder)
    manifest = Manifest.read(folder)
    continuous = manifest.graphs[graph_key("continuous", kv_dtype)]
    kv = continuous.kv
    names = (kv.past_key, kv.past_value, kv.present_key, kv.present_value)
    model_file = PAGED_MODEL_FILE if kv_dtype == "float32" else f"model_paged_{kv_dtype}.onnx"
    paged = derive_paged_graph(
        folder / continuous.file,
        folder,
        manifest.architecture,
        block_size=block_size,
        kv_names=names,
        model_file=model_file,
    )
    spec = GraphSpec(
        file=paged.model_file,
        inputs=paged.inputs,
        outputs=paged.outputs,
        kv=dataclasses.replace(kv, layout=io.PAGED_LAYOUT, block_size=block_size),
        logits_output=continuous.logits_output,
    )
    manifest = dataclasses.replace(manifest, graphs={**manifest.graphs, graph_key("paged", kv_dtype): spec})
    partial = folder / f".{MANIFEST_FILE}.{os.getpid()}.partial"
    partial.write_text(manifest.to_json() + "\n", encoding="utf-8")
    os.replace(partial, folder / MANIFEST_FILE)
    return manifest


# -- finding the continuous attention ----------------------------------------------


def attention_site(
    graph: onnx.GraphProto, gqa: onnx.NodeProto, arch: Architecture, kv_names: KVNames
) -> AttentionSite:
    producers = {out: node for node in graph.node for out in node.output}
    consumers: dict[str, list[onnx.NodeProto]] = {}
    for node in graph.node:
        for name in node.input:
            consumers.setdefault(name, []).append(node)
    layers = {kv_names[0].format(layer=i): i for i in range(arch.num_layers)}
    layer = layers.get(gqa.input[3])
    before, after = producers.get(gqa.input[0]), _only(consumers.get(gqa.output[0], []))
    # The flat grid layout of older exports has a Reshape on each side.
    flat = before is not None and before.op_type == "Reshape"
    grid = before if flat else None
    cells = producers.get(before.input[0]) if flat else before  # type: ignore[union-attr]
    ungrid = after if flat else None
    picked = _only(consumers.get(ungrid.output[0], [])) if ungrid is not None else after
    chain = (cells, grid, ungrid, picked) if flat else (cells, picked)
    kinds = ("Gather", "Reshape", "Reshape", "Gather") if flat else ("Gather", "GatherND")
    if layer is None or any(n is None or n.op_type != k for n, k in zip(chain, kinds, strict=True)):
        raise PagedGraphError(
            f"{gqa.name}: not the grid -> GroupQueryAttention -> ungrid pattern of the step graph"
        )
    attrs = {a.name: helper.get_attribute_value(a) for a in gqa.attribute}
    for name, neutral in (("smooth_softmax", 0), ("sliding_window_cache", 0)):
        if attrs.get(name, neutral) != neutral:
            raise PagedGraphError(f"{gqa.name}: attribute {name}={attrs[name]} has no paged form yet")
    if any(_input(gqa, i) for i in (9, 10, 11, 14, 15)):
        raise PagedGraphError(
            f"{gqa.name}: position ids, attention bias, head sinks or q/k norm inputs have no paged form"
        )
    if attrs.get("num_heads") != arch.num_heads or attrs.get("kv_num_heads") != arch.num_kv_heads:
        raise PagedGraphError(f"{gqa.name}: head counts differ from the architecture")
    return AttentionSite(
        layer=layer,
        qkv=cells.input[0],  # type: ignore[union-attr]
        output=picked.output[0],  # type: ignore[union-attr]
        cos=gqa.input[7],
        sin=gqa.input[8],
        removed=tuple(n for n in (cells, grid, gqa, ungrid, picked) if n is not None),
        rotary=bool(attrs.get("do_rotary", 0)),
        interleaved=bool(attrs.get("rotary_interleaved", 0)),
        scale=float(attrs.get("scale", 0.0)) or 1.0 / float(np.sqrt(arch.head_dim)),
        window=int(attrs["local_window_size"]) if attrs.get("local_window_size", -1) > 0 else None,
        softcap=float(attrs.get("softcap", 0.0)),
        rotary_dim=_rotary_dim(graph, gqa.input[7], arch.head_dim),
        k_scale=_input(gqa, 12),
        v_scale=_input(gqa, 13),
    )


def _rotary_dim(graph: onnx.GraphProto, cos: str, head_dim: int) -> int:
    """Rotated dims of a partial rotary table (``[positions, rotary_dim / 2]``); 0 for whole heads."""
    table = next((t for t in graph.initializer if t.name == cos), None)
    if table is None or len(table.dims) != 2:
        return 0
    dim = 2 * int(table.dims[1])
    return 0 if dim == head_dim else dim


def _input(node: onnx.NodeProto, index: int) -> str | None:
    """The node's ``index``-th input, None when absent or empty."""
    return node.input[index] if len(node.input) > index and node.input[index] else None


def _only(nodes: list[onnx.NodeProto]) -> onnx.NodeProto | None:
    return nodes[0] if len(nodes) == 1 else None


# -- rewriting the graph --------------------------------------------------------------


def _splice(
    graph: onnx.GraphProto,
    sites: list[AttentionSite],
    step_nodes: list[onnx.NodeProto],
    layer_nodes: dict[int, list[onnx.NodeProto]],
) -> None:
    """Replace each site's nodes by its paged nodes, in place of its GQA (keeps topological order)."""
    removed = {id(node) for site in sites for node in site.removed}
    at_gqa = {id(n): site.layer for site in sites for n in site.removed if n.op_type == "GroupQueryAttention"}
    nodes: list[onnx.NodeProto] = list(step_nodes)
    for node in graph.node:
        if id(node) in at_gqa:
            nodes.extend(layer_nodes[at_gqa[id(node)]])
        elif id(node) not in removed:
            nodes.append(node)
    del graph.node[:]
    graph.node.extend(nodes)


def _replace_io(
    graph: onnx.GraphProto, arch: Architecture, block_size: int, kv_names: KVNames, pool_type: int
) -> None:
    kept = [
        v for v in graph.input if v.name in (io.INPUT_IDS, io.LOGITS_INDEX, *io.MEDIA_INPUTS, *MROPE_INPUTS)
    ]
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
    pool = [arch.num_kv_heads, BLOCKS, block_size, arch.head_dim]
    pools = []
    for layer in range(arch.num_layers):
        for name in kv_names[:2]:
            pools.append(helper.make_tensor_value_info(name.format(layer=layer), pool_type, pool))
    del graph.input[:]
    graph.input.extend([*kept, *new_inputs, *pools])
    present = {name.format(layer=layer) for layer in range(arch.num_layers) for name in kv_names[2:]}
    outputs = []
    for value in graph.output:
        if value.name in present:
            value = helper.make_tensor_value_info(value.name, pool_type, pool)
        outputs.append(value)
    del graph.output[:]
    graph.output.extend(outputs)


def _mrope_index_from_positions(graph: onnx.GraphProto) -> None:
    """An M-RoPE graph's KV index of each token: the continuous grid's arithmetic -> ``position_ids``."""
    for i, node in enumerate(graph.node):
        if list(node.output) == [mrope.KV_INDEX]:
            axes = "model.mrope.paged_axes"
            graph.initializer.append(numpy_helper.from_array(np.array([-1], dtype=np.int64), axes))
            unsqueeze = helper.make_node(
                "Unsqueeze", [io.POSITION_IDS, axes], [mrope.KV_INDEX], name="/model/mrope/PagedKVIndex"
            )
            graph.node[i].CopyFrom(unsqueeze)
            return


def _drop_dead(graph: onnx.GraphProto) -> None:
    """Remove nodes nothing reads (the continuous grid's shape ops) and initializers no node reads."""
    needed = {v.name for v in graph.output}
    live: list[onnx.NodeProto] = []
    for node in reversed(graph.node):
        if any(out in needed for out in node.output):
            live.append(node)
            needed.update(name for name in _reads(node) if name)
    live.reverse()
    del graph.node[:]
    graph.node.extend(live)
    initializers = [t for t in graph.initializer if t.name in needed]
    del graph.initializer[:]
    graph.initializer.extend(initializers)


def _reads(node: onnx.NodeProto) -> Iterator[str]:
    """The tensors a node reads, including those its If branches read from the enclosing graph."""
    yield from node.input
    for attribute in node.attribute:
        if attribute.type == onnx.AttributeProto.GRAPH:
            for inner in attribute.g.node:
                yield from _reads(inner)

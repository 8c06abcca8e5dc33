"""The continuous step graph's attention as the kernel library's ``StepAttention`` nodes.

Each layer's ``grid Gather -> GroupQueryAttention -> ungrid GatherND`` becomes one node
over the packed tokens (``clika_runtime.kernels.attention_op``): where the library runs,
it reads each KV head once for all the query heads that share it and needs no grid; where
it does not, the runtime puts the three nodes back at load. Measured on SmolLM2-135M's
shapes (9 heads, 3 KV heads, head_dim 64, 2 threads, ``benchmarks/features/step_attention.py``):
a decode step's layer after 200 cached tokens 15 against 27 us on one row and 62 against
145 us on 8 rows.

A layer keeps GroupQueryAttention where the op does not compute it the same way:
interleaved rotary, an int8 cache, a head_dim not a multiple of 16, or a graph of the older
flat grid layout. The export runs this pass right after quantizing, before it measures
anything, so the errors a folder states are its own graph's; the paged and int8-KV twins
derive from the continuous graph read back in GroupQueryAttention form
(``gqa_form.read_continuous``). Folders exported before it keep GroupQueryAttention.
"""

from __future__ import annotations

from pathlib import Path

import onnx
from onnx import helper

from clika_export.graph.kernel_nodes import edit_continuous_in_place, swap_nodes
from clika_export.graph.paged_attention import STEP_KV_NAMES, AttentionSite
from clika_export.graph.paged_graph import PagedGraphError, attention_site
from clika_runtime.contract.manifest import Architecture
from clika_runtime.contract.step_graph import TOKEN_CELL
from clika_runtime.kernels.attention_op import ATTENTION_OP, CARRIED_ATTRIBUTES, step_attention_inputs
from clika_runtime.kernels.op import DOMAIN


def add_step_attention_in_place(folder: Path) -> int:
    """Give the folder's continuous graph StepAttention nodes where they compute the same;
    returns the layers that now have one."""
    return edit_continuous_in_place(
        folder, lambda graph, manifest: replace_attention(graph, manifest.architecture)
    )


def replace_attention(graph: onnx.GraphProto, arch: Architecture) -> int:
    """Replace each computable attention pattern of ``graph`` in place; returns how many."""
    # Nodes are told apart by their first output: protobuf's node objects are not stable.
    replacements: dict[str, onnx.NodeProto] = {}  # the GQA node's first output -> its StepAttention
    removed: set[str] = set()
    for gqa in [n for n in graph.node if n.op_type == "GroupQueryAttention"]:
        try:
            site = attention_site(graph, gqa, arch, STEP_KV_NAMES)
        except PagedGraphError:
            continue  # not the grid pattern, or features only GroupQueryAttention has
        if _computable(site, gqa, arch):
            replacements[gqa.output[0]] = _step_attention(site, gqa)
            removed |= {n.output[0] for n in site.removed}
    swap_nodes(graph, replacements, removed)
    return len(replacements)


def _computable(site: AttentionSite, gqa: onnx.NodeProto, arch: Architecture) -> bool:
    packed = len(gqa.input) > 2 and not gqa.input[1] and not gqa.input[2]
    grid = len(site.removed) == 3  # the flat layout has Reshapes around GroupQueryAttention
    return packed and grid and not site.interleaved and site.k_scale is None and arch.head_dim % 16 == 0


def _step_attention(site: AttentionSite, gqa: onnx.NodeProto) -> onnx.NodeProto:
    attributes = {
        a.name: helper.get_attribute_value(a) for a in gqa.attribute if a.name in CARRIED_ATTRIBUTES
    }
    return helper.make_node(
        ATTENTION_OP,
        step_attention_inputs(site.qkv, TOKEN_CELL, list(gqa.input)),
        [site.output, *gqa.output[1:]],
        name=gqa.name.replace("/gqa/GroupQueryAttention", "/StepAttention"),
        domain=DOMAIN,
        **attributes,
    )

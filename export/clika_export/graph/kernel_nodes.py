"""A folder's continuous graph edited in place to hold kernel library nodes: the passes
(``step_attention``, ``head_rescore``) supply the edit, this writes the result safely."""

from __future__ import annotations

import os
from collections.abc import Callable
from pathlib import Path

import onnx
from onnx import helper

from clika_export.graph.builder import save_model
from clika_runtime.contract.manifest import Manifest
from clika_runtime.kernels.op import DOMAIN, OP_VERSION


def edit_continuous_in_place(folder: Path, edit: Callable[[onnx.GraphProto, Manifest], int]) -> int:
    """Apply ``edit`` (returns how many nodes it made) to the folder's continuous graph and,
    where it made any, write the graph back importing the ai.clika domain."""
    manifest = Manifest.read(folder)
    path = Path(folder) / manifest.graphs["continuous"].file
    model = onnx.load(str(path), load_external_data=False)
    made = edit(model.graph, manifest)
    if made:
        if not any(o.domain == DOMAIN for o in model.opset_import):
            model.opset_import.append(helper.make_opsetid(DOMAIN, OP_VERSION))
        partial = path.parent / f".{path.name}.{os.getpid()}.partial"
        save_model(model, partial)
        os.replace(partial, path)  # a reader never opens half a graph
    return made


def swap_nodes(graph: onnx.GraphProto, replacements: dict[str, onnx.NodeProto], removed: set[str]) -> None:
    """``graph``'s nodes with each node whose first output ``replacements`` names replaced and
    those ``removed`` names dropped, in order (protobuf's node objects are not stable, so
    nodes are told apart by their first output)."""
    nodes = [
        replacements.get(n.output[0], n)
        for n in graph.node
        if n.output[0] in replacements or n.output[0] not in removed
    ]
    del graph.node[:]
    graph.node.extend(nodes)

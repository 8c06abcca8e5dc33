"""The folder's step graph with its gated MLPs folded into their GgufMatMul (``clika_quant.fuse_swiglu``).

Run after the pass that replaces matrices' nodes (``choose_bits_by_sensitivity``) and before
the one that measures the graph and sets precisions in place (``choose_levels_by_sensitivity``)
and the check against the float reference, so both measure the graph the folder keeps; the
paged and int8-KV twins derive from it afterwards and inherit the fusion.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import onnx

from clika_export.graph.builder import save_model


def fuse_swiglu_in_place(graph_path: Path, record: dict[str, Any]) -> dict[str, Any]:
    """Fuse the graph file at ``graph_path`` (its weights file untouched); the precision record
    gains ``fused_swiglu``, the number of matrices that now apply the activation."""
    from clika_quant.fuse_swiglu import fuse_swiglu

    model = onnx.load(str(graph_path), load_external_data=False)
    fused = fuse_swiglu(model.graph)
    if fused:
        partial = graph_path.parent / f".{graph_path.name}.{os.getpid()}.partial"
        save_model(model, partial)
        os.replace(partial, graph_path)  # a reader never opens half a graph
    return {**record, "fused_swiglu": len(fused)}

"""Which graph file of a model folder the quantization studies rewrite."""

from __future__ import annotations

from pathlib import Path

from clika_runtime.contract.manifest import Manifest, graph_key


def continuous_graph(folder: Path) -> Path:
    """The continuous step graph the folder's manifest names (``model_h.onnx`` once a cached folder
    got the hidden_states output: the plain ``model.onnx`` beside it is no longer read)."""
    return folder / Manifest.read(folder).graphs[graph_key("continuous")].file

"""Weight bytes a model reads to decode one token, from its files.

Decoding one token multiplies the activation by every weight matrix once, so it
reads every weight tensor, except lookup tables (an embedding read one row per
token). A tied embedding that is also the output head is read whole. Achieved
bandwidth = these bytes x decode tokens per second: how close a runtime comes to
the memory bus's limit.
"""

from __future__ import annotations

import json
from pathlib import Path

# ONNX ops that read one row of a table per token; the head's HeadRescore reads its top_k
# rows of the head's 8-bit table (256 of Qwen2.5's 151936), not the table.
LOOKUP_OPS = {"Gather", "GatherBlockQuantized", "GatherElements", "GatherND", "HeadRescore"}


def gguf_bytes_per_token(path: str | Path) -> int:
    """Every tensor of a GGUF, minus the token embedding when a separate output head exists."""
    from gguf import GGUFReader

    tensors = {t.name: int(t.n_bytes) for t in GGUFReader(str(path)).tensors}
    if "output.weight" in tensors:
        tensors.pop("token_embd.weight", None)
    return sum(tensors.values())


def _initializer_bytes(tensor) -> int:
    import numpy as np
    from onnx import TensorProto, helper

    if tensor.data_location == TensorProto.EXTERNAL:
        entries = {e.key: e.value for e in tensor.external_data}
        if "length" in entries:
            return int(entries["length"])
    count = int(np.prod(tensor.dims)) if tensor.dims else 1
    return count * np.dtype(helper.tensor_dtype_to_np_dtype(tensor.data_type)).itemsize


def onnx_bytes_per_token(path: str | Path) -> int:
    """Initializers of an ONNX graph, except those only lookup ops consume."""
    import onnx

    graph = onnx.load(str(path), load_external_data=False).graph
    consumers: dict[str, set[str]] = {}
    for node in graph.node:
        for name in node.input:
            consumers.setdefault(name, set()).add(node.op_type)
    total = 0
    for tensor in graph.initializer:
        ops = consumers.get(tensor.name, set())
        if ops and ops <= LOOKUP_OPS:
            continue
        total += _initializer_bytes(tensor)
    return total


def clika_graph_file(model_dir: str | Path) -> Path:
    """The graph a single stream decodes with: the manifest's continuous graph (else its first)."""
    model_dir = Path(model_dir)
    manifest = json.loads((model_dir / "manifest.json").read_text())
    graphs = manifest["graphs"]
    spec = graphs.get("continuous") or next(iter(graphs.values()))
    return model_dir / spec["file"]

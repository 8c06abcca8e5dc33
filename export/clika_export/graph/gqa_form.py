"""The continuous graph as the exporter's derivations read it: GroupQueryAttention in every layer.

The paged and int8-KV twins rewrite the continuous graph's GroupQueryAttention nodes; a
folder whose continuous graph has StepAttention nodes (``step_attention``) is read back
in the form the runtime's fallback also gives it (``clika_runtime.kernels.attention_op``).
"""

from __future__ import annotations

from pathlib import Path

import onnx

from clika_runtime.kernels.attention_op import model_with_gqa


def read_continuous(path: Path) -> onnx.ModelProto:
    """A continuous graph file (without its weights) with any StepAttention in GroupQueryAttention form."""
    return onnx.load_from_string(model_with_gqa(Path(path).read_bytes()))

"""Qwen2 / Qwen2.5: the llama layout with a bias on the q/k/v projections (none on o_proj)."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import numpy as np

from clika_export.checkpoint import Checkpoint, CheckpointError
from clika_export.graph.decoder import BuiltGraph, DecoderSpec, build_decoder

NAME = "qwen2"


def build(
    checkpoint: Checkpoint,
    folder: Path,
    context_window: int,
    on_layer: Callable[[int], None] | None = None,
    on_tensor: Callable[[str, np.ndarray], None] | None = None,
) -> BuiltGraph:
    """Write the step graph of a qwen2 checkpoint into ``folder``."""
    for name in ("q_proj", "k_proj", "v_proj"):
        if not checkpoint.has(f"model.layers.0.self_attn.{name}.bias"):
            raise CheckpointError(f"qwen2 checkpoint has no {name} bias (qwen2 attention has q/k/v biases)")
    spec = DecoderSpec(checkpoint.architecture, context_window, qkv_bias=True, o_bias=False)
    return build_decoder(spec, checkpoint, folder, on_layer=on_layer, on_tensor=on_tensor)

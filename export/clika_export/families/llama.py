"""Llama (and llama-shaped checkpoints such as SmolLM2): RMSNorm, GQA with rotary, SwiGLU.

``attention_bias`` in a llama config puts a bias on q/k/v *and* o_proj.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import numpy as np

from clika_export.checkpoint import Checkpoint, CheckpointError
from clika_export.graph.decoder import BuiltGraph, DecoderSpec, build_decoder

NAME = "llama"


def build(
    checkpoint: Checkpoint,
    folder: Path,
    context_window: int,
    on_layer: Callable[[int], None] | None = None,
    on_tensor: Callable[[str, np.ndarray], None] | None = None,
) -> BuiltGraph:
    """Write the step graph of a llama checkpoint into ``folder``."""
    arch = checkpoint.architecture
    if arch.attention_bias:
        for name in ("q_proj", "k_proj", "v_proj", "o_proj"):
            if not checkpoint.has(f"model.layers.0.self_attn.{name}.bias"):
                raise CheckpointError(f"llama checkpoint declares attention_bias but has no {name} bias")
    spec = DecoderSpec(arch, context_window, qkv_bias=arch.attention_bias, o_bias=arch.attention_bias)
    return build_decoder(spec, checkpoint, folder, on_layer=on_layer, on_tensor=on_tensor)

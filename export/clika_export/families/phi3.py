"""Phi-3 / Phi-3.5 / Phi-4-mini: fused qkv and gate/up (split by the readers), longrope, partial rotary.

The readers present ``qkv_proj`` and ``gate_up_proj`` as the llama names, so
the graph is llama's with a rotary table over ``partial_rotary_factor`` of each
head and, where the config has one, a sliding window on every layer.
"""

from __future__ import annotations

from clika_export.checkpoint import Checkpoint
from clika_export.families.config_facts import (
    FULL,
    SLIDING,
    activation,
    global_rope,
    layer_types,
    rotary_dim,
    sliding_window,
    windowed_layers,
)
from clika_export.families.decoder_family import DecoderFamily
from clika_export.graph.decoder import DecoderSpec
from clika_export.graph.decoder_spec import GLOBAL_ROPE

NAME = "phi3"


def decoder_spec(checkpoint: Checkpoint, context_window: int) -> DecoderSpec:
    """The decoder of a phi3 checkpoint."""
    activation(checkpoint, "silu")
    window = sliding_window(checkpoint)
    types = layer_types(checkpoint, lambda _: SLIDING if window is not None else FULL)
    ropes = {GLOBAL_ROPE: global_rope(checkpoint, rotary_dim(checkpoint))}
    bias = checkpoint.architecture.attention_bias
    return DecoderSpec(
        checkpoint.architecture,
        context_window,
        qkv_bias=bias,
        o_bias=bias,
        ropes=ropes,
        layers=windowed_layers(types, window, ropes),
    )


build = DecoderFamily(NAME, decoder_spec).build

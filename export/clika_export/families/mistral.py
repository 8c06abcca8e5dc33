"""Mistral: the llama layout with sliding-window attention on every layer (``sliding_window``).

GGUF files of Mistral models carry llama.cpp's ``llama`` architecture and come
through the llama family (llama.cpp records no window for them).
"""

from __future__ import annotations

from clika_export.checkpoint import Checkpoint
from clika_export.families.config_facts import (
    SLIDING,
    activation,
    global_rope,
    layer_types,
    refuse_partial_rotary,
    sliding_window,
    windowed_layers,
)
from clika_export.families.decoder_family import DecoderFamily
from clika_export.graph.decoder import DecoderSpec
from clika_export.graph.decoder_spec import GLOBAL_ROPE

NAME = "mistral"


def decoder_spec(checkpoint: Checkpoint, context_window: int) -> DecoderSpec:
    """The decoder of a mistral checkpoint: every layer windowed when the config has a window."""
    activation(checkpoint, "silu")
    refuse_partial_rotary(checkpoint)
    window = sliding_window(checkpoint)
    types = layer_types(checkpoint, lambda _: SLIDING if window is not None else "full_attention")
    ropes = {GLOBAL_ROPE: global_rope(checkpoint)}
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

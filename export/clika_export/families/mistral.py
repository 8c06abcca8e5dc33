"""Mistral: the llama layout with sliding-window attention on every layer (``sliding_window``).

GGUF files of Mistral models carry llama.cpp's ``llama`` architecture and come
through the llama family (llama.cpp records no window for them).
"""

from __future__ import annotations

from clika_export.checkpoint import Checkpoint
from clika_export.families.config_facts import activation, global_rope, refuse_partial_rotary
from clika_export.families.decoder_family import DecoderFamily
from clika_export.families.uniform_window import uniform_window_spec
from clika_export.graph.decoder import DecoderSpec

NAME = "mistral"


def decoder_spec(checkpoint: Checkpoint, context_window: int) -> DecoderSpec:
    """The decoder of a mistral checkpoint: every layer windowed when the config has a window."""
    activation(checkpoint, "silu")
    refuse_partial_rotary(checkpoint)
    return uniform_window_spec(checkpoint, context_window, global_rope(checkpoint))


build = DecoderFamily(NAME, decoder_spec).build

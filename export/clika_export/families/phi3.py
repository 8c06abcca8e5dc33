"""Phi-3 / Phi-3.5 / Phi-4-mini: fused qkv and gate/up (split by the readers), longrope, partial rotary.

The readers present ``qkv_proj`` and ``gate_up_proj`` as the llama names, so
the graph is llama's with a rotary table over ``partial_rotary_factor`` of each
head and, where the config has one, a sliding window on every layer.
"""

from __future__ import annotations

from clika_export.checkpoint import Checkpoint
from clika_export.families.config_facts import activation, global_rope, rotary_dim
from clika_export.families.decoder_family import DecoderFamily
from clika_export.families.uniform_window import uniform_window_spec
from clika_export.graph.decoder import DecoderSpec

NAME = "phi3"


def decoder_spec(checkpoint: Checkpoint, context_window: int) -> DecoderSpec:
    """The decoder of a phi3 checkpoint."""
    activation(checkpoint, "silu")
    return uniform_window_spec(checkpoint, context_window, global_rope(checkpoint, rotary_dim(checkpoint)))


build = DecoderFamily(NAME, decoder_spec).build

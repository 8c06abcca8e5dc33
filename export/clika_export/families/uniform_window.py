"""The decoder of llama-layout families whose config windows every layer alike (Mistral, Phi-3).

Such a config has one ``sliding_window`` (or none) for the whole model and one
rope table; the families differ only in that table (whole heads, or
``partial_rotary_factor`` of each head).
"""

from __future__ import annotations

from clika_export.checkpoint import Checkpoint
from clika_export.families.config_facts import FULL, SLIDING, layer_types, sliding_window, windowed_layers
from clika_export.graph.decoder import DecoderSpec
from clika_export.graph.decoder_spec import GLOBAL_ROPE, RopeSpec


def uniform_window_spec(checkpoint: Checkpoint, context_window: int, rope: RopeSpec) -> DecoderSpec:
    """Every layer windowed when the config has a window (else full attention), all on ``rope``."""
    window = sliding_window(checkpoint)
    types = layer_types(checkpoint, lambda _: SLIDING if window is not None else FULL)
    ropes = {GLOBAL_ROPE: rope}
    bias = checkpoint.architecture.attention_bias
    return DecoderSpec(
        checkpoint.architecture,
        context_window,
        qkv_bias=bias,
        o_bias=bias,
        ropes=ropes,
        layers=windowed_layers(types, window, ropes),
    )

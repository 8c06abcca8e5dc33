"""OLMo 2: norms after each block (none before), RMSNorm over the whole q and k projections."""

from __future__ import annotations

from clika_export.checkpoint import Checkpoint
from clika_export.families.config_facts import llama_layers
from clika_export.families.decoder_family import DecoderFamily
from clika_export.graph.decoder import DecoderSpec

NAME = "olmo2"


def decoder_spec(checkpoint: Checkpoint, context_window: int) -> DecoderSpec:
    """The decoder of an olmo2 checkpoint."""
    arch = checkpoint.architecture
    ropes, layers = llama_layers(checkpoint)
    bias = arch.attention_bias
    return DecoderSpec(
        arch,
        context_window,
        qkv_bias=bias,
        o_bias=bias,
        qk_norm="full",
        norms="post",
        ropes=ropes,
        layers=layers,
    )


build = DecoderFamily(NAME, decoder_spec).build

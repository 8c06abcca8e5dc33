"""Qwen3: the llama layout with RMSNorm on each query and key head before rotary (no q/k/v bias)."""

from __future__ import annotations

from clika_export.checkpoint import Checkpoint
from clika_export.families.config_facts import llama_layers
from clika_export.families.decoder_family import DecoderFamily
from clika_export.graph.decoder import DecoderSpec

NAME = "qwen3"


def decoder_spec(checkpoint: Checkpoint, context_window: int) -> DecoderSpec:
    """The decoder of a qwen3 checkpoint."""
    arch = checkpoint.architecture
    ropes, layers = llama_layers(checkpoint)
    bias = arch.attention_bias
    return DecoderSpec(
        arch, context_window, qkv_bias=bias, o_bias=bias, qk_norm="head", ropes=ropes, layers=layers
    )


build = DecoderFamily(NAME, decoder_spec).build

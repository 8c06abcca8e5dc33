"""Granite (3.x): the llama layout with four multipliers.

Embeddings times ``embedding_multiplier``, each block's output times
``residual_multiplier`` before it joins the residual, attention scores scaled
by ``attention_multiplier`` (in place of ``1/sqrt(head_dim)``), logits divided
by ``logits_scaling``.
"""

from __future__ import annotations

from clika_export.checkpoint import Checkpoint, CheckpointError
from clika_export.families.config_facts import llama_layers, number
from clika_export.families.decoder_family import DecoderFamily
from clika_export.graph.decoder import DecoderSpec

NAME = "granite"


def decoder_spec(checkpoint: Checkpoint, context_window: int) -> DecoderSpec:
    """The decoder of a granite checkpoint."""
    arch = checkpoint.architecture
    ropes, layers = llama_layers(checkpoint)
    divisor = number(checkpoint, "logits_scaling", 1.0)
    if divisor == 0:
        raise CheckpointError("granite logits_scaling must not be 0")
    bias = arch.attention_bias
    return DecoderSpec(
        arch,
        context_window,
        qkv_bias=bias,
        o_bias=bias,
        embedding_scale=number(checkpoint, "embedding_multiplier", 1.0),
        residual_scale=number(checkpoint, "residual_multiplier", 1.0),
        attention_scale=number(checkpoint, "attention_multiplier", arch.head_dim**-0.5),
        logits_scale=1.0 / divisor,
        ropes=ropes,
        layers=layers,
    )


build = DecoderFamily(NAME, decoder_spec).build

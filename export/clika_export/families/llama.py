"""Llama (and llama-shaped checkpoints such as SmolLM2): RMSNorm, GQA with rotary, SwiGLU.

``attention_bias`` in a llama config puts a bias on q/k/v *and* o_proj.
"""

from __future__ import annotations

from clika_export.checkpoint import Checkpoint, CheckpointError
from clika_export.families.config_facts import llama_layers
from clika_export.families.decoder_family import DecoderFamily
from clika_export.graph.decoder import DecoderSpec

NAME = "llama"


def decoder_spec(checkpoint: Checkpoint, context_window: int) -> DecoderSpec:
    """The decoder of a llama checkpoint (its biases checked against its config)."""
    arch = checkpoint.architecture
    if arch.attention_bias:
        for name in ("q_proj", "k_proj", "v_proj", "o_proj"):
            if not checkpoint.has(f"model.layers.0.self_attn.{name}.bias"):
                raise CheckpointError(f"llama checkpoint declares attention_bias but has no {name} bias")
    ropes, layers = llama_layers(checkpoint)
    bias = arch.attention_bias
    return DecoderSpec(arch, context_window, qkv_bias=bias, o_bias=bias, ropes=ropes, layers=layers)


build = DecoderFamily(NAME, decoder_spec).build

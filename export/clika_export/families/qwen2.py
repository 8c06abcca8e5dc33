"""Qwen2 / Qwen2.5: the llama layout with a bias on the q/k/v projections (none on o_proj).

Qwen2-VL's text model is qwen2 rotating by M-RoPE: ``clika_export.readers.multimodal``
puts its ``mrope_section`` at the config's top level, and the spec carries it.
"""

from __future__ import annotations

from clika_export.checkpoint import Checkpoint, CheckpointError
from clika_export.families.config_facts import llama_layers
from clika_export.families.decoder_family import DecoderFamily
from clika_export.graph.decoder import DecoderSpec

NAME = "qwen2"


def decoder_spec(checkpoint: Checkpoint, context_window: int) -> DecoderSpec:
    """The decoder of a qwen2 checkpoint (its q/k/v biases checked)."""
    for name in ("q_proj", "k_proj", "v_proj"):
        if not checkpoint.has(f"model.layers.0.self_attn.{name}.bias"):
            raise CheckpointError(f"qwen2 checkpoint has no {name} bias (qwen2 attention has q/k/v biases)")
    ropes, layers = llama_layers(checkpoint)
    section = checkpoint.config.get("mrope_section")
    try:
        return DecoderSpec(
            checkpoint.architecture,
            context_window,
            qkv_bias=True,
            ropes=ropes,
            layers=layers,
            mrope_section=tuple(section) if section is not None else None,
        )
    except ValueError as exc:
        raise CheckpointError(f"config.json: {exc}") from None


build = DecoderFamily(NAME, decoder_spec).build

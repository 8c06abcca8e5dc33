"""SmolLM3: the llama layout where every fourth layer has no rotary embedding (NoPE).

``no_rope_layers[i]`` is 1 where layer ``i`` rotates; without the list, every
``no_rope_layer_interval``-th layer (4) skips rotary.
"""

from __future__ import annotations

import dataclasses

from clika_export.checkpoint import Checkpoint, CheckpointError
from clika_export.families.config_facts import llama_layers
from clika_export.families.decoder_family import DecoderFamily
from clika_export.graph.decoder import DecoderSpec

NAME = "smollm3"
INTERVAL = 4


def rotating_layers(checkpoint: Checkpoint) -> list[bool]:
    """Which layers apply rotary."""
    n = checkpoint.architecture.num_layers
    flags = checkpoint.config.get("no_rope_layers")
    if flags is None:
        every = int(checkpoint.config.get("no_rope_layer_interval") or INTERVAL)
        return [(i + 1) % every != 0 for i in range(n)]
    if not isinstance(flags, list) or len(flags) < n or any(f not in (0, 1) for f in flags[:n]):
        raise CheckpointError(f"no_rope_layers must hold 0 or 1 for each of the {n} layers")
    return [bool(f) for f in flags[:n]]


def decoder_spec(checkpoint: Checkpoint, context_window: int) -> DecoderSpec:
    """The decoder of a smollm3 checkpoint."""
    arch = checkpoint.architecture
    ropes, layers = llama_layers(checkpoint)
    layers = tuple(
        layer if rotates else dataclasses.replace(layer, rope=None)
        for layer, rotates in zip(layers, rotating_layers(checkpoint), strict=True)
    )
    bias = arch.attention_bias
    return DecoderSpec(arch, context_window, qkv_bias=bias, o_bias=bias, ropes=ropes, layers=layers)


build = DecoderFamily(NAME, decoder_spec).build

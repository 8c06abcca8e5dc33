"""What Gemma 2 and Gemma 3 share: norms around both blocks, GeGLU, scaled embeddings, windows.

Sliding-window layers alternate with global ones (the config's ``layer_types``,
else each generation's pattern); attention scores are scaled by
``query_pre_attn_scalar ** -0.5``, and soft-capped when the config says so.
"""

from __future__ import annotations

import math
from collections.abc import Callable

from clika_export.checkpoint import Checkpoint
from clika_export.families.config_facts import (
    activation,
    layer_types,
    number,
    refuse_partial_rotary,
    ropes_by_layer_type,
    sliding_window,
    windowed_layers,
)
from clika_export.graph.decoder import DecoderSpec


def gemma_spec(
    checkpoint: Checkpoint, context_window: int, pattern: Callable[[int], str], *, qk_norm: bool
) -> DecoderSpec:
    """The decoder of a Gemma checkpoint whose default layer types follow ``pattern``."""
    arch = checkpoint.architecture
    activation(checkpoint, "gelu_tanh")
    refuse_partial_rotary(checkpoint)
    types = layer_types(checkpoint, pattern)
    ropes = ropes_by_layer_type(checkpoint, types)
    return DecoderSpec(
        arch,
        context_window,
        qkv_bias=arch.attention_bias,
        o_bias=arch.attention_bias,
        qk_norm="head" if qk_norm else None,
        norms="sandwich",
        activation="gelu_tanh",
        embedding_scale=math.sqrt(arch.hidden_size),
        attention_scale=number(checkpoint, "query_pre_attn_scalar", arch.head_dim) ** -0.5,
        attn_softcap=number(checkpoint, "attn_logit_softcapping", 0.0),
        final_softcap=number(checkpoint, "final_logit_softcapping", 0.0),
        ropes=ropes,
        layers=windowed_layers(types, sliding_window(checkpoint), ropes),
    )

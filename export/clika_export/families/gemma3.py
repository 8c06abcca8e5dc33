"""Gemma 3 (text): five sliding layers per global one, q/k RMSNorm, a local rope base for sliding layers."""

from __future__ import annotations

from clika_export.checkpoint import Checkpoint
from clika_export.families.config_facts import FULL, SLIDING
from clika_export.families.decoder_family import DecoderFamily
from clika_export.families.gemma import gemma_spec
from clika_export.graph.decoder import DecoderSpec

NAME = "gemma3"
# Every sixth layer is global unless the config lists its layer types.
PATTERN = 6


def decoder_spec(checkpoint: Checkpoint, context_window: int) -> DecoderSpec:
    """The decoder of a gemma3 text checkpoint."""
    every = int(checkpoint.config.get("sliding_window_pattern") or PATTERN)
    return gemma_spec(
        checkpoint, context_window, lambda i: FULL if (i + 1) % every == 0 else SLIDING, qk_norm=True
    )


build = DecoderFamily(NAME, decoder_spec).build

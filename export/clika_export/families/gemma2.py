"""Gemma 2: sliding and global layers alternating, attention and final logits soft-capped."""

from __future__ import annotations

from clika_export.checkpoint import Checkpoint
from clika_export.families.config_facts import FULL, SLIDING
from clika_export.families.decoder_family import DecoderFamily
from clika_export.families.gemma import gemma_spec
from clika_export.graph.decoder import DecoderSpec

NAME = "gemma2"


def decoder_spec(checkpoint: Checkpoint, context_window: int) -> DecoderSpec:
    """The decoder of a gemma2 checkpoint: even layers slide, odd ones see everything."""
    return gemma_spec(checkpoint, context_window, lambda i: SLIDING if i % 2 == 0 else FULL, qk_norm=False)


build = DecoderFamily(NAME, decoder_spec).build

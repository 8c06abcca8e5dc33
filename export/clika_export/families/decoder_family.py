"""What the families share: their step graph is the decoder graph of a ``DecoderSpec``.

A family module states how its checkpoints map onto a ``DecoderSpec`` (checking
what its layout demands) and takes its ``build`` from :class:`DecoderFamily`.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from clika_export.checkpoint import Checkpoint
from clika_export.graph.decoder import BuiltGraph, DecoderSpec, build_decoder


@dataclass(frozen=True)
class DecoderFamily:
    """A family named ``name`` whose checkpoints ``spec_of(checkpoint, context_window)`` describes."""

    name: str
    spec_of: Callable[[Checkpoint, int], DecoderSpec]

    def build(
        self,
        checkpoint: Checkpoint,
        folder: Path,
        context_window: int,
        on_layer: Callable[[int], None] | None = None,
        on_tensor: Callable[[str, np.ndarray], None] | None = None,
        media_inputs: bool = False,
    ) -> BuiltGraph:
        """Write the step graph of a checkpoint of this family into ``folder``
        (``media_inputs``: with the media embeddings' inputs, for a folder with a vision tower)."""
        spec = self.spec_of(checkpoint, context_window)
        return build_decoder(
            spec, checkpoint, folder, on_layer=on_layer, on_tensor=on_tensor, media_inputs=media_inputs
        )

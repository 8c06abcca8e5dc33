"""An opened vision graph and what a family's embedding code reads beside it."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np

from clika_runtime.contract.manifest import VisionSpec
from clika_runtime.media.embedding_cache import EmbeddingCache


@dataclass(frozen=True)
class VisionGraph:
    """A folder's vision graph (one ORT session) with its processor's settings and recent embeddings."""

    spec: VisionSpec
    settings: Any  # the family's processor settings (its SETTINGS type)
    video: Any  # the family's video processor settings (Qwen2-VL's), None when it has none
    session: Any  # onnxruntime.InferenceSession
    cache: EmbeddingCache

    def embeds(self, feeds: dict[str, np.ndarray]) -> np.ndarray:
        """The graph's embeddings output for ``feeds`` (one ORT run)."""
        (out,) = self.session.run([self.spec.embeds_output], feeds)
        return out

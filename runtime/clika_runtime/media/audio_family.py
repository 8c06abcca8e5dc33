"""What an audio family module provides: the one place an audio checkpoint family's choices live.

A manifest's ``audio.family`` (``qwen2_audio``) names a module under
``clika_runtime.media.families``, listed in its registry. The module says which
marker its chat template emits per clip, which inputs its graph takes and how
they are made from a clip's samples, and how many of the graph's rows a clip
keeps; ``AudioTower`` and ``AudioPrompts`` ask it instead of comparing names.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Protocol

import numpy as np

from clika_runtime.media.audio_features import AudioSettings


class AudioFamily(Protocol):
    """An audio family module's constants and functions."""

    NAME: str  # the manifest's audio.family
    MARKER: str  # what its chat template emits for one clip (one audio token)
    CLIP_TEXT: str  # a clip as its chat template emits it (put before a prompt without a template)
    INPUTS: frozenset[str]  # its graph's input names

    def check_settings(self, settings: AudioSettings) -> None:
        """Refuse (ManifestError) feature extractor settings its encoder cannot read."""
        ...

    def tokens(self, samples: int, settings: AudioSettings) -> int:
        """The prompt tokens a clip of ``samples`` samples takes."""
        ...

    def embed(
        self, run: Callable[[dict[str, np.ndarray]], np.ndarray], clip: np.ndarray, settings: AudioSettings
    ) -> tuple[np.ndarray, str]:
        """A checked clip's embedding rows (``run``: one graph run) and the text its marker expands to."""
        ...

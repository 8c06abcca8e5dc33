"""What a vision family module provides: the one place a vision checkpoint family's choices live.

A manifest's ``vision.family`` (``idefics3``, ``qwen2_vl``) names a module
under ``clika_runtime.media.families``, listed in its registry. The module says
which processor configs it reads and into what settings, which markers its chat
template emits, whether it reads videos, and how its graph's inputs are made
from pixels and its outputs become embeddings; ``VisionTower``,
``ImagePrompts`` and ``processor_config`` ask it instead of comparing names.
"""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import Any, Protocol

import numpy as np

from clika_runtime.contract.manifest import VisionSpec
from clika_runtime.media.arguments import VideoClip
from clika_runtime.media.embedding import MediaEmbedding
from clika_runtime.media.vision_graph import VisionGraph


class VisionFamily(Protocol):
    """A vision family module's constants and functions."""

    NAME: str  # the manifest's vision.family
    PROCESSOR_TYPES: tuple[str, ...]  # the image_processor_type values it reads (without "Fast")
    SETTINGS: type  # what settings_from_config returns
    IMAGE_MARKER: str  # what its chat template emits for one image
    VIDEO_MARKER: str  # what its chat template emits for one video
    VIDEO_TOKEN: bool  # its video marker is a token of its own, whose positions take media rows too
    MROPE: bool  # its text model rotates a prompt with media by M-RoPE (``PromptMedia.rope``)

    def settings_from_config(self, config: Mapping[str, Any]) -> Any:
        """A ``preprocessor_config.json`` of one of its PROCESSOR_TYPES read into its SETTINGS."""
        ...

    def check_spec(self, spec: VisionSpec) -> None:
        """Refuse (ManifestError) a manifest entry whose details its graph cannot run with."""
        ...

    def video_settings(self, folder: Path, settings: Any) -> Any:
        """How the folder's clips are sampled and resized beyond ``settings`` (None: nothing more)."""
        ...

    def reads_video(self, folder: Path, spec: VisionSpec) -> bool:
        """True when ``videos=`` ride a user turn of this folder's model (``supports_video``)."""
        ...

    def embeds_videos(self, spec: VisionSpec, settings: Any) -> bool:
        """True when its tower embeds clips (else ``embed_videos`` refuses them)."""
        ...

    def embed_images(self, graph: VisionGraph, images: list[np.ndarray]) -> list[MediaEmbedding]:
        """One embedding per checked uint8 [H, W, 3] image, from the graph or its cache."""
        ...

    def embed_videos(
        self, graph: VisionGraph, clips: list[VideoClip], *, fps: float | None, max_frames: int | None
    ) -> list[MediaEmbedding]:
        """One embedding per checked clip, its frames sampled at ``fps`` (None: its own rate)."""
        ...

"""An Idefics3 / SmolVLM ``preprocessor_config.json`` read into ``Idefics3Settings``
(with SmolVLM2's ``video_sampling`` when the checkpoint reads videos)."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from clika_runtime.media.idefics3 import Idefics3Settings, VideoSampling
from clika_runtime.media.processor_fields import (
    PROCESSOR_FILE,
    ProcessorConfigError,
    edge,
    field,
    pixels_steps,
    positive,
)


def idefics3_settings(config: Mapping[str, Any]) -> Idefics3Settings:
    d = Idefics3Settings()
    resize = field(config, "do_resize", bool, True)
    return Idefics3Settings(
        longest_edge=edge(config, "size", d.longest_edge or 1456) if resize else None,
        tile_edge=edge(config, "max_image_size", d.tile_edge),
        split=field(config, "do_image_splitting", bool, d.split),
        video=_video_sampling(config),
        **pixels_steps(config, d.mean, d.std),
    )


def _video_sampling(config: Mapping[str, Any]) -> VideoSampling | None:
    """SmolVLM2's ``video_sampling`` (None when the checkpoint reads images only)."""
    entry = field(config, "video_sampling", dict, None)
    if entry is None:
        return None
    d = VideoSampling()
    fps = field(entry, "fps", (float, int), d.fps)
    if not fps > 0:
        raise ProcessorConfigError(f"{PROCESSOR_FILE}: video_sampling.fps must be positive, got {fps}")
    return VideoSampling(
        fps=float(fps),
        max_frames=positive(entry, "max_frames", d.max_frames),
        longest_edge=edge(entry, "video_size", d.longest_edge),
    )

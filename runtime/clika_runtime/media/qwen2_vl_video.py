"""Qwen2-VL's video processor settings: the pixel bounds and sampling rate a clip is read at.

Qwen2VLVideoProcessor resizes every frame with the image processor's smart
resize but its own pixel bounds (``size.shortest_edge`` / ``longest_edge``,
or the older ``min_pixels`` / ``max_pixels``: 128 and 768 merged patches by
default), and the reference pipeline samples 2 frames a second, at most 768.
A checkpoint saved with a ``video_preprocessor_config.json`` names its own;
without one the image processor's layout (patch, merge, temporal patch sizes,
mean and std) holds with the video defaults' bounds.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from clika_runtime.media.processor_fields import PROCESSOR_FILE, ProcessorConfigError
from clika_runtime.media.qwen2_vl import Qwen2VLSettings
from clika_runtime.media.qwen2_vl_config import qwen2_vl_settings

VIDEO_PROCESSOR_FILE = "video_preprocessor_config.json"
VIDEO_MIN_PIXELS = 128 * 28 * 28
VIDEO_MAX_PIXELS = 768 * 28 * 28
VIDEO_FPS = 2.0
VIDEO_MAX_FRAMES = 768


@dataclass(frozen=True)
class Qwen2VLVideoSettings:
    """How a clip's frames are sampled and resized before pairing into temporal patches."""

    pixels: Qwen2VLSettings
    fps: float = VIDEO_FPS
    max_frames: int = VIDEO_MAX_FRAMES


def _with_video_bounds(config: dict[str, Any]) -> dict[str, Any]:
    """``config`` with the video processor's default pixel bounds where it names none."""
    size = config.get("size")
    size = size if isinstance(size, dict) else {}
    return {**config, "size": {"shortest_edge": VIDEO_MIN_PIXELS, "longest_edge": VIDEO_MAX_PIXELS, **size}}


def video_settings(config: dict[str, Any], image: Qwen2VLSettings) -> Qwen2VLVideoSettings:
    """The settings a video processor ``config`` names (``{}``: the defaults over ``image``'s layout)."""
    layout = {
        "patch_size": image.patch_size,
        "temporal_patch_size": image.temporal_patch_size,
        "merge_size": image.merge_size,
        "image_mean": list(image.mean) if image.mean is not None else None,
        "image_std": list(image.std) if image.std is not None else None,
    }
    merged = _with_video_bounds({**{k: v for k, v in layout.items() if v is not None}, **config})
    try:
        pixels = qwen2_vl_settings(merged)
    except ProcessorConfigError as exc:
        raise ProcessorConfigError(str(exc).replace(PROCESSOR_FILE, VIDEO_PROCESSOR_FILE)) from None
    if pixels.temporal_patch_size != image.temporal_patch_size or pixels.patch_size != image.patch_size:
        raise ProcessorConfigError(
            f"{VIDEO_PROCESSOR_FILE}: its patch sizes disagree with {PROCESSOR_FILE}'s (one vision graph)"
        )
    fps = config.get("fps", VIDEO_FPS)
    if isinstance(fps, bool) or not isinstance(fps, (int, float)) or not fps > 0:
        raise ProcessorConfigError(f"{VIDEO_PROCESSOR_FILE}: fps must be a positive number, got {fps!r}")
    max_frames = config.get("max_frames", VIDEO_MAX_FRAMES)
    if isinstance(max_frames, bool) or not isinstance(max_frames, int) or max_frames < 1:
        raise ProcessorConfigError(
            f"{VIDEO_PROCESSOR_FILE}: max_frames must be a positive integer, got {max_frames!r}"
        )
    return Qwen2VLVideoSettings(pixels, float(fps), max_frames)


def read_video_settings(folder: str | Path, image: Qwen2VLSettings | None = None) -> Qwen2VLVideoSettings:
    """The folder's video settings: its ``video_preprocessor_config.json``, else the defaults."""
    path = Path(folder) / VIDEO_PROCESSOR_FILE
    image = image if image is not None else Qwen2VLSettings()
    if not path.is_file():
        return video_settings({}, image)
    try:
        config = json.loads(path.read_text(encoding="utf-8"))
    except (json.JSONDecodeError, UnicodeDecodeError) as exc:
        raise ProcessorConfigError(f"{VIDEO_PROCESSOR_FILE} is not valid JSON: {exc}") from None
    if not isinstance(config, dict):
        raise ProcessorConfigError(f"{VIDEO_PROCESSOR_FILE} must hold a JSON object")
    return video_settings(config, image)

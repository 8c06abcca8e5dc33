"""What a Qwen2-VL export records for videos: the ``<|video_pad|>`` id and the video processor config.

A Qwen2-VL checkpoint reads clips through the same vision graph as images
(consecutive frames paired into temporal patches); the prompt holds one
``<|video_pad|>`` per merged patch of the clip, so the manifest's vision entry
names that token. A checkpoint saved with its own ``video_preprocessor_config.json``
(pixel bounds, sampling rate) keeps it beside the image processor's config.
"""

from __future__ import annotations

import dataclasses
import shutil
from pathlib import Path
from typing import Any

from clika_runtime.manifest import VisionSpec
from clika_runtime.media.qwen2_vl_video import VIDEO_PROCESSOR_FILE, read_video_settings


def with_video(spec: VisionSpec, source: Path, out: Path, config: dict[str, Any]) -> VisionSpec:
    """``spec`` naming the checkpoint's video token, its video processor config copied into ``out``."""
    token = config.get("video_token_id")
    if (source / VIDEO_PROCESSOR_FILE).is_file():
        read_video_settings(source)  # refuse a video config the runtime could not follow, now
        shutil.copyfile(source / VIDEO_PROCESSOR_FILE, out / VIDEO_PROCESSOR_FILE)
    if not isinstance(token, int) or isinstance(token, bool):
        return spec  # a checkpoint without a video token reads images only
    return dataclasses.replace(spec, video_token_id=token)

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

from clika_runtime.contract.manifest import VisionSpec
from clika_runtime.media.processor_config import PROCESSOR_FILE, ProcessorConfigError, read_processor_settings
from clika_runtime.media.qwen2_vl import Qwen2VLSettings
from clika_runtime.media.qwen2_vl_video import VIDEO_PROCESSOR_FILE, read_video_settings


def video_token_of(source: Path, config: dict[str, Any]) -> int | None:
    """The checkpoint's video token id (None: it reads images only), its video config checked first."""
    if (source / VIDEO_PROCESSOR_FILE).is_file():
        image = read_processor_settings(source)
        if not isinstance(image, Qwen2VLSettings):
            raise ProcessorConfigError(f"{PROCESSOR_FILE} names another model's processor than Qwen2-VL's")
        read_video_settings(source, image)  # refuse a video config the runtime could not follow, now
    token = config.get("video_token_id")
    return token if isinstance(token, int) and not isinstance(token, bool) else None


def with_video(spec: VisionSpec, source: Path, out: Path, token: int | None) -> VisionSpec:
    """``spec`` naming the video token, the checkpoint's video processor config copied into ``out``."""
    if (source / VIDEO_PROCESSOR_FILE).is_file():
        shutil.copyfile(source / VIDEO_PROCESSOR_FILE, out / VIDEO_PROCESSOR_FILE)
    return spec if token is None else dataclasses.replace(spec, video_token_id=token)
